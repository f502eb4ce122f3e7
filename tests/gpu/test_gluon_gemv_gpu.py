"""The Gluon decode GEMV (``kernels/gluon_gemv.py``, off by default: slower in the model) on the H200:
against ``reference_fp8.fp8_linear`` with tests/gpu/test_fp8_linear_gpu.py's tolerance, and against the
Triton decode GEMV's FP8 steps (``fp8_gemm_rows_kernel``, 64-row tiles, four 32-deep steps an iteration)
with the same K split: both promote each 32-deep FP8 product in K order with the same scales, so the same
bits are expected. Also: the dispatcher takes it only where it fits while switched on. Skipped without
CUDA or without Triton's Gluon on an sm_90 GPU."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import invariance, reference_fp8
from deepinfer_adapters.model_impl.quant import quant_fp8_blocks


def _hopper_gluon() -> bool:
    if not torch.cuda.is_available():
        return False
    from deepinfer_adapters.kernels.gluon_moe import _gluon_hopper

    return _gluon_hopper(torch.cuda.current_device())


pytestmark = pytest.mark.skipif(not _hopper_gluon(), reason="needs an sm_90 GPU with Triton's Gluon")

BLOCK = (32, 32)


def _gg():
    from deepinfer_adapters.kernels import gluon_gemv

    return gluon_gemv


def _inputs(M, N, K, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(N, K, device="cuda", generator=g) / K**0.5
    w = w * torch.logspace(-2, 1, K, device="cuda")[torch.randperm(K, device="cuda", generator=g)]  # uneven blocks
    w8, scale = quant_fp8_blocks(w, BLOCK)
    x = (torch.randn(M, K, device="cuda", generator=g) * torch.logspace(-3, 2, K, device="cuda")).bfloat16()
    return x, w8, scale


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("M", [1, 5, 16])
@pytest.mark.parametrize("N,K", [(1792, 5120), (1824, 5120), (4096, 1280), (5120, 8192), (5120, 2304)])
def test_gluon_gemv_matches_reference_and_the_triton_fp8_steps(M, N, K):
    gg = _gg()
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg

    x, w8, scale = _inputs(M, N, K, N + M)
    q, s = tg.act_quant(x, 32)
    got = gg.gemv(q, s, w8, scale, torch.bfloat16)
    ref = reference_fp8.fp8_linear(x, w8, scale, BLOCK, 32)
    rel = _rel(got, ref)
    same_split = tg.GemmConfig(16, gg.ROWS, 4, 4, 4, programs=gg.ITEMS)
    triton = tg.gemm(q, s, 32, w8, scale, BLOCK, torch.bfloat16, config=same_split, swapped=True, bf16_steps=False)
    print(f"REPORT gluon gemv M={M} N={N} K={K}: rel={rel:.2e}, bits of the Triton FP8 steps: "
          f"{torch.equal(got, triton)} (rel {_rel(got, triton):.1e})")
    assert got.shape == (M, N) and torch.isfinite(got).all()
    assert rel <= 2e-3
    torch.testing.assert_close(got.float(), ref.float(), rtol=2.0**-7, atol=2.0**-10 * float(ref.float().abs().max()))
    assert torch.equal(got, triton)


@pytest.mark.parametrize("programs", [1, 3, 7])
def test_few_programs_take_many_items_each(monkeypatch, programs):
    """A persistent program's ring runs on across its items (phases included): with 1, 3 or 7 programs each
    takes tens of items of 1 to 3 steps (the last K split of 5120 in 384s is one step), so the ring wraps
    mid-item. The bits must not depend on how the items are shared out."""
    gg = _gg()
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg

    x, w8, scale = _inputs(3, 1792, 5120, 11)
    q, s = tg.act_quant(x, 32)
    full = gg.gemv(q, s, w8, scale, torch.bfloat16)
    monkeypatch.setattr(gg, "_sm_count", lambda device: programs)
    few = gg.gemv(q, s, w8, scale, torch.bfloat16)
    assert torch.equal(few, full)
    assert _rel(few, reference_fp8.fp8_linear(x, w8, scale, BLOCK, 32)) <= 2e-3


def test_dispatch_takes_it_where_it_fits(monkeypatch):
    gg = _gg()
    x, w8, scale = _inputs(4, 1792, 5120, 3)
    assert kernels.chosen("fp8_linear", x, w8, scale, BLOCK, 32) == "gluon"  # on by default
    monkeypatch.setattr(gg, "GLUON_GEMV", False)
    assert kernels.chosen("fp8_linear", x, w8, scale, BLOCK, 32) != "gluon"
    monkeypatch.setattr(gg, "GLUON_GEMV", True)
    out = kernels.fp8_linear(x, w8, scale, BLOCK, 32)
    assert _rel(out, reference_fp8.fp8_linear(x, w8, scale, BLOCK, 32)) <= 2e-3
    x17 = _inputs(17, 1792, 5120, 4)[0]
    assert kernels.chosen("fp8_linear", x17, w8, scale, BLOCK, 32) != "gluon"  # more rows than a product takes
    with invariance.batch_invariant(True):
        assert kernels.chosen("fp8_linear", x, w8, scale, BLOCK, 32) != "gluon"
