"""The Triton SwiGLU kernel (kernels/triton_moe.py ``swiglu``, the shared expert's elementwise
step) under Triton's CPU interpreter against ``reference.swiglu``: clamps, route weights,
the column views a merged w1 + w3 GEMM hands it, bf16 and fp32. The interpreter's exp is
not libdevice's, so values may differ by an ulp before the cast; tests/gpu/test_swiglu_gpu.py
runs the compiled kernel against torch on the GPU."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_moe
g = torch.Generator().manual_seed(0)
checked = 0
for dtype in (torch.bfloat16, torch.float32):
    h13 = (torch.randn(5, 2 * 1536, generator=g) * 4).to(dtype)  # merged [gate | up]; past the clamps
    gate, up = h13.split(1536, dim=-1)  # strided views, as the merged GEMM's outputs
    rw = torch.rand(5, 1, generator=g)
    for limit in (0.0, 7.0):
        for route_w in (None, rw):
            ref = reference.swiglu(gate, up, limit, route_w)
            out = triton_moe.swiglu(gate, up, limit, route_w)
            assert out.dtype == ref.dtype and out.shape == ref.shape
            tol = dict(rtol=2**-7, atol=1e-5) if dtype == torch.bfloat16 else dict(rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(out, ref, **tol)
            if limit:  # the clamps bind somewhere, else this case tests nothing more
                assert (gate.float() > limit).any() and (up.float().abs() > limit).any()
            checked += 1
print("OK", checked)
"""


def test_swiglu_kernel_matches_the_reference_under_the_interpreter():
    assert "OK 8" in run_interpreted(SCRIPT)


SPLITS_SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_moe
from deepinfer_adapters.kernels.triton_fp8_gemm import sum_splits
g = torch.Generator().manual_seed(1)
checked = 0
for S, R, I in ((2, 6, 512), (3, 1, 256)):
    parts = torch.randn(S, R, 2 * I, generator=g) * 3  # a K-split w13's fp32 partials [split, pair, gate | up]
    rw = torch.rand(R, generator=g)
    for limit in (0.0, 7.0):
        want_q, want_s = triton_moe.swiglu_quant(sum_splits(parts, torch.bfloat16), rw, limit, 32)
        got_q, got_s = triton_moe.swiglu_quant(parts, rw, limit, 32)
        assert torch.equal(got_q.view(torch.uint8), want_q.view(torch.uint8)) and torch.equal(got_s, want_s)
        first_q, _ = triton_moe.swiglu_quant(parts[0], rw, limit, 32)  # a control: one partial alone differs
        assert not torch.equal(first_q.view(torch.uint8), want_q.view(torch.uint8))
        checked += 1
try:
    triton_moe.swiglu_quant(parts.to(torch.bfloat16), rw, 0.0, 32)
except ValueError as e:
    assert "fp32" in str(e)
    checked += 1
print("OK", checked)
"""


def test_swiglu_quant_adds_k_split_partials_as_the_split_sum_does():
    """``swiglu_quant`` over a K-split GEMM's fp32 partials gives the codes and scales it gives over
    ``sum_splits``' bf16 sum (the Gluon pair GEMV's w13 hands it its partials, ``SWIGLU_ADDS_SPLITS``);
    bf16 partials are refused by name."""
    assert "OK 5" in run_interpreted(SPLITS_SCRIPT)
