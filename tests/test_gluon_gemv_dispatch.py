"""The Gluon decode GEMV's backend (``kernels/gluon_gemv.py``, on by default on sm_90) is registered for
``fp8_linear`` above the Triton kernels and declines what it cannot take, so CPU calls keep their backends; its
GPU checks are tests/gpu/test_gluon_gemv_gpu.py."""

from __future__ import annotations

import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import gluon_gemv


def _inputs(M=2, N=64, K=256):
    x = torch.randn(M, K).bfloat16()
    w = torch.randn(N, K).to(torch.float8_e4m3fn)
    s = torch.full((N // 32, K // 32), 127, dtype=torch.uint8)
    return x, w, s


def test_registered_and_declines_cpu_tensors():
    assert "gluon" in kernels.backends("fp8_linear")
    assert gluon_gemv.GLUON_GEMV is True
    x, w, s = _inputs()
    assert not gluon_gemv.fits(x, w, s, (32, 32), 32)
    assert kernels.chosen("fp8_linear", x, w, s, (32, 32), 32) == "torch"
