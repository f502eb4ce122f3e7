"""Triton ``moe_experts`` (routing + grouped FP8 GEMMs) against the torch reference
(the expert loop of layers/moe.py on FP8 weights), on CUDA, on both paths ("fp8":
FP8 products rescaled per 32; "bf16": round-tripped activations and weight tiles as
bf16, the reference's own arithmetic).

Tolerance. Each of the three GEMMs agrees with the reference to about one bf16 ulp
per element (test_fp8_linear_gpu.py), and silu uses Triton's exp (~2 fp32 ulp); a
w1/w3 output one ulp off can move a w2 input across an FP8 rounding boundary (one
E4M3 step, 2^-3 relative, on that one value). Over a tensor the relative error
stays near 1e-3: asserted <= 5e-3, every element finite. The routing tables
(which sorted rows each tile covers, in which order a token's rows are added) are
checked exactly on their own.
"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference_fp8
from deepinfer_adapters.model_impl.quant import quant_fp4_blocks, to_fp4_tiles, unpack_fp4
from tests.gpu.moe_inputs import assert_route_equals_torch, routing

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")

NORM_RTOL = 5e-3


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def _experts(E, D, I, seed, packed=False):
    """FP4 experts converted to FP8 as native_format does: (w13, w13_scale, w2, w2_scale);
    ``packed``: kept packed as stored (weights="fp4"), the same values."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def fp8_from_fp4(out_f, in_f):
        codes, scale = quant_fp4_blocks(torch.randn(E * out_f, in_f, device="cuda", generator=g) / in_f**0.5)
        codes = codes.view(E, out_f, -1)
        weight = to_fp4_tiles(codes) if packed else unpack_fp4(codes).to(torch.float8_e4m3fn)
        return weight, scale.view(E, out_f, -1)

    w13, s13 = fp8_from_fp4(2 * I, D)
    w2, s2 = fp8_from_fp4(D, I)
    return w13, s13, w2, s2


@pytest.mark.parametrize("path", ["fp8", "bf16"])
@pytest.mark.parametrize("T,skew", [(1, False), (8, False), (57, False), (600, False), (600, True)])
def test_moe_experts_matches_reference(T, skew, path):
    from deepinfer_adapters.kernels import triton_moe

    E, D, I, k = 32, 512, 256, 6
    w13, s13, w2, s2 = _experts(E, D, I, seed=T)
    g = torch.Generator(device="cuda").manual_seed(100 + T)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    w, ids = routing(T, E, k, seed=T, skew=skew)
    ref = reference_fp8.moe_experts(x, w, ids, w13, s13, w2, s2, (1, 32), 32, 10.0)
    out = triton_moe.moe_experts(x, w, ids, w13, s13, w2, s2, (1, 32), 32, 10.0, path=path)
    rel = _rel(out, ref)
    print(f"REPORT moe_experts {path} T={T} skew={skew}: rel={rel:.2e} maxabs={float((out - ref).abs().max()):.2e} "
          f"max|ref|={float(ref.abs().max()):.2e}")
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert torch.isfinite(out).all()
    assert rel <= NORM_RTOL


@pytest.mark.parametrize("unpack", ["ptx", "int"])
@pytest.mark.parametrize("act_block", [32, 128])
@pytest.mark.parametrize("T", [1, 8, 57, 600, 2000])
def test_packed_fp4_experts_are_the_converted_ones_bit_for_bit(T, act_block, unpack, monkeypatch):
    """Packed E2M1 experts (weights="fp4"): each GEMM unpacks its weight tile in registers
    (``e2m1_halves``) to the values the E4M3 conversion holds, in two chained half-depth
    products, so on the bf16 path the result is the converted experts' bit for bit (both unpacks:
    PTX, four bytes a register and the hardware E4M3 conversion; integer ops per nibble), at decode (16-row tiles, pair routing at one token) and
    prefill sizes (2000 tokens: 128-row tiles); and near the reference, which unpacks them."""
    from deepinfer_adapters.kernels import triton_fp8_gemm, triton_moe

    monkeypatch.setattr(triton_fp8_gemm, "FP4_UNPACK", unpack)
    E, D, I, k = 32, 512, 256, 6
    packed = _experts(E, D, I, seed=T, packed=True)
    converted = _experts(E, D, I, seed=T)
    assert packed[0].dtype == torch.uint8 and packed[0].shape[-1] == D // 2
    g = torch.Generator(device="cuda").manual_seed(300 + T)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    w, ids = routing(T, E, k, seed=T)
    args = (x, w, ids)
    assert kernels.chosen("moe_experts", *args, *packed, (1, 32), act_block, 10.0) == "triton"
    out = triton_moe.moe_experts(*args, *packed, (1, 32), act_block, 10.0, path="bf16")
    want = triton_moe.moe_experts(*args, *converted, (1, 32), act_block, 10.0, path="bf16")
    ref = reference_fp8.moe_experts(*args, *packed, (1, 32), act_block, 10.0)
    rel = _rel(out, ref)
    print(f"REPORT moe packed fp4 {unpack} T={T} act_block={act_block}: rel={rel:.2e}, equal to converted "
          f"{torch.equal(out, want)}")
    assert torch.equal(out, want)
    assert rel <= NORM_RTOL


