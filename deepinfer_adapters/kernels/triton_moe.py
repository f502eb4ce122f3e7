"""Triton backend of ``moe_experts`` (CUDA bf16 activations; registered as "triton").

Same signature and meaning as ``reference_fp8.moe_experts``. One step, no host sync:
1. route: the T x k (token, expert) pairs sorted by expert (stable), and a table of
   row tiles, each inside one expert's rows (one Triton program, ``triton_moe_sort``,
   up to its ``MAX_PAIRS``; torch ops on the device beyond); one token
   (decode at batch 1): each pair its own tile, no sort across tokens (``pair_route``);
2. act_quant: each token's activation quantized to E4M3 once (not once per expert);
3. grouped GEMM w13: sorted row r reads token row r // k through an index, so the
   activations are never copied per expert; output bf16, as the reference rounds
   w1 and w3 outputs;
4. swiglu_quant: clamp, silu(gate) * up, times the route weight, rounded to bf16
   and quantized to E4M3 per ``act_block`` -- the reference's steps in its order;
5. grouped GEMM w2 (bf16 out);
6. combine (one kernel): each token's k rows added in fp32 in ascending expert order,
   the order in which the reference's expert loop adds them.
Differences from the reference are those of the FP8 GEMM (kernels/triton_fp8_gemm.py)
plus Triton's exp in silu (~2 ulp of fp32) before the bf16 rounding.

Large batches (prefill, from ``LARGE_PAIRS`` token-expert pairs; ``LARGE_PATH``; V4's activation
scales per 128 keep the "fp8" path there, ``_large_path``): the
FP8 products rescaled after every 32-deep step keep the tensor cores waiting (the
grouped GEMM ran at 8x its floor on an 8192-token prefill). The "bf16" path keeps
every step above but hands the GEMMs the round-tripped activations as bf16 (E4M3 code
x power-of-two scale: exact) and dequantizes each weight tile to bf16 in registers
(exact too, each value with its own 32-wide block's scale): 128-deep bf16 tensor-core
products with one fp32 accumulator over the whole K, 128 x 128 tiles -- the reference's
own arithmetic (its GEMMs run on the dequantized values in bf16).
Measured (H200, tests/gpu/test_moe_gpu.py, BENCHMARKS.md): 60x closer to the reference
(rel 2.5e-5 against 1.6e-3 at 600 tokens). 8192-token prefill of the real-width model:
FP8 path 406.5 ms; bf16 with 32-deep products and the FP8 path's 64 x 128 tiles 406.8;
128-deep products 351.8; and 128 x 128 tiles, 8 warps 346.0 (this path).

Experts re-encoded at load to one scale per 128 inputs (block (1, 128); native_format)
take the same paths: "bf16" then reads one weight scale per column per 128-deep step
instead of a [128, BLOCK_N] tile of them; "fp8" multiplies the weight scale once per
128 (fp8_gemm_kernel). V4.1's activation scales per 32 keep the "fp8" path's products
32 deep either way (V4's per 128 make them 128 deep). Measured on the 8192-token prefill
(BENCHMARKS.md, session 4): "bf16" 259.1 -> 253.2 ms, "fp8" 303.0 -> 264.0 ms, so "bf16"
stays the prefill path; benchmarks/bench_moe_blocks.py times one layer by storage and tile.

On Hopper the "bf16" path's two GEMMs at 128-row tiles (prefill) run as one warp-specialized Gluon kernel
each (``gluon_moe``: the converted weights as wgmma's register operand; an expert's last <= 32 rows on the tile
before): the same bits as the Triton kernel, 1.8x its speed (BENCHMARKS.md, session 15). Where the activation
scales are per 32 (V4.1) and batch invariance is off, a prefill-sized call takes FP8 products there instead
(``gluon_moe.grouped_gemm_fp8``, ``gluon_moe.FP8_PRODUCTS``: the per-32 codes re-expressed per 128 by the quantizing
passes, then other sums; the 8192-token prefill 130.60 -> 109.67 ms, session 30).

Decode too takes the "bf16" path where activation scales are per 32 (``DECODE_PATH``, V4.1),
with row tiles by rows per expert; V4's per-128 scales keep the "fp8" path there. Packed E2M1
experts (weights="fp4", uint8 in quant.to_fp4_tiles' layout) take the "bf16" path in prefill and
batch-invariant mode: each GEMM step unpacks its weight tile in registers (fp8_triton_jit.py
``e2m1_halves``), to the same bf16 values as the E4M3 conversion, so the same bits. At decode they
take ``FP4_DECODE_PATH``.
"""

