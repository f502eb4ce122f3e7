"""The FP8 decode GEMV kernel (kernels/fp8_triton_jit.py ``fp8_gemv_kernel``, through
``triton_fp8_gemm.gemv``) under Triton's CPU interpreter: 1-4 rows, per-32 and per-128 weight
blocks, with and without a K split, against the fp64 product of the dequantized operands.
The activations are chosen so that their FP8 quantization is exact (E4M3 codes x 2^-8, every
block's amax 448 x 2^-8): the interpreter's fp8 cast does not round to nearest even, and
this way it cannot matter. The products then differ from fp64 only by fp32 summation."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference_fp8, triton_fp8_gemm as tg
g = torch.Generator().manual_seed(0)
checked = 0
for N, K, M, block, act in ((96, 512, 1, (32, 32), 32), (64, 1024, 3, (32, 32), 32), (256, 512, 2, (128, 128), 128),
                            (40, 256, 4, (32, 32), 32)):
    codes = (torch.randn(M, K, generator=g) * 100).to(torch.float8_e4m3fn).float()
    codes.view(M, -1, act)[:, :, 0] = 448.0
    x = (codes * 2.0**-8).bfloat16()
    w = (torch.randn(N, K, generator=g) * 16).to(torch.float8_e4m3fn)
    s = torch.randint(115, 125, (-(-N // block[0]), K // block[1]), generator=g).to(torch.uint8)
    s = s.view(torch.float8_e8m0fnu)
    exact = x.double() @ reference_fp8.dequant(w, s, block).double().T
    for cfg in (tg.GemvConfig(32, 256, 4, 1), tg.GemvConfig(16, 128, 4, 64)):  # one K range; split K
        out = tg.gemv(x, act, w, s, block, torch.float32, config=cfg)
        assert out.shape == (M, N)
        err = float((out.double() - exact).abs().max() / exact.abs().max())
        assert err < 1e-6, (N, K, M, block, cfg, err)
        checked += 1
print("OK", checked)
"""


def test_gemv_kernel_matches_the_exact_product_under_the_interpreter():
    assert "OK 8" in run_interpreted(SCRIPT)
