"""The rms_norm kernel's in-dtype mode (V4's query norm, kernels/triton_norm_rope.py) under
Triton's CPU interpreter, in float32 (the interpreter's fp32 -> bf16 casts do not round to
nearest even, so bf16 is checked on the GPU: tests/gpu/test_hc_norm_rope_gpu.py): within a few
fp32 ulps of torch's ops (in float32 the rounding steps are no-ops: this checks the kernel's path
and arithmetic, the GPU test its bf16 roundings)."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_norm_rope
g = torch.Generator().manual_seed(0)
for shape in [(3, 4, 512), (1, 2, 96), (5, 7, 64)]:
    q = torch.randn(*shape, generator=g) * 3
    got, want = triton_norm_rope.rms_norm_in_dtype(q, 1e-6), reference.rms_norm_in_dtype(q, 1e-6)
    assert got.shape == want.shape and bool(((got - want).abs() <= 2.0**-19 * want.abs() + 1e-30).all()), shape
print("OK")
"""


def test_rms_norm_in_dtype_kernel_matches_torch_under_the_interpreter():
    assert "OK" in run_interpreted(SCRIPT)