from __future__ import annotations

from collections.abc import Callable

import dataclasses
import functools

import torch

from deepinfer_adapters.kernels import gluon_gemv, gluon_moe, invariance, register
from deepinfer_adapters.kernels import triton_fp8_gemm as fp8
from deepinfer_adapters.kernels.triton_support import interpreting, pdl_launch, triton_available
from deepinfer_adapters.model_impl.quant import E4M3_TILE, expert_matrix, is_e4m3_tiles, is_span_packed


LARGE_PAIRS = 8192  # token-expert pairs from which LARGE_PATH applies (prefill chunks)
# "auto": by the activation scales and the experts' storage (``_large_path``), or one path for all.
LARGE_PATH = "auto"
# Below LARGE_PAIRS pairs, with activation scales finer than 128 (V4.1's per 32): the bf16 path
# with row tiles by rows per expert (``bf16_row_config``). The fp8 path rescales its products
# after every 32-deep step there. H200, one layer of the real width (BENCHMARKS.md, session 7):
# 1 / 2 / 8 / 32 tokens 91.5 / 149 / 436 / 1356 us against the fp8 path's 112 / 178 / 528 /
# 1687; the model's decode step at B = 8 / 32 / 128 5.74 / 12.62 / 23.14 ms against 6.71 /
# 14.70 / 27.37. V4's per-128 scales make the fp8 path's products 128 deep: it keeps that path,
# at the copy rate (~4.1 TB/s at 32 tokens).
DECODE_PATH = "bf16"
# Packed E2M1 experts below LARGE_PAIRS: "fp8" (``fp4_gemm_rows_kernel``: each span unpacked to E4M3
# in registers, FP8 products with the weight as the 64-row operand) or "bf16" (unpacked to bf16). H200,
# one V4.1 layer at 8 / 32 tokens (BENCHMARKS.md, session 8): 364 / 1159 us; their bf16 path 479 / 1531;
# the same experts as E4M3 on their bf16 path 431 / 1411.
FP4_DECODE_PATH = "fp8"
PAIR_SORT_KERNEL = True  # pair routing's per-token sort in one Triton launch (else torch's sort + gather)
# one token's experts: w13's K-split partials added by swiglu_quant, not by a split-sum launch between the two
# (~2.5 us a MoE layer on the critical path at B=1, the s25check timeline)
SWIGLU_ADDS_SPLITS = True
# ... and the token's activation quantized by the programs after the sort's, in its launch (one launch fewer on
# the critical path a MoE layer)
SORT_QUANTIZES = True
SPLIT_SUM_GROUPS = 4  # act_block blocks a swiglu_quant program takes where it adds K-split partials


@functools.cache
def _kernels():
    import triton

    from deepinfer_adapters.kernels import fp8_triton_jit as jit  # imports triton at its top

    return triton, jit.swiglu_quant_kernel, jit.combine_kernel, jit.swiglu_kernel


