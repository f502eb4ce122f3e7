"""Prefill-sized dense FP8 linears on cuBLAS's block-scaled FP8 GEMM (``kernels/fp8_blockwise.py``, Hopper): the
weight re-expressed under wider scales as torch's E4M3 rounding gives it; the GEMM against exact fp64 sums of the
codes and scales it was handed; ``fp8_linear`` taking it by default from LARGE_M rows (not in batch-invariant mode,
not with ``DENSE_FP8`` off), within the FP8 linear tolerance of the reference."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import fp8_blockwise, invariance, reference_fp8
from deepinfer_adapters.kernels import triton_fp8_gemm as tg
from tests.gpu.test_fp8_linear_gpu import _check, _weight, _x

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)"),
    pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                       reason="the layouts are Hopper's"),
]


def _spread_weight(N, K, seed):
    """E4M3 codes with (32, 32) E8M0 scales over 2^-27 .. 2^3: tiles hold blocks far under their largest."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    codes = (torch.randn(N, K, device="cuda", generator=g) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
    exps = torch.randint(100, 131, (-(-N // 32), K // 32), device="cuda", generator=g, dtype=torch.uint8)
    return codes, exps


def _per_value(exps, N):
    return (2.0 ** (exps.float() - 127)).repeat_interleave(32, 0)[:N].repeat_interleave(32, 1)


def test_widened_weight_rounds_as_torch():
    N, K = 1000, 1280
    codes, exps = _spread_weight(N, K, seed=0)
    q, qs = fp8_blockwise.widen_weight(codes, exps, (32, 32))
    per_value = _per_value(exps, N)
    # the largest scale of each tile (rows past N padded with zeros) ...
    tiles = torch.nn.functional.pad(per_value, (0, 0, 0, -N % 128)).view(-1, 128, K // 128, 128)
    assert qs.shape == (8, 12) and (qs[:, K // 128:] == 0).all()
    assert torch.equal(qs[:, :K // 128], tiles.amax(dim=(1, 3)))
    wide = qs[:, :K // 128].repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)
    want = (codes.float() * (per_value / wide)).to(torch.float8_e4m3fn)  # ... and each code under it
    assert torch.equal(q.view(torch.uint8), want.view(torch.uint8))
    exact, got = codes.float() * per_value, q.float() * wide
    assert ((got - exact).abs() <= wide * 2.0 ** -10).all() and (got != exact).any()


@pytest.mark.parametrize("M,N,K", [(1024, 1280, 5120), (2048, 4096, 1280), (1027, 5120, 2304), (1030, 512, 5120)])
def test_blockwise_gemm_gives_the_exact_sums_of_its_inputs(M, N, K):
    """K / 128 of 40, 10 and 18 (cuBLAS's weight scales padded to 12 and 20), row counts not a multiple of
    ROW_ALIGN (cuBLAS refused 1027 before they were padded)."""
    codes, exps = _spread_weight(N, K, seed=M)
    x = (torch.randn(M, K, device="cuda", generator=torch.Generator(device="cuda").manual_seed(K)) * 4).bfloat16()
    got = fp8_blockwise.linear(x, codes, exps, (32, 32), 32).double()
    q, s = tg.act_quant(x, 32, scale_block=128)
    wq, ws = fp8_blockwise.widen_weight(codes, exps, (32, 32))
    a = q.double() * s.double().repeat_interleave(128, 1)
    w = wq.double() * ws[:, :K // 128].double().repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)
    want = a @ w.T
    rel = ((got - want).norm() / want.norm()).item()
    print(f"REPORT fp8_blockwise M={M} N={N} K={K}: rel to exact sums {rel:.2e}")
    assert rel < 3e-3  # bf16's rounding of the result plus the FP8 tensor cores' 128-deep sums


@pytest.mark.parametrize("N,K,block,act_block,f32_scale", [
    (1280, 5120, (32, 32), 32, False), (4096, 1280, (32, 32), 32, False), (5120, 2304, (32, 32), 32, False),
    (1024, 4096, (128, 128), 128, True)])  # the last V4's: its scales taken as they are (not yet run on the GPU)
def test_fp8_linear_takes_it_at_prefill_sizes(N, K, block, act_block, f32_scale, monkeypatch):
    calls = []
    real = fp8_blockwise.linear
    monkeypatch.setattr(fp8_blockwise, "linear", lambda *a: calls.append(1) or real(*a))
    w8, scale = _weight(N, K, block, seed=N, f32_scale=f32_scale)
    x = _x(2048, K, seed=K)
    ref = reference_fp8.fp8_linear(x, w8, scale, block, act_block)
    _check(kernels.fp8_linear(x, w8, scale, block, act_block), ref,
           f"fp8_linear fp8_blockwise M=2048 N={N} K={K} {block}")
    assert len(calls) == 1
    with invariance.batch_invariant(True):
        kernels.fp8_linear(x, w8, scale, block, act_block)
    monkeypatch.setattr(fp8_blockwise, "DENSE_FP8", False)
    kernels.fp8_linear(x, w8, scale, block, act_block)
    kernels.fp8_linear(x[:1000], w8, scale, block, act_block)  # under LARGE_M
    assert len(calls) == 1


def test_finer_fp32_scales_are_not_taken():
    """Their ratios need not be powers of two: the re-expression would not be exact."""
    w8, scale = _weight(1280, 5120, (32, 32), seed=0, f32_scale=True)
    assert not fp8_blockwise.takes(_x(2048, 5120, seed=0), w8, scale, (32, 32), 32)
