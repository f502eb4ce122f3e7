"""The Gluon decode GEMV (``kernels/gluon_gemv.py``) on the H200:
against ``reference_fp8.fp8_linear`` with tests/gpu/test_fp8_linear_gpu.py's tolerance, and against the
Triton decode GEMV's FP8 steps (``fp8_gemm_rows_kernel``, 64-row tiles, four 32-deep steps an iteration)
with the same K split: both promote each 32-deep FP8 product in K order with the same scales, so the same
bits are expected. Also: the dispatcher takes it only where it fits while switched on, and one token's routed
experts on it (``pair_gemm``) within the MoE tolerance. Skipped without
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


@pytest.mark.parametrize("lanes", [1, 2])
@pytest.mark.parametrize("M", [1, 5, 16])
@pytest.mark.parametrize("N,K", [(1792, 5120), (1824, 5120), (4096, 1280), (5120, 8192), (5120, 2304), (4608, 5120)])
def test_gluon_gemv_matches_reference_and_the_triton_fp8_steps(monkeypatch, M, N, K, lanes):
    """With one warpgroup an SM or two (``TWO_LANE_ROWS`` below every M or above: each lane with its ring), its
    K split (``balanced_work``, unsplit to 8 splits over these shapes) given to the Triton kernel too: the same
    bits."""
    gg = _gg()
    monkeypatch.setattr(gg, "TWO_LANE_ROWS", gg.TOKENS if lanes == 2 else 0)
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg

    x, w8, scale = _inputs(M, N, K, N + M)
    q, s = tg.act_quant(x, 32)
    got = gg.gemv(q, s, w8, scale, torch.bfloat16)
    ref = reference_fp8.fp8_linear(x, w8, scale, BLOCK, 32)
    rel = _rel(got, ref)
    n_tiles = -(-N // gg.ROWS)
    split, _, programs = gg._work(n_tiles, K, gg.lanes(M), x.device)
    same_split = tg.GemmConfig(16, gg.ROWS, 4, 4, 4, programs=n_tiles * split if split > 1 else 0)
    triton = tg.gemm(q, s, 32, w8, scale, BLOCK, torch.bfloat16, config=same_split, swapped=True, bf16_steps=False)
    print(f"REPORT gluon gemv lanes={lanes} M={M} N={N} K={K}: split {split} on {programs} programs, rel={rel:.2e}, "
          f"bits of the Triton FP8 steps: {torch.equal(got, triton)} (rel {_rel(got, triton):.1e})")
    assert got.shape == (M, N) and torch.isfinite(got).all()
    assert rel <= 2e-3
    torch.testing.assert_close(got.float(), ref.float(), rtol=2.0**-7, atol=2.0**-10 * float(ref.float().abs().max()))
    assert torch.equal(got, triton)


@pytest.mark.parametrize("lanes", [1, 2])
@pytest.mark.parametrize("programs", [1, 3, 7])
def test_few_programs_take_many_items_each(monkeypatch, programs, lanes):
    """A persistent program's ring runs on across its items (phases included): with 1, 3 or 7 programs each
    takes tens of items of 1 to 3 steps (the last K split of 5120 in 384s is one step), so the ring wraps
    mid-item (the scale slots with it), in one lane or two. The bits must not depend on how the items are
    shared out."""
    gg = _gg()
    monkeypatch.setattr(gg, "TWO_LANE_ROWS", gg.TOKENS if lanes == 2 else 0)
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg

    x, w8, scale = _inputs(3, 1792, 5120, 11)
    q, s = tg.act_quant(x, 32)
    full = gg.gemv(q, s, w8, scale, torch.bfloat16)
    monkeypatch.setattr(gg, "_sm_count", lambda device: programs)
    few = gg.gemv(q, s, w8, scale, torch.bfloat16)
    assert torch.equal(few, full)
    assert _rel(few, reference_fp8.fp8_linear(x, w8, scale, BLOCK, 32)) <= 2e-3


@pytest.mark.parametrize("next_launch", [0, 1, 2])
@pytest.mark.parametrize("M", [1, 8])
def test_a_chain_under_pdl_in_a_graph_gives_the_bits_without_it(monkeypatch, M, next_launch):
    """act_quant -> GEMV -> grouped GEMV (bf16 products) -> act_quant -> GEMV replayed from a CUDA graph under
    programmatic dependent launch (``pdl_options``: each GEMV launched while the kernel before it runs, the kernel
    after it launched from the GEMV's start, after its last copies or at its end: ``NEXT_LAUNCH``), the input
    rewritten between replays: the bits of the same chain run eagerly without PDL. A partition reading the
    activations or their scales before its wait would read the last replay's. (Session 38 ran it with each
    loader's first weight tiles copied before its wait too: passed, then removed as slower.)"""
    gg = _gg()
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg
    from deepinfer_adapters.kernels import triton_support

    x, w8, scale = _inputs(M, 5120, 5120, 21 + M)
    g = torch.Generator(device="cuda").manual_seed(M)
    wg8, gscale = quant_fp8_blocks(torch.randn(5120, 640, device="cuda", generator=g) / 640**0.5, BLOCK)

    def chain(inp):
        h = gg.gemv(*tg.act_quant(inp, 32), w8, scale, torch.bfloat16)
        h = gg.grouped_linear(h.view(M, 8, 640), wg8, gscale, BLOCK).view(M, 5120)
        return gg.gemv(*tg.act_quant(h, 32), w8, scale, torch.bfloat16)

    monkeypatch.setattr(triton_support, "PDL", False)
    inputs = [x * (1 + i) + i for i in range(3)]
    want = [chain(inp) for inp in inputs]
    monkeypatch.setattr(triton_support, "PDL", True)
    monkeypatch.setattr(gg, "NEXT_LAUNCH", gg.NEXT_LAUNCH_POINTS[next_launch])
    assert gg.pdl_options() == {"PDL": True, "NEXT_LAUNCH": next_launch, "launch_pdl": True}
    static = inputs[0].clone()
    chain(static)  # compiles the PDL variants outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chain(static)
    for inp, expected in zip(inputs * 2, want * 2):
        static.copy_(inp)
        graph.replay()
        assert torch.equal(out, expected)


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


@pytest.mark.parametrize("lanes", [1, 2])
@pytest.mark.parametrize("E,D,I", [(32, 512, 256), (16, 5120, 2304)], ids=["small_split_k", "real_widths"])
@pytest.mark.parametrize("per", [32, 128])
def test_one_tokens_experts_on_the_pair_gemv(monkeypatch, E, D, I, per, lanes):
    """``gluon_gemv.pair_gemm`` (where ``GLUON_PAIRS``) runs one token's routed experts as the MoE's fp8 path
    does: within the MoE tolerance of the reference, for E4M3 tiles with scales per (1, 32) and (1, 128); K
    split by ``balanced_work``; w13's partials added by ``swiglu_quant`` or by a split sum, the token quantized
    in the sort's launch or by ``act_quant`` (the same bits). Two tokens and batch-invariant mode keep the
    Triton paths. On another share of the SMs (``PAIR_SM_SHARE``): the same bits. (Scales per (1, 32)
    come to the products through the ring's scale slots, per (1, 128) by the warpgroup's loads.)"""
    from deepinfer_adapters.kernels import triton_moe
    from deepinfer_adapters.model_impl.quant import to_e4m3_tiles
    from tests.gpu.moe_inputs import routing
    from tests.gpu.test_moe_gpu import NORM_RTOL, _experts_128

    gg = _gg()
    monkeypatch.setattr(gg, "TWO_LANE_ROWS", gg.TOKENS if lanes == 2 else 0)
    per32, per128 = _experts_128(E, D, I, seed=E + per)
    w13, s13, w2, s2 = per32 if per == 32 else per128
    experts = (to_e4m3_tiles(w13), s13, to_e4m3_tiles(w2), s2)
    block = (1, per)
    calls = []
    pair_gemm = gg.pair_gemm
    monkeypatch.setattr(gg, "pair_gemm", lambda *a, **kw: (calls.append(a[4].shape), pair_gemm(*a, **kw))[1])
    monkeypatch.setattr(gg, "GLUON_PAIRS", True)
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(1, D, device="cuda", generator=g).bfloat16()
    w, ids = routing(1, E, 6, seed=per)
    out = triton_moe.moe_experts(x, w, ids, *experts, block, 32, 10.0)
    assert len(calls) == 2  # w13 and w2
    triton_fp8 = triton_moe.moe_experts(x, w, ids, *experts, block, 32, 10.0, path="fp8")
    ref = reference_fp8.moe_experts(x, w, ids, *experts, block, 32, 10.0)
    rel = _rel(out, ref)
    print(f"REPORT pair gemv lanes={lanes} E={E} D={D} I={I} per={per}: rel={rel:.2e} "
          f"(Triton fp8 path {_rel(triton_fp8, ref):.2e}), equal to the Triton fp8 path {torch.equal(out, triton_fp8)}")
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert rel <= NORM_RTOL
    monkeypatch.setattr(gg, "PAIR_SM_SHARE", 0.25)
    assert torch.equal(triton_moe.moe_experts(x, w, ids, *experts, block, 32, 10.0), out)  # 33 programs
    # w13's partials (where its K is split) added by their own split sum rather than by swiglu_quant, and the
    # token quantized by act_quant rather than in the sort's launch: the same bits
    for switch in ("SWIGLU_ADDS_SPLITS", "SORT_QUANTIZES"):
        monkeypatch.setattr(triton_moe, switch, not getattr(triton_moe, switch))
        assert torch.equal(triton_moe.moe_experts(x, w, ids, *experts, block, 32, 10.0), out), switch
        monkeypatch.setattr(triton_moe, switch, not getattr(triton_moe, switch))
    x2 = torch.randn(2, D, device="cuda", generator=g).bfloat16()
    w2_, ids2 = routing(2, E, 6, seed=per + 1)
    triton_moe.moe_experts(x2, w2_, ids2, *experts, block, 32, 10.0)
    with invariance.batch_invariant(True):
        triton_moe.moe_experts(x, w, ids, *experts, block, 32, 10.0)
    assert len(calls) == 8  # two for each one-token run (the default share, a quarter of the SMs, the two switches)


@pytest.mark.parametrize("lanes", [1, 2, 4])
@pytest.mark.parametrize("T", [1, 5, 16])
@pytest.mark.parametrize("G,R,K", [(8, 1024, 4096), (2, 128, 256)])
def test_grouped_linear_on_bf16_products(monkeypatch, T, G, R, K, lanes):
    """``gluon_gemv.grouped_linear`` (where ``GLUON_GROUPED``, on): a decode step's wo_a on the persistent ring,
    bf16 products -- the weight converted with its [32, 32] block scales in registers, each group's rows reading their
    group's inputs -- within bf16 GEMM rounding of the reference and of the Triton grouped kernel. K split at the
    small widths; batch-invariant mode keeps the Triton kernel. One warpgroup or two (each with its ring and
    scale slots)."""
    gg = _gg()
    monkeypatch.setattr(gg, "GROUPED_LANES", lanes)
    g = torch.Generator(device="cuda").manual_seed(T + G)
    w = torch.randn(G * R, K, device="cuda", generator=g) / K**0.5
    w8, scale = quant_fp8_blocks(w * torch.logspace(-2, 1, K, device="cuda"), BLOCK)
    x = (torch.randn(T, G, K, device="cuda", generator=g) * torch.logspace(-2, 1, K, device="cuda")).bfloat16()
    assert kernels.chosen("fp8_grouped_linear", x, w8, scale, BLOCK) == "gluon"  # on by default
    monkeypatch.setattr(gg, "GLUON_GROUPED", False)
    assert kernels.chosen("fp8_grouped_linear", x, w8, scale, BLOCK) != "gluon"
    triton = kernels.fp8_grouped_linear(x, w8, scale, BLOCK)
    monkeypatch.setattr(gg, "GLUON_GROUPED", True)
    got = kernels.fp8_grouped_linear(x, w8, scale, BLOCK)
    ref = reference_fp8.fp8_grouped_linear(x, w8, scale, BLOCK)
    print(f"REPORT gluon grouped lanes={lanes} T={T} G={G} R={R} K={K}: rel={_rel(got, ref):.2e} "
          f"(Triton {_rel(triton, ref):.2e})")
    assert got.shape == (T, G, R) and torch.isfinite(got).all()
    for other in (ref, triton):
        torch.testing.assert_close(got.float(), other.float(), rtol=2.0**-7,
                                   atol=2.0**-8 * float(other.float().abs().max()))
    assert _rel(got, ref) <= 2e-3
    with invariance.batch_invariant(True):
        assert kernels.chosen("fp8_grouped_linear", x, w8, scale, BLOCK) != "gluon"


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_grouped_linear_converts_every_e4m3_code_exactly(monkeypatch, lanes):
    """Every E4M3 code but NaN (subnormals and both zeros too) under block scales 2^-27 .. 2^13 comes out as the
    reference's bf16 value: one-hot activations pick single weights, so each output is one exact product.
    (Scales below ~2^-27 make fp32 subnormal products, which the tensor cores are not asked to keep.) In one
    warpgroup an SM, two or four (``GROUPED_LANES``: the parameter went unused before session 38)."""
    gg = _gg()
    monkeypatch.setattr(gg, "GLUON_GROUPED", True)
    monkeypatch.setattr(gg, "GROUPED_LANES", lanes)
    R, K = 128, 256
    codes = torch.arange(256, device="cuda", dtype=torch.int32)
    codes = torch.where((codes & 0x7F) == 0x7F, 0, codes)  # NaN codes as zero
    w8 = ((codes[None, :] + 37 * torch.arange(R, device="cuda", dtype=torch.int32)[:, None]) % 256)
    w8 = torch.where((w8 & 0x7F) == 0x7F, 0, w8).to(torch.uint8).view(torch.float8_e4m3fn)
    exps = torch.tensor([100, 110, 117, 120, 127, 130, 134, 135, 140], device="cuda", dtype=torch.int32)
    scale = exps[torch.arange(R // 32 * K // 32, device="cuda") % len(exps)].view(R // 32, K // 32).to(torch.uint8)
    for k0 in range(0, K, 16):
        x = torch.zeros(16, 1, K, device="cuda", dtype=torch.bfloat16)
        x[torch.arange(16), 0, k0 + torch.arange(16)] = 1
        assert kernels.chosen("fp8_grouped_linear", x, w8, scale, BLOCK) == "gluon"
        got = kernels.fp8_grouped_linear(x, w8, scale, BLOCK)
        want = reference_fp8.fp8_grouped_linear(x, w8, scale, BLOCK)
        assert torch.equal(got, want), (k0, (got.float() - want.float()).abs().max())
