"""bf16-weight ``linear`` with fp32 inputs (the head, the MoE gate) on CUDA: the batch-invariant
Triton backend against the fp64 reference, and its rows alone against batched."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import invariance, reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


def _inputs(M, N, K, seed, bf16_values):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=g)
    x = x.bfloat16().float() if bf16_values else x
    w = (torch.randn(N, K, device="cuda", generator=g) / K**0.5).bfloat16()
    return x, w


@pytest.mark.parametrize("M,N,K,invariant", [(1, 129280, 512, True), (7, 384, 5120, True), (300, 1000, 96, True),
                                             (1, 384, 5120, False), (16, 129280, 512, False)])
@pytest.mark.parametrize("bf16_values", [True, False])
def test_triton_linear_matches_fp64_reference(M, N, K, invariant, bf16_values):
    """Batch-invariant mode: every row count; default mode: decode's few rows."""
    x, w = _inputs(M, N, K, M + N, bf16_values)
    with invariance.batch_invariant(invariant):
        assert kernels.chosen("linear", x, w) == "triton"
        out = kernels.linear(x, w)
        ref = reference.linear(x, w)  # fp64 accumulation, rounded once
    # fp32 accumulation over K against fp64, plus (x not bf16) the ~2^-17 |x| that hi + lo leave
    # out: a few 1e-7 of sum_k |x_k w_k| per element. Asserted at 2^-18 of it; without lo
    # (x only rounded to bf16) the error would be ~2^-9 / sqrt(K) of it, >= 2.7e-5 here
    magnitude = reference.linear(x.abs(), w.abs())
    err = (out - ref).abs()
    ratio = float((err / magnitude.clamp_min(1e-30)).max())
    print(f"REPORT linear triton invariant={invariant} M={M} N={N} K={K} bf16 x={bf16_values}: max |err| / sum|xw| = {ratio:.2e}")
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert bool((err <= 2.0**-18 * magnitude).all())


def test_invariant_linear_rows_do_not_depend_on_the_batch():
    x, w = _inputs(300, 2000, 5120, 3, bf16_values=False)
    with invariance.batch_invariant(True):
        full = kernels.linear(x, w)
        for rows in (slice(0, 1), slice(7, 8), slice(5, 70), slice(290, 300)):
            assert torch.equal(kernels.linear(x[rows], w), full[rows]), rows


def test_default_mode_keeps_cublas_above_decode_rows():
    x, w = _inputs(17, 384, 512, 5, bf16_values=True)
    with invariance.batch_invariant(False):
        assert kernels.chosen("linear", x, w) == "cublas_split"
        assert kernels.chosen("linear", x[:16], w) == "triton"
