"""The MoE's prefill GEMM on FP8 products (``gluon_moe.grouped_gemm_fp8``, Hopper) against exact sums in fp64:
every row within bf16 rounding plus the tensor cores' accumulation, for gathered rows (w13) and sorted rows (w2),
partial tiles (an expert's second warpgroup idle), idle tiles, tails carried by the tile before and skewed
routing, with V4.1's per-32 codes re-expressed per 128 (``act_quant``'s ``scale_block``: its codes against
torch's E4M3 rounding here); through ``moe_experts``: taken by default at prefill sizes outside batch-invariant
mode, near the bf16 path; its scales' layout (``scale_steps``) against torch's."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.kernels import gluon_moe, invariance
from deepinfer_adapters.kernels import triton_fp8_gemm as tg
from deepinfer_adapters.kernels import triton_moe
from deepinfer_adapters.model_impl.quant import from_e4m3_tiles
from tests.gpu.moe_inputs import routing
from tests.gpu.test_gluon_moe_gpu import GROUPED_CASES, PREFILL_CASES, _experts, prefill_moe

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)"),
    pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                       reason="the kernel is Hopper's (wgmma)"),
]


def _exact(q, s, w, scale, tiles):
    """(sum, sum of magnitudes) in fp64 of each sorted row's products with its tile's expert: the values the
    kernel's products add, and the scale of their rounding."""
    a = q.double() * s.double().repeat_interleave(q.shape[1] // s.shape[1], dim=1)
    wd = from_e4m3_tiles(w).double() * (2.0 ** (scale.double() - 127)).repeat_interleave(128, dim=2)
    out = torch.zeros(q.shape[0], wd.shape[1], device=q.device, dtype=torch.float64)
    mag = torch.zeros_like(out)
    for e, r0, r1 in zip(tiles.expert.tolist(), tiles.row0.tolist(), tiles.row1.tolist()):
        if e >= 0:
            r1 = r1 if r1 - r0 <= 128 + gluon_moe.FP8_TAIL else r0 + 128  # a tile carries its expert's last rows
            out[r0:r1] = a[r0:r1] @ wd[e].T
            mag[r0:r1] = a[r0:r1].abs() @ wd[e].abs().T
    return out, mag


def _worst_accumulation(got, want, mag):
    """The largest error past bf16's rounding of the result, against the sum of the products' magnitudes: the FP8
    tensor cores' sums, which keep fewer bits than fp32 (~14, DeepGEMM's note), of four 32-deep products a step."""
    return (((got - want).abs() - 2.0 ** -8 * want.abs()).clamp(min=0) / mag.clamp(min=1e-30)).max().item()


def _spread(rows, K, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    # rows with per-32 blocks of very different sizes: the scales' ratios are then far from 1
    sizes = 2.0 ** torch.randint(-6, 7, (rows, K // 32, 1), device="cuda", generator=g)
    return (torch.randn(rows, K // 32, 32, device="cuda", generator=g) * sizes).view(rows, K).bfloat16()


def _quantized(rows, K, seed):
    return tg.act_quant(_spread(rows, K, seed), 32, scale_block=128)


@pytest.mark.parametrize("T,E,N,K,skew", GROUPED_CASES)
def test_grouped_gemm_fp8_gives_the_exact_sums(T, E, N, K, skew):
    w, s = _experts(E, N, K, seed=T)
    _, ids = routing(T, E, 6, seed=T, skew=skew)
    _, tiles, _ = triton_moe.route(ids, E, 128)
    rows = T * 6
    q, qs = _quantized(T, K, seed=7 + T)
    h, hs = _quantized(rows, K, seed=8 + T)
    joined = gluon_moe.absorb_tails(tiles, gluon_moe.FP8_TAIL)
    tails = int((tiles.expert >= 0).sum() - (joined.expert >= 0).sum())
    for label, a, a_s, groups in (
            ("gathered", q.view(torch.uint8).index_select(0, tiles.row_idx).view(q.dtype),
             qs.index_select(0, tiles.row_idx), tiles),
            ("sorted", h, hs, tiles), (f"sorted, {tails} tails joined", h, hs, joined)):
        got = gluon_moe.grouped_gemm_fp8(a, a_s, w, s, groups).double()
        want, mag = _exact(a, a_s, w, s, groups)
        accumulation = _worst_accumulation(got, want, mag)
        rel = ((got - want).norm() / want.norm()).item()
        print(f"REPORT gluon moe fp8 T={T} E={E} N={N} K={K} skew={skew} {label}: rel {rel:.2e}, "
              f"worst accumulation error {accumulation:.2e} of the magnitudes")
        assert accumulation <= 2.0 ** -9  # session 29: up to 9.3e-4 with these scale spreads
        assert rel < 3e-3


def _tile_experts(E, N, K, seed):
    """``_experts`` with each 128 x 128 tile's rows on one scale (as native_format converts where exact)."""
    w, s = _experts(E, N, K, seed)
    return w, s[:, ::128].repeat_interleave(128, dim=1).contiguous()


@pytest.mark.parametrize("T,E,N,K,skew", GROUPED_CASES)
def test_tile_scales_give_the_column_scales_bits(T, E, N, K, skew, monkeypatch):
    """Experts with one scale per 128 x 128 tile: the kernel's one multiply-add a value (UNIFORM, ``tile_scales``)
    gives the bits of its per-column promotion (the same fp32 product of the row's and the tile's scale), and the
    exact sums' bounds; tiles of one, two and three active warpgroups (skewed routing, tails joined)."""
    w, s = _tile_experts(E, N, K, seed=T)
    assert gluon_moe.tile_scales(s) is not None and gluon_moe.tile_scales(_experts(E, N, K, seed=T)[1]) is None
    _, ids = routing(T, E, 6, seed=T, skew=skew)
    _, tiles, _ = triton_moe.route(ids, E, 128)
    joined = gluon_moe.absorb_tails(tiles, gluon_moe.FP8_TAIL)
    h, hs = _quantized(T * 6, K, seed=9 + T)
    outs = []
    for uniform in (False, True):
        monkeypatch.setattr(gluon_moe, "FP8_UNIFORM_TILES", uniform)
        outs.append(gluon_moe.grouped_gemm_fp8(h, hs, w, s, joined))
    rows = (joined.row1 - joined.row0)[joined.expert >= 0]
    print(f"REPORT gluon moe fp8 tile scales T={T} E={E}: tiles of 1-64 / 65-128 / 129+ rows "
          f"{int((rows <= 64).sum())} / {int(((rows > 64) & (rows <= 128)).sum())} / {int((rows > 128).sum())}, "
          f"equal {torch.equal(outs[0], outs[1])}")
    assert torch.equal(outs[0], outs[1])
    assert _worst_accumulation(outs[1].double(), *_exact(h, hs, w, s, joined)) <= 2.0 ** -9


@pytest.mark.parametrize("T,skew", PREFILL_CASES)
def test_moe_experts_takes_fp8_products_at_prefill(T, skew, monkeypatch):
    """By default (``FP8_PRODUCTS``) both GEMMs take the kernel (not in batch-invariant mode), within the MoE's
    FP8 tolerance of the bf16 path (other sums: a few of swiglu's E4M3 roundings differ)."""
    x, w, ids, experts = prefill_moe(T, skew)
    calls = []
    real = gluon_moe.grouped_gemm_fp8
    monkeypatch.setattr(gluon_moe, "grouped_gemm_fp8", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    run = lambda path=None: triton_moe.moe_experts(x, w, ids, *experts, (1, 128), 32, 10.0,  # noqa: E731
                                                   path=path)
    got = run()
    assert len(calls) == 2
    bf16 = run("bf16")
    rel = ((got.float() - bf16.float()).norm() / bf16.float().norm()).item()
    print(f"REPORT moe_experts fp8 products T={T} skew={skew}: rel to the bf16 path {rel:.2e}")
    assert rel < 2e-2
    with invariance.batch_invariant(True):
        run()
    assert len(calls) == 2  # batch-invariant mode keeps the bf16 path


def test_mismatched_activations_are_refused():
    w, s = _experts(4, 256, 384, 0)
    tiles = triton_moe.route(torch.zeros(4, 6, device="cuda", dtype=torch.long), 4, 128)[1]
    q, qs = _quantized(24, 256, seed=0)
    with pytest.raises(ValueError, match="do not match"):
        gluon_moe.grouped_gemm_fp8(q, qs, w, s, tiles)


def test_scale_steps_on_the_gpu():
    g = torch.Generator(device="cuda").manual_seed(0)
    s = torch.randint(1, 255, (5, 4608, 40), device="cuda", generator=g, dtype=torch.uint8)
    want = (2.0 ** (s.float() - 127)).transpose(1, 2)
    assert torch.equal(gluon_moe.scale_steps(s), want)


def test_codes_under_wider_scales_round_as_torch():
    """``act_quant`` / ``swiglu_quant`` with ``scale_block=128`` compiled: each stored scale the largest of its four
    per-32 ones, each code torch's E4M3 rounding (nearest even, subnormals) of the per-32 code times its exact
    scale ratio, so each value within half a subnormal step (2^-10 of the wide scale) of the per-32 one, and equal
    where E4M3's normal range holds it."""
    x = _spread(300, 5120, seed=3)
    h13 = torch.cat([_spread(200, 2304, seed=4), _spread(200, 2304, seed=5)], dim=-1)
    rw = torch.rand(200, device="cuda")
    for narrow, wide in ((tg.act_quant(x, 32), tg.act_quant(x, 32, scale_block=128)),
                         (triton_moe.swiglu_quant(h13, rw, 7.0, 32),
                          triton_moe.swiglu_quant(h13, rw, 7.0, 32, scale_block=128))):
        (q32, s32), (q128, s128) = narrow, wide
        rows, K = q32.shape
        runs = s32.view(rows, K // 128, 4)
        assert torch.equal(s128, runs.amax(-1))
        ratio = (runs / s128.unsqueeze(-1)).repeat_interleave(32, dim=-1).reshape(rows, K)
        want = (q32.float() * ratio).to(torch.float8_e4m3fn)
        assert torch.equal(q128.view(torch.uint8), want.view(torch.uint8))
        scale = s128.repeat_interleave(128, dim=-1)
        exact = q32.float() * s32.repeat_interleave(32, dim=-1)
        got = q128.float() * scale
        assert ((got - exact).abs() <= scale * 2.0 ** -10).all()
        normal = exact.abs() >= scale * 2.0 ** -6
        assert torch.equal(got[normal], exact[normal]) and (got != exact).any()
