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


@pytest.mark.parametrize("backend,M,N,K,invariant", [("triton", 1, 384, 5120, False), ("triton", 16, 384, 5120, False),
                                                     ("triton", 300, 384, 5120, True),
                                                     ("cublas_split", 17, 384, 5120, False),
                                                     ("cublas_split", 8192, 384, 5120, False)])
def test_bf16_input_with_fp32_result_is_the_fp32_gemm_of_its_values(backend, M, N, K, invariant):
    """The MoE gate passes its bf16 input as it is (session 15): each backend takes it (no fp32 copy, no
    hi / lo split) and gives what it gives for x.float() -- the same bits on the Triton kernel (hi is x, lo
    0 either way), within fp32 summation order on cuBLAS (one GEMM of n rows instead of 2n)."""
    x32, w = _inputs(M, N, K, 11 + M, bf16_values=True)
    x = x32.bfloat16()
    with invariance.batch_invariant(invariant):
        assert kernels.chosen("linear", x, w) == backend
        # a bf16 result: the Triton kernel where it takes the call (BF16_RESULTS, session 28), else bf16's GEMM
        bf16_backend = "triton" if backend == "triton" else "torch"
        assert kernels.chosen("linear", x, w, out_dtype=torch.bfloat16) == bf16_backend
        got, want = kernels.linear(x, w), kernels.linear(x32, w)
        ref = reference.linear(x32, w)
    assert got.dtype == torch.float32
    magnitude = reference.linear(x32.abs(), w.abs())
    print(f"REPORT linear bf16 input {backend} M={M}: equal to x.float()'s {torch.equal(got, want)}, "
          f"max |err| / sum|xw| {float(((got - ref).abs() / magnitude.clamp_min(1e-30)).max()):.2e}")
    if backend == "triton":
        assert torch.equal(got, want)
    assert bool(((got - ref).abs() <= 2.0**-18 * magnitude).all())


@pytest.mark.parametrize("M,N,K,invariant", [(1, 512, 5120, False), (8, 64, 5120, False), (16, 128, 512, False),
                                             (1, 512, 5120, True), (300, 512, 5120, True)])
def test_bf16_result_on_the_triton_kernel(monkeypatch, M, N, K, invariant):
    """``triton_linear.BF16_RESULTS`` (on since session 28): a bf16 x with a bf16 result (V4.1's
    ratio-1 compressor, the indexer's weights_proj / wk) on the Triton kernel -- the fp32 GEMM of x's values rounded
    once: within one bf16 ulp of cuBLAS's bf16 GEMM (the reference outside invariant mode; both sum in fp32, in other
    orders) and of the fp64 product; in invariant mode a row alone equals the row batched."""
    from deepinfer_adapters.kernels import triton_linear

    monkeypatch.setattr(triton_linear, "BF16_RESULTS", True)
    x32, w = _inputs(M, N, K, 40 + M, bf16_values=True)
    x = x32.bfloat16()
    with invariance.batch_invariant(invariant):
        assert kernels.chosen("linear", x, w, out_dtype=torch.bfloat16) == "triton"
        got = kernels.linear(x, w, out_dtype=torch.bfloat16)
        alone = kernels.linear(x[-1:], w, out_dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16 and got.shape == (M, N)
    exact = torch.nn.functional.linear(x32.double(), w.double())
    cublas = torch.nn.functional.linear(x, w).double()
    ulp = torch.ldexp(torch.ones_like(exact), torch.frexp(exact.abs().clamp_min(1e-30))[1] - 8)
    magnitude = torch.nn.functional.linear(x32.abs().double(), w.abs().double())
    bound = ulp + 2.0**-18 * magnitude  # a bf16 ulp plus the fp32 sums' order (as the fp32-result test)
    same = float((got.double() == cublas).double().mean())
    print(f"REPORT linear bf16 result M={M} N={N} K={K} invariant={invariant}: equal to cuBLAS's {same:.4f}")
    assert bool(((got.double() - exact).abs() <= bound).all())
    assert bool(((got.double() - cublas).abs() <= 2 * bound).all())
    if invariant:
        assert torch.equal(alone, got[-1:])