@pytest.mark.parametrize("act_block", [32, 128])
@pytest.mark.parametrize("T,skew", [(1, False), (8, False), (57, False), (600, False), (600, True)])
def test_packed_fp4_experts_on_the_fp8_path_match_reference(T, skew, act_block):
    """Packed E2M1 experts on the "fp8" path (the decode default, ``fp4_gemm_rows_kernel``: spans
    unpacked to E4M3 in registers, 32-deep FP8 products with the weight as the 64-row operand):
    near the reference as the E4M3 experts' fp8 path is, at decode and prefill sizes, skewed
    routing included (tiles of 16 rows: several per popular expert); also compared with the same
    experts converted to E4M3 on the rows-first fp8 path (the same products, summed by another
    tensor-core instruction)."""
    from deepinfer_adapters.kernels import triton_moe

    E, D, I, k = 32, 512, 256, 6
    packed = _experts(E, D, I, seed=T, packed=True)
    converted = _experts(E, D, I, seed=T)
    g = torch.Generator(device="cuda").manual_seed(400 + T)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    w, ids = routing(T, E, k, seed=T, skew=skew)
    args = (x, w, ids)
    out = triton_moe.moe_experts(*args, *packed, (1, 32), act_block, 10.0, path="fp8")
    if T * k < triton_moe.LARGE_PAIRS:  # the default below prefill sizes
        assert torch.equal(triton_moe.moe_experts(*args, *packed, (1, 32), act_block, 10.0), out)
    e4m3 = triton_moe.moe_experts(*args, *converted, (1, 32), act_block, 10.0, path="fp8")
    ref = reference_fp8.moe_experts(*args, *packed, (1, 32), act_block, 10.0)
    rel, rel_e4m3 = _rel(out, ref), _rel(e4m3, ref)
    print(f"REPORT moe packed fp4 fp8-path T={T} skew={skew} act_block={act_block}: rel={rel:.2e} (E4M3 experts' "
          f"fp8 path {rel_e4m3:.2e}), equal to it {torch.equal(out, e4m3)}, rel to it {_rel(out, e4m3):.2e}")
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert rel <= NORM_RTOL


@pytest.mark.parametrize("T", [1, 8, 300])
def test_moe_experts_adds_the_shared_output_in_its_combine(T):
    """``shared``: the combine kernel adds the shared expert's output after the routed rows and
    casts, bit for bit what the layer did with two more kernels (y += shared.float(); y.to(bf16)),
    and the reference does the same."""
    from deepinfer_adapters.kernels import triton_moe

    E, D, I, k = 32, 512, 256, 6
    w13, s13, w2, s2 = _experts(E, D, I, seed=7)
    g = torch.Generator(device="cuda").manual_seed(200 + T)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    shared = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    w, ids = routing(T, E, k, seed=T)
    args = (x, w, ids, w13, s13, w2, s2, (1, 32), 32, 10.0)
    assert kernels.chosen("moe_experts", *args, shared=shared) == "triton"
    routed = triton_moe.moe_experts(*args)
    fused = triton_moe.moe_experts(*args, shared=shared)
    assert fused.dtype == torch.bfloat16 and torch.equal(fused, (routed + shared.float()).to(torch.bfloat16))
    ref_routed = reference_fp8.moe_experts(*args)
    assert torch.equal(reference_fp8.moe_experts(*args, shared=shared), (ref_routed + shared.float()).bfloat16())
    # the shared output handed over as a callable (the MoE's join of its side stream): called once, same bits
    calls = []
    joined = lambda: calls.append(1) or shared  # noqa: E731
    assert kernels.chosen("moe_experts", *args, shared=joined) == "triton"
    assert torch.equal(triton_moe.moe_experts(*args, shared=joined), fused) and len(calls) == 1
    assert torch.equal(reference_fp8.moe_experts(*args, shared=joined), (ref_routed + shared.float()).bfloat16())
    with pytest.raises(ValueError, match="shared expert's output"):
        triton_moe.moe_experts(*args, shared=lambda: shared[:, :-1])