def route(expert_ids: torch.Tensor, n_experts: int, block_m: int) -> tuple[torch.Tensor, fp8.Groups, torch.Tensor]:
    """(order, tiles, combine positions). Sorted row r is pair ``order[r]`` (= token * k + slot);
    tile i covers sorted rows [row0, row1) of one expert; ``positions[t]`` lists the sorted
    rows of token t in ascending expert order. One Triton program where the pairs fit it
    (``triton_moe_sort``), three beyond (``sort_pairs_blocked``); the torch ops below are the
    reference the kernels are tested against (and the path beyond ``BLOCKED_MAX_EXPERTS`` experts)."""
    from deepinfer_adapters.kernels import triton_moe_sort  # imports triton

    if triton_moe_sort.fits(expert_ids, n_experts):
        return triton_moe_sort.sort_pairs(expert_ids, n_experts, block_m)
    if triton_moe_sort.fits_blocked(expert_ids, n_experts):  # prefill-sized: three launches
        return triton_moe_sort.sort_pairs_blocked(expert_ids, n_experts, block_m)
    T, k = expert_ids.shape
    flat = expert_ids.flatten()
    order = torch.argsort(flat, stable=True)
    # scatter_add, not bincount: bincount sizes its output from the data (a host sync,
    # which also rules out CUDA-graph capture)
    counts = torch.zeros(n_experts, dtype=torch.long, device=flat.device).scatter_add_(0, flat, torch.ones_like(flat))
    starts = torch.cumsum(counts, 0) - counts
    tiles_per_expert = (counts + block_m - 1) // block_m
    tile_end = torch.cumsum(tiles_per_expert, 0)
    # sum_e ceil(c_e / B) <= (T k) // B + (number of non-empty experts)
    max_tiles = (T * k) // block_m + min(n_experts, T * k)
    t = torch.arange(max_tiles, device=flat.device)
    expert = torch.searchsorted(tile_end, t, right=True)
    e = expert.clamp(max=n_experts - 1)
    row0 = starts[e] + (t - (tile_end[e] - tiles_per_expert[e])) * block_m
    tiles = fp8.Groups(expert=torch.where(expert < n_experts, expert, -1).to(torch.int32),
                       row0=row0.to(torch.int32), row1=(starts[e] + counts[e]).to(torch.int32),
                       row_idx=(order // k).to(torch.int32))
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(T * k, device=flat.device)
    positions = inverse.view(T, k).gather(1, expert_ids.argsort(dim=1))
    return order, tiles, positions


def swiglu_quant(h13: torch.Tensor, route_w: torch.Tensor, limit: float, block: int, *,
                 dequant_to: torch.dtype | None = None, scale_block: int | None = None):
    """h13 [R, 2I] bf16 (gate | up), route_w [R] fp32 -> (E4M3 [R, I], fp32 scales [R, I / block]);
    with ``dequant_to`` the round-tripped values in that dtype instead (and None); ``scale_block`` as
    ``triton_fp8_gemm.act_quant``'s (one launch: no K-split partials). h13 may also be a
    K-split GEMM's fp32 partials [S, R, 2I] (``gluon_gemv.pair_gemm(partials=True)``): the kernel adds them as
    ``sum_splits(h13, bf16)`` would, one launch instead of two, the same bits."""
    triton, kernel, _, _ = _kernels()
    splits = h13.shape[0] if h13.dim() == 3 else 1
    if splits > 1 and h13.dtype != torch.float32:
        raise ValueError(f"swiglu_quant: K-split partials must be fp32, not {h13.dtype}")
    h13 = h13 if h13.dim() == 3 else h13.unsqueeze(0)
    R, I = h13.shape[1], h13.shape[2] // 2
    scale_groups = fp8.stored_scale_groups(I, block, scale_block, dequant_to)
    if splits > 1 and scale_groups > 1:
        raise ValueError("swiglu_quant: scale_block with K-split partials")
    q = torch.empty(R, I, device=h13.device, dtype=dequant_to or torch.float8_e4m3fn)
    s = None if dequant_to else torch.empty(R, triton.cdiv(I, block * scale_groups), device=h13.device,
                                            dtype=torch.float32)
    groups = fp8.quant_groups(triton.cdiv(I, block), block)
    if splits > 1:  # each value's partials are loaded one after the other: more programs, fewer values each (at
        # 128 blocks a program one token's 6 rows took 8.8 us, against 2.4 over a bf16 sum; H200, s25a timeline)
        groups = min(groups, SPLIT_SUM_GROUPS)
    if R:
        kernel[(R, triton.cdiv(triton.cdiv(I, block), groups))](
            h13, route_w, q, q if s is None else s, I, h13.stride(1), q.stride(0), 0 if s is None else s.stride(0),
            float(limit), splits, h13.stride(0), BLOCK=block, GROUPS=groups, HAS_LIMIT=limit > 0,
            DEQUANT_OUT=dequant_to is not None, SUM_TO_BF16=splits > 1, SCALE_GROUPS=scale_groups, num_warps=4,
            **pdl_launch())
    return q, s


def pair_route(expert_ids: torch.Tensor, route_w: torch.Tensor) -> tuple[fp8.Groups, torch.Tensor]:
    """(tiles, route weights per row) with no sort across tokens: row t k + j is token t's j-th
    pair in ascending expert order (the order the combine adds them in) and its own row tile;
    routing is one small sort, not ~25 ops. An expert picked by several tokens is read once
    per pair, so this is the default for one token only (its k experts are distinct). H200,
    real-width model, random routing: 8 and 32 tokens took 1.3 and 7.3 ms longer per step."""
    if PAIR_SORT_KERNEL:  # one launch (triton_moe_sort.sort_each_token); torch's sort and gather ~7
        from deepinfer_adapters.kernels import triton_moe_sort

        experts, rw = triton_moe_sort.sort_each_token(expert_ids, route_w)
    else:
        ids, perm = expert_ids.sort(dim=1, stable=True)
        experts, rw = ids.flatten().to(torch.int32), route_w.float().gather(1, perm).flatten()
    return _pair_tiles(experts, *expert_ids.shape), rw


def _pair_tiles(experts: torch.Tensor, T: int, k: int) -> fp8.Groups:
    """``pair_route``'s tiles over its sorted experts [T k]: row r its own tile, reading token r // k."""
    device = experts.device

    def build() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows = torch.arange(T * k, device=device, dtype=torch.int32)
        return rows, rows + 1, rows // k

    row0, row1, row_idx = fp8.shape_cached(("moe_pairs", T, k, device), build)
    return fp8.Groups(expert=experts, row0=row0, row1=row1, row_idx=row_idx)


def combine(out: torch.Tensor, T: int, k: int, rows: torch.Tensor | None = None,
            shared: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 [T, D]: token t's k rows of ``out`` (``rows[t]``, or rows t k .. t k + k - 1) added
    one by one in fp32, as the reference's expert loop adds them; then ``shared`` [T, D] added
    and the sum cast to its dtype, when given."""
    triton, _, kernel, _ = _kernels()
    D = out.shape[1]
    y = torch.empty(T, D, device=out.device, dtype=torch.float32 if shared is None else shared.dtype)
    if T:
        block = 1024
        kernel[(T, triton.cdiv(D, block))](
            out, out if rows is None else rows.contiguous(), out if shared is None else shared, y, D, out.stride(0),
            0 if shared is None else shared.stride(0), y.stride(0), K=k, GATHER=rows is not None,
            HAS_SHARED=shared is not None, BLOCK=block, num_warps=4, **pdl_launch())
    return y


# Rows per expert from which a prefill-sized call with 128-wide scales takes the fp8 path (``_large_path``).
FP8_LARGE_ROWS = 128


def _large_path(block: tuple[int, int], act_block: int, fp4: bool, rows_per_expert: int) -> str:
    """Prefill-sized calls outside batch-invariant mode: "fp8" where the activation scales and the
    E4M3 experts' scales both cover 128 inputs (V4 as loaded: one rescale a 128-deep FP8 product) and
    the experts average ``FP8_LARGE_ROWS`` rows or more, else "bf16" (V4.1's per-32 activation scales:
    a rescale every 32-deep product, 2.6x slower there). H200, V4 widths (BENCHMARKS.md, session 14):
    one layer's experts at 8192 tokens (192 rows an expert) 6.5 ms against the bf16 path's 9.4; the
    4-layer model's prefill of 16384 tokens 202 ms against 264, of 4096 tokens (96 rows an expert)
    70 against 67."""
    if LARGE_PATH != "auto":
        return LARGE_PATH
    fits = act_block % 128 == 0 and block[1] % 128 == 0 and not fp4
    return "fp8" if fits and rows_per_expert >= FP8_LARGE_ROWS else "bf16"


def _default_path(x, w2, w2_scale, block, act_block, large: bool, fp4: bool, kstep: int,
                  rows_per_expert: int) -> str:
    """``moe_experts``' path where none is given (see the module doc)."""
    if invariance.enabled():
        return "bf16"
    if large:
        return _large_path(block, act_block, fp4, rows_per_expert)
    if fp4:
        return FP4_DECODE_PATH if fp8.fp4_rows_fit(x.shape[-1], w2, w2_scale, block, act_block) else "bf16"
    return DECODE_PATH if kstep < 128 else "fp8"


def moe_experts(x: torch.Tensor, route_w: torch.Tensor, expert_ids: torch.Tensor,
                w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor, w2_scale: torch.Tensor,
                block: tuple[int, int], act_block: int, limit: float,
                shared: torch.Tensor | Callable[[], torch.Tensor] | None = None, *,
                config: fp8.GemmConfig | None = None, path: str | None = None,
                routing: str | None = None) -> torch.Tensor:
    """See ``reference_fp8.moe_experts``: fp32 [T, D]. ``path``: "fp8" or "bf16" (see the
    module doc; default by the number of token-expert pairs and the activation scales'
    width, ``DECODE_PATH``; one token on the Gluon GEMV where ``gluon_gemv.GLUON_PAIRS``, the fp8 path's
    arithmetic; batch-invariant mode: always "bf16", whose row tiles give a row the same bits, so a token's
    result never depends on the others).
    ``routing``: "pairs" (``pair_route``; the default for one token) or "sorted" (``route``)."""
    T, k = expert_ids.shape
    E = w13.shape[0]
    kstep = fp8.kstep_for(block, act_block)
    large = T * k >= LARGE_PAIRS
    fp4 = is_span_packed(w13)  # packed E2M1 (the checkpoint's own bytes)
    if routing is None:
        routing = "pairs" if T == 1 else "sorted"
    if path is None and routing == "pairs" and gluon_gemv.pairs_fit(x, (w13, w2), (w13_scale, w2_scale), block,
                                                                     act_block):
        return _pairs_on_gluon(x, route_w, expert_ids, w13, w13_scale, w2, w2_scale, block, act_block, limit, shared)
    # prefill-sized calls with per-32 activation scales (V4.1) on the Gluon kernel's FP8 products, where the default
    # path would be the bf16 one (not in batch-invariant mode: other sums than the bf16 path's row tiles)
    fp8_products = path is None and large and routing == "sorted" and not invariance.enabled() and all(
        gluon_moe.fp8_fits(x, w, s, block, act_block) for w, s in ((w13, w13_scale), (w2, w2_scale)))
    if path is None:
        path = _default_path(x, w2, w2_scale, block, act_block, large, fp4, kstep, T * k // E)
    if path == "bf16":
        cfg = config or (fp8.BF16_LARGE_CONFIG if large and not invariance.enabled()
                         else fp8.bf16_row_config(max(1, T * k // E)))
    elif fp4:
        cfg = config or fp8.FP4_ROWS_CONFIG
    else:
        cfg = config or fp8.default_config(1 if routing == "pairs" else max(1, T * k // E), kstep)
        if config is None and is_e4m3_tiles(w13):  # the N tile is the weights' row tile
            cfg = dataclasses.replace(cfg, block_n=E4M3_TILE)
    if routing == "pairs":
        tiles, rw = pair_route(expert_ids, route_w)
        positions = None
    else:
        order, tiles, positions = route(expert_ids, E, cfg.block_m)
        rw = route_w.float().flatten()[order].contiguous()
    # Hopper, the bf16 path's 128-row tiles: both GEMMs on the Gluon kernel (the same bits, gluon_moe), whose
    # tiles carry their expert's last rows (absorb_tails: the Triton kernel would skip them), or neither
    gluon = path == "bf16" and routing == "sorted" and not fp8_products and all(
        gluon_moe.fits(x, w, s, block, cfg.block_m) for w, s in ((w13, w13_scale), (w2, w2_scale)))
    if gluon or fp8_products:
        tiles = gluon_moe.absorb_tails(tiles, gluon_moe.FP8_TAIL if fp8_products else gluon_moe.TAIL)
    plain_rows = fp8.Groups(tiles.expert, tiles.row0, tiles.row1)
    if fp8_products:
        q, s = fp8.act_quant(x, act_block, scale_block=128)  # grouped_gemm_fp8's scales
        q_sorted = q.view(torch.uint8).index_select(0, tiles.row_idx).view(q.dtype)
        h13 = gluon_moe.grouped_gemm_fp8(q_sorted, s.index_select(0, tiles.row_idx), w13, w13_scale, tiles)
        h8, hs = swiglu_quant(h13, rw, limit, act_block, scale_block=128)
        out = gluon_moe.grouped_gemm_fp8(h8, hs, w2, w2_scale, plain_rows)
    elif path == "bf16":
        xa = fp8.act_quant(x, act_block, dequant_to=x.dtype)[0]
        if gluon:  # its activations in sorted order
            h13 = gluon_moe.grouped_gemm(xa.index_select(0, tiles.row_idx), w13, w13_scale, tiles)
        else:
            h13 = fp8.gemm(xa, None, 0, w13, w13_scale, block, x.dtype, rows=T * k, groups=tiles, config=cfg,
                           kstep=None if fp4 else fp8.bf16_kstep(x.shape[-1], block))
        ha = swiglu_quant(h13, rw, limit, act_block, dequant_to=x.dtype)[0]
        if gluon:
            out = gluon_moe.grouped_gemm(ha, w2, w2_scale, plain_rows)
        else:
            out = fp8.gemm(ha, None, 0, w2, w2_scale, block, x.dtype, rows=T * k, groups=plain_rows, config=cfg,
                           kstep=None if fp4 else fp8.bf16_kstep(expert_matrix(w2)[1], block))
    else:
        q, s = fp8.act_quant(x, act_block)
        h13 = fp8.gemm(q, s, act_block, w13, w13_scale, block, x.dtype, rows=T * k, groups=tiles, config=cfg)
        h8, hs = swiglu_quant(h13, rw, limit, act_block)
        out = fp8.gemm(h8, hs, act_block, w2, w2_scale, block, x.dtype, rows=T * k, groups=plain_rows, config=cfg)
    return combine(out, T, k, positions, _joined(shared, x))


def _joined(shared: torch.Tensor | Callable[[], torch.Tensor] | None, x: torch.Tensor) -> torch.Tensor | None:
    """The shared expert's output, joined only now where it is a callable (reference_fp8.moe_experts)."""
    if callable(shared):
        shared = shared()
        if shared.shape != x.shape:
            raise ValueError(f"moe_experts: the shared expert's output is {tuple(shared.shape)}, not {tuple(x.shape)}")
        shared = shared if shared.stride(-1) == 1 else shared.contiguous()
    return shared


def _pairs_on_gluon(x, route_w, expert_ids, w13, w13_scale, w2, w2_scale, block, act_block, limit, shared):
    """One token's experts on the Gluon GEMV (``gluon_gemv.pair_gemm``, where ``gluon_gemv.GLUON_PAIRS``): the
    fp8 path's arithmetic, each pair its own row (``pair_route``), K split where ``gluon_gemv.balanced_work``
    finds it pays (w13 at B=1 in the s25check timeline); then ``swiglu_quant`` adds w13's partials
    (``SWIGLU_ADDS_SPLITS``)."""
    T, k = expert_ids.shape
    if SORT_QUANTIZES and PAIR_SORT_KERNEL:
        from deepinfer_adapters.kernels import triton_moe_sort

        experts, rw, q, s = triton_moe_sort.sort_each_token_and_quantize(expert_ids, route_w, x, act_block)
        tiles = _pair_tiles(experts, T, k)
    else:
        tiles, rw = pair_route(expert_ids, route_w)
        q, s = fp8.act_quant(x, act_block)
    h13 = gluon_gemv.pair_gemm(q, s, tiles.row_idx, tiles.expert, w13, w13_scale, block, x.dtype,
                               partials=SWIGLU_ADDS_SPLITS and x.dtype == torch.bfloat16)
    h8, hs = swiglu_quant(h13, rw, limit, act_block)
    out = gluon_gemv.pair_gemm(h8, hs, tiles.row0, tiles.expert, w2, w2_scale, block, x.dtype)
    return combine(out, T, k, None, _joined(shared, x))


SWIGLU_BLOCK = 1024


def swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float, route_w: torch.Tensor | None = None) -> torch.Tensor:
    """See ``reference.swiglu``: one launch instead of ~7 elementwise kernels (the shared
    expert's, whose w1 and w3 outputs are column views of one merged GEMM's result). Each
    element is computed alone: batch-invariant."""
    triton, _, _, kernel = _kernels()
    T, I = gate.shape
    out = torch.empty(T, I, device=gate.device, dtype=gate.dtype)
    rw = route_w.float().contiguous() if route_w is not None else out
    if T:
        kernel[(T, triton.cdiv(I, SWIGLU_BLOCK))](
            gate, up, rw, out, I, gate.stride(0), up.stride(0), out.stride(0), float(limit), BLOCK=SWIGLU_BLOCK,
            HAS_LIMIT=limit > 0, HAS_RW=route_w is not None, INTERPRET=interpreting(), num_warps=4, **pdl_launch())
    return out


def supports_swiglu(gate, up, limit, route_w=None) -> bool:
    return (gate.is_cuda and gate.dim() == 2 and up.shape == gate.shape and gate.dtype == up.dtype
            and gate.stride(-1) == 1 and up.stride(-1) == 1 and gate.dtype in (torch.bfloat16, torch.float32)
            and (route_w is None or route_w.numel() == gate.shape[0]) and triton_available())


def supports(x, route_w, expert_ids, w13, w13_scale, w2, w2_scale, block, act_block, limit, shared=None,
             **_) -> bool:
    fp4 = is_span_packed(w13)
    inter = expert_matrix(w2)[1]
    shared_ok = shared is None or callable(shared) or (shared.shape == x.shape and shared.stride(-1) == 1)
    weights_ok = (fp8._fp8_weight_ok(x, w13, block, act_block) if not fp4 else
                  x.is_cuda and x.dtype == torch.bfloat16 and is_span_packed(w2) and tuple(block) == (1, 32)
                  and x.shape[-1] % 32 == 0 and triton_available())
    return (shared_ok and act_block > 0 and w13.dim() == w2.dim() == (5 if is_e4m3_tiles(w13) else 3)
            and inter % act_block == 0 and inter % block[0] == 0
            and weights_ok)


register("moe_experts", "triton", moe_experts, supports=supports, priority=10)
register("swiglu", "triton", swiglu, supports=supports_swiglu, priority=10)
