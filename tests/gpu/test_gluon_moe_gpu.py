"""The Gluon MoE GEMM (kernels/gluon_moe.py, Hopper) against the Triton bf16 path it replaces at prefill:
the same bits, tile by tile and through ``moe_experts``, including partial tiles, idle tiles, tails joined to
the tile before (``absorb_tails``; T=4096 x 6 over 192 experts: 128 +- 11 rows an expert, many tails), skewed
routing and batch-invariant mode."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.kernels import gluon_moe, invariance
from deepinfer_adapters.kernels import triton_fp8_gemm as tg
from deepinfer_adapters.kernels import triton_moe
from deepinfer_adapters.model_impl.quant import to_e4m3_tiles
from tests.gpu.moe_inputs import routing

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)"),
    pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                       reason="the kernel is Hopper's (wgmma)"),
]


def _experts(E, N, K, seed):
    """E4M3 experts in 128 x 128 tiles with E8M0 scales per (1, 128) spread over 2^-4 .. 2^3."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = (torch.randn(E, N, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    scale = torch.randint(123, 131, (E, N, K // 128), device="cuda", generator=g, dtype=torch.uint8)
    return to_e4m3_tiles(w), scale


def test_the_real_widths_fit():
    """V4.1's experts as loaded (hidden 5120, width 2304, 384 experts) take the kernel on this GPU."""
    w13, s13 = _experts(2, 4608, 5120, 0)
    w2, s2 = _experts(2, 5120, 2304, 0)
    a = torch.zeros(8, 5120, device="cuda", dtype=torch.bfloat16)
    assert gluon_moe.fits(a, w13, s13, (1, 128), 128)
    assert gluon_moe.fits(a[:, :2304], w2, s2, (1, 128), 128)
    assert not gluon_moe.fits(a, w13, s13, (1, 128), 64)  # other row tiles: the Triton kernel
    assert not gluon_moe.fits(a.float(), w13, s13, (1, 128), 128)
    assert not gluon_moe.fits(a, w13, s13.float(), (1, 128), 128)


# (tokens, experts, N, K, skewed routing): one token's partial tile, idle tiles, skew, tails, many experts; the FP8
# kernel's tests (test_gluon_moe_fp8_gpu.py) take the same cases
GROUPED_CASES = [(5, 8, 256, 384, False), (300, 8, 256, 384, False), (700, 16, 384, 512, True),
                 (2000, 32, 640, 1024, False), (4096, 192, 256, 512, False)]
# prefill-sized moe_experts calls (tokens, skewed routing)
PREFILL_CASES = [(1400, False), (1400, True), (3000, False)]


@pytest.mark.parametrize("T,E,N,K,skew", GROUPED_CASES)
def test_grouped_gemm_gives_the_triton_bits(T, E, N, K, skew):
    """Both of the MoE's GEMMs: gathered token rows (w13) and rows already in sorted order (w2)."""
    w, s = _experts(E, N, K, seed=T)
    _, ids = routing(T, E, 6, seed=T, skew=skew)
    _, tiles, _ = triton_moe.route(ids, E, 128)
    g = torch.Generator(device="cuda").manual_seed(7 + T)
    x = tg.act_quant(torch.randn(T, K, device="cuda", generator=g).bfloat16(), 32, dequant_to=torch.bfloat16)[0]
    rows = T * 6
    want = tg.gemm(x, None, 0, w, s, (1, 128), torch.bfloat16, rows=rows, groups=tiles, config=tg.BF16_LARGE_CONFIG,
                   kstep=128)
    joined = gluon_moe.absorb_tails(tiles)
    tails = int((tiles.expert >= 0).sum() - (joined.expert >= 0).sum())
    for label, groups in (("route tiles", tiles), ("tails joined", joined)):
        got = gluon_moe.grouped_gemm(x.index_select(0, tiles.row_idx), w, s, groups)
        print(f"REPORT gluon moe T={T} E={E} N={N} K={K} skew={skew} {label} ({tails} tails): "
              f"equal {torch.equal(got, want)}")
        assert torch.equal(got, want)
    h = tg.act_quant(torch.randn(rows, K, device="cuda", generator=g).bfloat16(), 32, dequant_to=torch.bfloat16)[0]
    plain = tg.Groups(tiles.expert, tiles.row0, tiles.row1)
    want = tg.gemm(h, None, 0, w, s, (1, 128), torch.bfloat16, rows=rows, groups=plain, config=tg.BF16_LARGE_CONFIG,
                   kstep=128)
    assert torch.equal(gluon_moe.grouped_gemm(h, w, s, tg.Groups(joined.expert, joined.row0, joined.row1)), want)


def prefill_moe(T, skew):
    """A prefill-sized MoE call's inputs (x, route weights, expert ids, (w13, its scales, w2, its scales)): 32
    experts of width 256 at hidden 512, top-6, T tokens, E4M3 tiles with (1, 128) scales."""
    E, D, I, k = 32, 512, 256, 6
    w13, s13 = _experts(E, 2 * I, D, seed=1)
    w2, s2 = _experts(E, D, I, seed=2)
    w, ids = routing(T, E, k, seed=T, skew=skew)
    x = torch.randn(T, D, device="cuda", generator=torch.Generator(device="cuda").manual_seed(T)).bfloat16()
    return x, w, ids, (w13, s13, w2, s2)


@pytest.mark.parametrize("invariant", [False, True], ids=["default", "batch_invariant"])
@pytest.mark.parametrize("T,skew", PREFILL_CASES)
def test_moe_experts_bits_with_and_without_the_kernel(T, skew, invariant, monkeypatch):
    """``moe_experts`` on the bf16 path at prefill sizes: the same output with the Gluon kernel as with
    the Triton one (so batch-invariant mode keeps its bits across decode and prefill)."""
    x, w, ids, experts = prefill_moe(T, skew)
    calls = []
    real = gluon_moe.grouped_gemm
    monkeypatch.setattr(gluon_moe, "grouped_gemm", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    run = lambda: triton_moe.moe_experts(x, w, ids, *experts, (1, 128), 32, 10.0,  # noqa: E731
                                         path=None if invariant else "bf16")
    with invariance.batch_invariant(invariant):
        with_kernel = run()
        monkeypatch.setattr(gluon_moe, "GLUON_MOE", False)
        without = run()
    assert len(calls) == 2  # both GEMMs took the kernel
    assert torch.equal(with_kernel, without)


def test_wrong_widths_are_refused():
    w, s = _experts(4, 256, 384, 0)
    tiles = triton_moe.route(torch.zeros(4, 6, device="cuda", dtype=torch.long), 4, 128)[1]
    with pytest.raises(ValueError, match="columns"):
        gluon_moe.grouped_gemm(torch.zeros(24, 256, device="cuda", dtype=torch.bfloat16), w, s, tiles)