def test_routing_tiles_cover_every_pair():
    from deepinfer_adapters.kernels import triton_moe

    E, k, T = 16, 6, 37
    _, ids = routing(T, E, k, seed=3, skew=True)
    order, tiles, positions = triton_moe.route(ids, E, 16)
    flat = ids.flatten()
    covered = torch.zeros(T * k, dtype=torch.int32, device="cuda")
    for e, r0, r1 in zip(tiles.expert.tolist(), tiles.row0.tolist(), tiles.row1.tolist()):
        if e < 0:
            continue
        rows = torch.arange(r0, min(r1, r0 + 16), device="cuda")
        assert bool((flat[order[rows]] == e).all())
        covered[rows] += 1
    assert bool((covered == 1).all())
    # positions list each token's rows in ascending expert order
    assert bool((order[positions] // k == torch.arange(T, device="cuda")[:, None]).all())
    assert bool((flat[order[positions]].diff(dim=1) > 0).all())


@pytest.mark.parametrize("T,E,bm", [(1, 384, 16), (8, 384, 16), (32, 256, 16), (37, 16, 16), (600, 384, 128)])
def test_pair_sort_kernel_equals_torch_route(T, E, bm, monkeypatch):
    """The one-program pair sort (triton_moe_sort) gives the torch route's order, active tiles
    and combine positions, compiled on the GPU."""
    from deepinfer_adapters.kernels import triton_moe_sort

    _, ids = routing(T, E, 6, seed=T, skew=T == 37)
    assert triton_moe_sort.fits(ids, E)
    assert_route_equals_torch(ids, E, bm, monkeypatch)


@pytest.mark.parametrize("T,E,skew", [(700, 384, False), (1400, 384, True), (8192, 384, False), (8192, 256, True)])
def test_blocked_pair_sort_equals_torch_route(T, E, skew, monkeypatch):
    """Prefill-sized routing (beyond MAX_PAIRS: ``sort_pairs_blocked``, three launches) against the torch
    route, compiled on the GPU."""
    from deepinfer_adapters.kernels import triton_moe_sort

    _, ids = routing(T, E, 6, seed=T, skew=skew)
    assert not triton_moe_sort.fits(ids, E) and triton_moe_sort.fits_blocked(ids, E)
    assert_route_equals_torch(ids, E, 128, monkeypatch)


@pytest.mark.parametrize("T", [1, 8, 40])
def test_pair_routing_equals_sorted_routing_bitwise(T):
    """Decode routing by pair (no sort across tokens) against the sorted tiles: each row's
    products, tile shape and combine order are the same, so every bit is."""
    from deepinfer_adapters.kernels import triton_moe

    E, D, I, k = 32, 512, 256, 6
    w13, s13, w2, s2 = _experts(E, D, I, seed=50 + T)
    x = torch.randn(T, D, device="cuda", generator=torch.Generator(device="cuda").manual_seed(T)).bfloat16()
    w, ids = routing(T, E, k, seed=T + 1)
    run = lambda routing: triton_moe.moe_experts(x, w, ids, w13, s13, w2, s2, (1, 32), 32, 10.0,  # noqa: E731
                                                 path="fp8", routing=routing)
    pairs, sorted_ = run("pairs"), run("sorted")
    ref = reference_fp8.moe_experts(x, w, ids, w13, s13, w2, s2, (1, 32), 32, 10.0)
    print(f"REPORT moe pairs vs sorted T={T}: equal={torch.equal(pairs, sorted_)} rel(ref)={_rel(pairs, ref):.2e}")
    assert torch.equal(pairs, sorted_)
    assert _rel(pairs, ref) <= NORM_RTOL
    tiles, rw = triton_moe.pair_route(ids, w)  # row t k + j: token t's j-th expert, ascending
    assert torch.equal(tiles.expert.view(T, k).long(), ids.sort(dim=1).values)
    assert torch.equal(rw.view(T, k), w.gather(1, ids.argsort(dim=1)))

def _experts_128(E, D, I, seed):
    """The same kind of experts in both storages of native_format: (1, 32) as the checkpoint's
    FP4 scales, and re-encoded to (1, 128) blocks (quant.fp4_to_fp8_blocks); group scales spread
    over 2^-3 .. 2^3 so the re-encoding really moves codes."""
    from deepinfer_adapters.model_impl.quant import fp4_to_fp8_blocks

    g = torch.Generator(device="cuda").manual_seed(seed)

    def both(out_f, in_f):
        spread = 2.0 ** torch.randint(-3, 4, (E * out_f, in_f // 32), device="cuda", generator=g)
        w = torch.randn(E * out_f, in_f, device="cuda", generator=g) / in_f**0.5 * spread.repeat_interleave(32, 1)
        packed, scale = quant_fp4_blocks(w)
        codes, scale128 = fp4_to_fp8_blocks(packed, scale)
        per32 = unpack_fp4(packed).to(torch.float8_e4m3fn).view(E, out_f, in_f), scale.view(E, out_f, -1)
        return per32, (codes.view(E, out_f, in_f), scale128.view(E, out_f, -1))

    (w13, s13), (w13b, s13b) = both(2 * I, D)
    (w2, s2), (w2b, s2b) = both(D, I)
    return (w13, s13, w2, s2), (w13b, s13b, w2b, s2b)


@pytest.mark.parametrize("act_block", [32, 128], ids=["v41_act32", "v4_act128"])
@pytest.mark.parametrize("path", ["fp8", "bf16"])
@pytest.mark.parametrize("T", [1, 8, 57, 600, 1400])
def test_moe_experts_128_blocks_match_reference(T, path, act_block):
    """(1, 128) weights: the reference gives bit-identical results to the (1, 32) storage (same
    values), and Triton matches it on both paths at decode and prefill sizes (T = 1400: 8400
    token-expert pairs, LARGE_PAIRS' range)."""
    from deepinfer_adapters.kernels import triton_moe

    E, D, I, k = 32, 512, 256, 6
    per32, per128 = _experts_128(E, D, I, seed=T)
    g = torch.Generator(device="cuda").manual_seed(200 + T)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    w, ids = routing(T, E, k, seed=T)
    ref = reference_fp8.moe_experts(x, w, ids, *per128, (1, 128), act_block, 10.0)
    assert torch.equal(ref, reference_fp8.moe_experts(x, w, ids, *per32, (1, 32), act_block, 10.0))
    out = triton_moe.moe_experts(x, w, ids, *per128, (1, 128), act_block, 10.0, path=path)
    out32 = triton_moe.moe_experts(x, w, ids, *per32, (1, 32), act_block, 10.0, path=path)
    rel, rel32 = _rel(out, ref), _rel(out32, ref)
    print(f"REPORT moe128 {path} act_block={act_block} T={T}: rel={rel:.2e} (1x32 storage: {rel32:.2e}) "
          f"maxabs={float((out - ref).abs().max()):.2e} max|ref|={float(ref.abs().max()):.2e}")
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert rel <= NORM_RTOL


@pytest.mark.parametrize("act_block", [32, 128], ids=["v41_act32", "v4_act128"])
@pytest.mark.parametrize("path", ["fp8", "bf16", "invariant"])
@pytest.mark.parametrize("T", [1, 8, 57, 600, 1400])
def test_e4m3_tiles_are_the_plain_experts_bit_for_bit(T, path, act_block):
    """E4M3 experts held in 128 x 128 tiles (quant.to_e4m3_tiles, the native layout since session 9)
    give the same bits as the same experts in plain rows, on each path, with scales per 32 and per 128
    (the tiles only move bytes); "invariant": batch-invariant mode (the bf16 path's row tiles)."""
    from deepinfer_adapters.kernels import invariance, triton_moe
    from deepinfer_adapters.model_impl.quant import to_e4m3_tiles

    E, D, I, k = 32, 512, 256, 6
    g = torch.Generator(device="cuda").manual_seed(300 + T)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    w, ids = routing(T, E, k, seed=T)
    for block, (w13, s13, w2, s2) in zip(((1, 32), (1, 128)), _experts_128(E, D, I, seed=T)):
        tiled = (to_e4m3_tiles(w13), s13, to_e4m3_tiles(w2), s2)
        run = lambda weights: triton_moe.moe_experts(x, w, ids, *weights, block, act_block, 10.0,  # noqa: E731
                                                     path=None if path == "invariant" else path)
        with invariance.batch_invariant(path == "invariant"):
            plain, out = run((w13, s13, w2, s2)), run(tiled)
        ref = reference_fp8.moe_experts(x, w, ids, *tiled, block, act_block, 10.0)
        assert torch.equal(ref, reference_fp8.moe_experts(x, w, ids, w13, s13, w2, s2, block, act_block, 10.0))
        print(f"REPORT moe e4m3 tiles {path} block={block} act_block={act_block} T={T}: equal to plain "
              f"{torch.equal(out, plain)}, rel to reference {_rel(out, ref):.2e}")
        assert torch.equal(out, plain)
        assert _rel(out, ref) <= NORM_RTOL


def test_moe_experts_128_blocks_timing():
    """Not a pass/fail check: prefill-sized MoE at a mid width, (1, 32) vs (1, 128) storage on
    both paths (benchmarks/bench_moe_blocks.py times the real widths and tile configs)."""
    from deepinfer_adapters.kernels import triton_moe

    E, D, I, k, T = 64, 2048, 1024, 6, 4096
    per32, per128 = _experts_128(E, D, I, seed=5)
    x = torch.randn(T, D, device="cuda").bfloat16()
    w, ids = routing(T, E, k, seed=5)
    for path in ("fp8", "bf16"):
        for name, (block, weights) in {"1x32": ((1, 32), per32), "1x128": ((1, 128), per128)}.items():
            call = lambda: triton_moe.moe_experts(x, w, ids, *weights, block, 32, 10.0, path=path)
            call()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(5):
                call()
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end) / 5
            tflops = 2 * T * k * 3 * D * I / ms / 1e9
            print(f"REPORT moe128 timing {path} {name} T={T} E={E} D={D} I={I}: {ms:.2f} ms ({tflops:.0f} TFLOP/s)")


@pytest.mark.parametrize("T,k,E", [(1, 6, 384), (1, 6, 256), (4, 8, 64)])
def test_pair_route_kernel_equals_torch_sort(T, k, E, monkeypatch):
    """pair_route's one-launch per-token sort (triton_moe_sort.sort_each_token), compiled: the
    experts and route weights torch's stable sort and gather give, bit for bit."""
    from deepinfer_adapters.kernels import triton_moe

    w, ids = routing(T, E, k, seed=40 + T)
    monkeypatch.setattr(triton_moe, "PAIR_SORT_KERNEL", True)
    tiles, rw = triton_moe.pair_route(ids, w)
    monkeypatch.setattr(triton_moe, "PAIR_SORT_KERNEL", False)
    want, want_rw = triton_moe.pair_route(ids, w)
    assert torch.equal(tiles.expert, want.expert) and torch.equal(rw, want_rw)


@pytest.mark.parametrize("act_block", [32, 128])
@pytest.mark.parametrize("T", [1, 8, 32, 600])
def test_packed_fp4_block_accumulation_matches_reference(T, act_block, monkeypatch):
    """``FP4_BLOCK_ACCUMULATE`` (the default: 128-input blocks, the scale bytes read as int32 words
    through an inline load; activation scales per 128 (V4): each block summed under the weight scales
    only, scaled once; per 32 (V4.1): each product scaled by both): near the reference as the
    span-by-span kernel is, and within fp32 rounding of it (the same products, per 128 in another
    association)."""
    from deepinfer_adapters.kernels import triton_fp8_gemm, triton_moe

    E, D, I, k = 32, 512, 256, 6
    packed = _experts(E, D, I, seed=T, packed=True)
    g = torch.Generator(device="cuda").manual_seed(500 + T)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    w, ids = routing(T, E, k, seed=T)
    args = (x, w, ids, *packed, (1, 32), act_block, 10.0)
    monkeypatch.setattr(triton_fp8_gemm, "FP4_BLOCK_ACCUMULATE", False)
    spans = triton_moe.moe_experts(*args, path="fp8")
    monkeypatch.setattr(triton_fp8_gemm, "FP4_BLOCK_ACCUMULATE", True)
    blocks = triton_moe.moe_experts(*args, path="fp8")
    ref = reference_fp8.moe_experts(*args)
    print(f"REPORT moe packed fp4 block accumulation T={T} act_block={act_block}: rel={_rel(blocks, ref):.2e} "
          f"(spans {_rel(spans, ref):.2e}), rel to spans {_rel(blocks, spans):.2e}")
    assert torch.isfinite(blocks).all() and _rel(blocks, ref) <= NORM_RTOL and _rel(blocks, spans) <= 1e-5


@pytest.mark.parametrize("act_block", [32, 128])
@pytest.mark.parametrize("N", [40, 256])
def test_packed_fp4_block_accumulation_gemm_matches_dequantized_weights(N, act_block, monkeypatch):
    """The compiled per-128-block kernel through ``gemm`` (gathered rows, an idle tile, a masked last N
    tile at N = 40 whose rows past N read a valid row's scale word), against the float64 product of
    the dequantized weights and activations; equal to the span-by-span kernel within fp32 rounding.
    (Negative control: random scale bytes, so a word read at the wrong row or byte is far off.)"""
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg
    from deepinfer_adapters.model_impl.quant import dequant_fp4_experts

    g = torch.Generator(device="cuda").manual_seed(N)
    Ex, K, R = 3, 512, 5
    a = (torch.randn(R, K, device="cuda", generator=g) * 50).to(torch.float8_e4m3fn)
    sa = torch.pow(2.0, torch.randint(-8, 3, (R, K // act_block), device="cuda", generator=g).float())
    row_idx = torch.tensor([4, 1, 0, 3, 2], dtype=torch.int32, device="cuda")
    groups = tg.Groups(expert=torch.tensor([2, 0, -1], dtype=torch.int32, device="cuda"),
                       row0=torch.tensor([0, 2, 5], dtype=torch.int32, device="cuda"),
                       row1=torch.tensor([2, 5, 5], dtype=torch.int32, device="cuda"), row_idx=row_idx)
    stored = torch.randint(0, 256, (Ex, N, K // 2), device="cuda", generator=g, dtype=torch.uint8)
    wscale = torch.randint(118, 133, (Ex, N, K // 32), device="cuda", generator=g, dtype=torch.uint8)
    av = a.double() * sa.double().repeat_interleave(act_block, 1)
    want = torch.zeros(R, N, dtype=torch.float64, device="cuda")
    for e, r0, r1 in ((2, 0, 2), (0, 2, 5)):
        w = dequant_fp4_experts(stored[e], wscale[e].view(torch.float8_e8m0fnu), torch.float64)
        want[r0:r1] = av[row_idx[r0:r1].long()] @ w.T
    outs = {}
    for block_acc in (False, True):
        monkeypatch.setattr(tg, "FP4_BLOCK_ACCUMULATE", block_acc)
        outs[block_acc] = tg.gemm(a, sa, act_block, to_fp4_tiles(stored), wscale, (1, 32), torch.float32, rows=R,
                                  groups=groups)
    print(f"REPORT moe packed fp4 block gemm N={N} act_block={act_block}: rel={_rel(outs[True], want):.2e}, "
          f"spans {_rel(outs[False], want):.2e}")
    # the tensor cores' FP8 products accumulate with fewer bits than fp32 (H200: rel ~1.5e-5 here for
    # either kernel); the two kernels differ only in where the block sums join the fp32 accumulator
    assert _rel(outs[True], want) < 1e-4 and _rel(outs[True], outs[False]) < 1e-6


@pytest.mark.parametrize("act_block,want", [(128, "fp8"), (32, "bf16")], ids=["v4_act128", "v41_act32"])
def test_prefill_default_path_by_activation_scales(act_block, want):
    """A prefill-sized call (8400 token-expert pairs, 262 rows an expert) with no path given: V4's
    activation scales per 128 with (1, 128) experts take the fp8 path, V4.1's per 32 the bf16 path
    (the same bits as naming it); batch-invariant mode the bf16 path either way."""
    from deepinfer_adapters.kernels import invariance, triton_moe

    E, D, I, k, T = 32, 512, 256, 6, 1400
    _, per128 = _experts_128(E, D, I, seed=11)
    g = torch.Generator(device="cuda").manual_seed(12)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    w, ids = routing(T, E, k, seed=13)
    run = lambda path: triton_moe.moe_experts(x, w, ids, *per128, (1, 128), act_block, 10.0, path=path)  # noqa: E731
    assert torch.equal(run(None), run(want))
    with invariance.batch_invariant(True):
        assert torch.equal(run(None), run("bf16"))
