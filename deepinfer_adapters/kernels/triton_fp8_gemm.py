"""Triton backends of ``fp8_linear`` and ``fp8_grouped_linear`` (CUDA bf16 activations;
registered as "triton"), and the block-scaled FP8 GEMM the MoE backend shares.

Weights stay as the checkpoint stores them: E4M3 [.., N, K] with one float32 or E8M0
scale per (B0, B1) tile (V4.1: 32 x 32; routed experts converted from FP4: 1 x 32).
torch._scaled_mm's block-wise modes need 128-wide blocks, so V4.1's 32-wide blocks
take this kernel.

Arithmetic (``act_block`` > 0, the reference's FP8 GEMM):
- ``act_quant`` quantizes each row per ``act_block`` values with the reference's
  rule (model_impl/quant.py fp8_roundtrip: amax floor 1e-4, power-of-two scale
  2^ceil(log2(amax * fp32(1/448))), saturating round-to-nearest-even E4M3), giving
  the same E4M3 codes and scales as the torch reference.
- The GEMM walks K in steps of KSTEP = the smaller of the two scale blocks (32 for
  V4.1). Each step is one FP8 tensor-core product of exact E4M3 x E4M3 terms,
  multiplied by (activation scale x weight scale) -- a power of two, so exact -- and
  added to an fp32 accumulator. When one weight scale covers a whole loop iteration
  (routed experts converted to (1, 128) blocks, model_impl/native_format.py), the
  iteration's products take their activation scales, are summed, and the weight scale
  multiplies the sum once (fewer scale loads and multiplies; V4.1's activation scales per
  32 still keep each product 32 deep). The reference dequantizes both and sums the same
  exact products in fp32 in another order, then rounds to bf16: outputs agree to
  about one bf16 ulp (tests/gpu/test_fp8_linear_gpu.py).
- ``act_block`` == 0 (wo_a; bf16 weights' rule): the bf16 activation meets the
  weight tile dequantized to bf16 in registers (exact), bf16 tensor-core products.
- Decode rows on the swapped kernel with ``bf16_steps`` (the default where the weight has
  few row tiles, ``BF16_STEPS``): the same E4M3 codes and scales, but both operands
  dequantized in registers (E4M3 x a power of two is exact in bf16) and multiplied in one
  bf16 product 128 deep: the same exact products as above, summed in fp32 in another order,
  with a quarter of the products and no per-step rescale of the accumulator.

Shape choices: tiles by the number of rows M (decode rows fit one tile; from 65 rows
64 x 128, ``default_config``), and split-K (fp32 partials, summed in a fixed order) when too few
tiles would run to cover the SMs. Both depend on M, so a row's last bits can depend
on the batch it shares a call with. In batch-invariant mode (``kernels.invariance``)
neither does: one fixed tile (``invariant_config``), split-K chosen from N and K only,
its partials added in a fixed order (not torch's shape-dependent reduction), and no
cuBLAS path (cuBLAS picks its kernel by M). A row's products and their summation order
then depend on that row and the weight alone.

From ``LARGE_M`` rows on (prefill) the default is a second path (``LARGE_M_PATH``):
dequantize the weight to bf16 and round-trip the activation (both exact), then one
cuBLAS bf16 GEMM -- the same arithmetic as the reference, and on the H200 about 2x
faster than this kernel there (benchmarks/bench_fp8_gemm.py times both). The MoE's
prefill measurements suggest why: its 32-deep product loop, not the per-32 rescale,
held it back; bf16 products 128 deep (``gemm(..., kstep=128)`` on a bf16 activation)
gained 15% on the whole prefill there (kernels/triton_moe.py). That path is not yet
measured against cuBLAS for these linears. Before both, where it fits (a Hopper GPU, not
batch-invariant): cuBLAS's block-scaled FP8 GEMM on both sides re-expressed under wider
scales (kernels/fp8_blockwise.py, ``fp8_blockwise.DENSE_FP8``).

Triton is imported lazily (importing ``deepinfer_adapters`` needs no GPU stack).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch

from deepinfer_adapters.kernels import fp8_blockwise, invariance, register
from deepinfer_adapters.kernels.triton_support import interpreting, pdl_launch, triton_available
from deepinfer_adapters.model_impl.batch import cached_constant
from deepinfer_adapters.model_impl.quant import (E4M3_TILE, FP4_TILE_ROWS, expert_matrix, fp4_span, fp4_tiled,
                                                 is_e4m3_tiles, is_span_packed)

FP8_MAX = 448.0
ACT_AMAX_FLOOR = 1e-4
TARGET_PROGRAMS = 264  # two per SM on an H200 (132 SMs): split-K below this
LARGE_M = 1024  # rows from which LARGE_M_PATH applies
# Up to this many rows the GEMM may quantize its activation tiles itself: one launch less
# than act_quant + GEMM, but each program quantizes its tiles again, on the K loop's critical
# path. H200, one row (bench_decode_gemv.py): 2-3 us saved where a program runs <= 5 K steps
# (wq_a, wkv, index wq_b, shared w1/w2), 3-25 us lost from 10 steps on (wq_b, wo_b, Engram wkv).
QUANT_IN_GEMM_ROWS = 16
QUANT_IN_GEMM_STEPS = 8  # K-loop iterations per program up to which it does
# H200, 8192 rows (BENCHMARKS.md): the bf16 cuBLAS path 2.2x the FP8 floor, this kernel 4.4-4.8x
LARGE_M_PATH = "bf16_cublas"
# packed E2M1 weights on the bf16 path: "ptx" unpacks four bytes per register operation and converts
# in hardware (fp8_triton_jit.py ``_E2M1_LOW_PTX``); "int" per nibble with integer operations (Triton's
# CPU interpreter always takes it)
FP4_UNPACK = "ptx"
_FP4_MODES = {"int": 1, "ptx": 2}


@dataclass(frozen=True)
class GemmConfig:
    block_m: int
    block_n: int
    sub: int  # scale-block steps of K per loop iteration (loads issued together)
    num_warps: int
    num_stages: int
    programs: int = TARGET_PROGRAMS  # split K while fewer tiles than this run (0: never split)


def default_config(m: int, kstep: int) -> GemmConfig:
    """Tiles by rows: decode batches fit one M tile, so each weight tile is read once.
    From the H200 sweep (benchmarks/bench_fp8_gemm.py): 64 x 128 tiles are the best or
    within 10% of it from 128 rows up, also for the MoE prefill; 128 x 128 with 4 scale
    steps per iteration ran 2x slower (and 7x for the MoE), so it is not used."""
    sub = max(1, 128 // kstep)
    if m <= 16:
        return GemmConfig(16, 64, sub, 4, 4)
    if m <= 32:
        return GemmConfig(32, 64, sub, 4, 4)
    if m <= 64:
        return GemmConfig(64, 64, sub, 4, 3)
    return GemmConfig(64, 128, sub, 4, 3)


# Up to this many rows (decode) an ungrouped GEMM on FP8 activations runs fp8_gemm_rows_kernel: the
# weight tile as the 64-row operand of the FP8 tensor-core instruction, the rows as its narrow one
# (block_m: rows per program; block_n: weight rows). 0: never.
SWAPPED_ROWS = 16
SWAPPED_CONFIG = GemmConfig(16, 64, 4, 4, 4)
# The swapped kernel's bf16 steps (``gemm(bf16_steps=...)``) by default where the weight has fewer than
# programs / 4 row tiles, so K is split (H200, bench_decode_gemv.py, session 10, us at 8 rows, FP8 steps ->
# bf16 steps: wq_a + wkv 11.9 -> 10.2, index wq_b 8.3 -> 7.9, wo_b 28.0 -> 22.9, shared w1 + w3 19.0 -> 16.0,
# shared w2 13.0 -> 11.0; unsplit, each program walking K alone, the in-register conversion made them
# slower: wq_b 21.3 -> 24.4, Engram wkv 72.3 -> 74.8). The same at one row.
BF16_STEPS = True
BF16_STEPS_CONFIG = GemmConfig(16, 64, 1, 4, 3, programs=1056)


def invariant_config(kstep: int) -> GemmConfig:
    """The one tile of batch-invariant mode (any M)."""
    return GemmConfig(64, 64, max(1, 128 // kstep), 4, 3)


BF16_KSTEP = 128  # K per bf16 tensor-core product where K allows (weight scales applied in the tile)
BF16_LARGE_CONFIG = GemmConfig(128, 128, 1, 8, 3)  # bf16 activations, prefill-sized (the MoE's measured best)


def bf16_row_config(m: int) -> GemmConfig:
    """Tiles of the bf16 path by ``m``, rows per expert: the MoE's in batch-invariant mode (any
    batch) and below ``triton_moe.LARGE_PAIRS`` (decode). Only the row tile follows ``m``; the
    K step, N tile and products stay, so a row's result is the same in each
    (tests/gpu/test_batch_invariance_gpu.py checks every tile bit for bit). A decode step's
    few rows per expert then do not pay for 128-row products."""
    if m <= 16:
        return GemmConfig(16, 128, 1, 4, 3)
    if m <= 64:
        return GemmConfig(64, 128, 1, 4, 3)
    return BF16_LARGE_CONFIG


def bf16_kstep(K: int, block: tuple[int, int]) -> int:
    """``BF16_KSTEP`` where it divides K, else the weight's own K block (tiny models: K = 64)."""
    return BF16_KSTEP if K % BF16_KSTEP == 0 and BF16_KSTEP % block[1] == 0 else block[1]


@functools.cache
def _kernels():
    import triton

    from deepinfer_adapters.kernels import fp8_triton_jit as jit  # imports triton at its top

    return triton, jit.act_quant_kernel, jit.fp8_gemm_kernel, jit.split_sum_kernel, jit.fp8_gemm_rows_kernel


# ------------------------------------------------------------------------ wrappers ----


def quant_groups(blocks: int, block: int) -> int:
    """Blocks of ``block`` values one quantizing program takes from a row of ``blocks`` blocks (act_quant's and
    its fused twins' grids): the whole row up to 4096 values, in a power of two. The bits never depend on it."""
    return max(1, min(1 << (max(1, blocks) - 1).bit_length(), 4096 // block))


def act_quant(x: torch.Tensor, block: int, *, dequant_to: torch.dtype | None = None, scale_block: int | None = None):
    """x [M, K] -> (E4M3 [M, K], fp32 scales [M, K / (scale_block or block)]); with ``dequant_to`` the
    round-tripped values in that dtype instead (and None). ``scale_block`` (a multiple of ``block`` dividing K):
    the codes rounded per ``block`` values, then stored with one scale per ``scale_block`` (``widen_scales``)."""
    triton, kernel, _, _, _ = _kernels()
    M, K = x.shape
    scale_groups = stored_scale_groups(K, block, scale_block, dequant_to)
    x = x if x.stride(-1) == 1 else x.contiguous()
    q = torch.empty(M, K, device=x.device, dtype=dequant_to or torch.float8_e4m3fn)
    s = None if dequant_to else torch.empty(M, triton.cdiv(K, block * scale_groups), device=x.device,
                                            dtype=torch.float32)
    groups = quant_groups(triton.cdiv(K, block), block)
    if M:
        kernel[(M, triton.cdiv(triton.cdiv(K, block), groups))](
            x, q, q if s is None else s, K, x.stride(0), q.stride(0), 0 if s is None else s.stride(0),
            BLOCK=block, GROUPS=groups, DEQUANT_OUT=dequant_to is not None, SCALE_GROUPS=scale_groups, num_warps=4,
            **pdl_launch())
    return q, s


def stored_scale_groups(K: int, block: int, scale_block: int | None, dequant_to: torch.dtype | None) -> int:
    """Blocks under one stored scale (``act_quant``'s ``scale_block``), checked."""
    if scale_block is None:
        return 1
    groups = scale_block // block
    if dequant_to is not None or scale_block % block or K % scale_block or groups & (groups - 1) or scale_block > 4096:
        raise ValueError(f"scale_block {scale_block}: needs codes out, a power-of-two multiple of the block {block} "
                         f"dividing the row's {K} values, at most 4096")
    return groups


def _scale_arg(scale: torch.Tensor) -> tuple[torch.Tensor, bool]:
    if scale.dtype in (torch.float8_e8m0fnu, torch.uint8):
        return scale.view(torch.uint8), True
    return scale.float(), False


def kstep_for(weight_block: tuple[int, int], act_block: int) -> int:
    return min(act_block, weight_block[1]) if act_block else weight_block[1]


@dataclass
class Groups:
    """Row tiles of a grouped GEMM: tile i covers rows [row0[i], row1[i]) of expert[i] (-1 = idle)."""

    expert: torch.Tensor
    row0: torch.Tensor
    row1: torch.Tensor
    row_idx: torch.Tensor | None = None  # A row of each output row (None: the same row)
    scatter_out: bool = False  # the output row is row_idx's too (else the tile's row)


def gemm(a: torch.Tensor, a_scale: torch.Tensor | None, act_block: int, weight: torch.Tensor,
         w_scale: torch.Tensor, weight_block: tuple[int, int], out_dtype: torch.dtype, *,
         rows: int | None = None, groups: Groups | None = None, config: GemmConfig | None = None,
         kstep: int | None = None, quantize_a: bool = False, swapped: bool | None = None,
         split_groups: bool = False, bf16_steps: bool | None = None) -> torch.Tensor:
    """out [rows, N] = A W^T with block scales (see the kernel). ``weight`` [N, K] or, with
    ``groups``, [E, N, K] (or E4M3 in ``quant.to_e4m3_tiles``' [E, N / 128, K / 128, 128, 128]).
    ``a`` [*, K] E4M3 with ``a_scale`` per ``act_block``, or bf16.
    ``kstep``: K per tensor-core product; bf16 ``a`` only, a multiple of the weight's K block
    (default: that block; packed E2M1 weights: their span, ``quant.fp4_span(K)``, the only one
    they take). ``quantize_a``: ``a`` is bf16 and quantized per ``act_block`` (the
    same codes and scales as ``act_quant``; ``act_block`` must be the K step), inside the GEMM
    when its K loop is short (``QUANT_IN_GEMM_STEPS``), else by ``act_quant`` first.
    ``swapped``: run ``fp8_gemm_rows_kernel`` (W A^T; None: where ``SWAPPED_ROWS`` says).
    ``split_groups``: a grouped GEMM may split K too (as an ungrouped one does while few tiles run).
    ``bf16_steps`` (swapped only): the swapped kernel's bf16 products ``BF16_KSTEP`` deep, both
    operands dequantized exactly in registers (``fp8_triton_jit.bf16_operands``); None: where
    ``BF16_STEPS`` says."""
    triton, _, kernel, _, rows_kernel = _kernels()
    fp4 = is_span_packed(weight)  # packed E2M1, two values a byte, in quant.to_fp4_tiles' layout
    e4m3_tiles = is_e4m3_tiles(weight)  # grouped E4M3 in quant.to_e4m3_tiles' 128 x 128 tiles
    N, K = expert_matrix(weight)
    M = a.shape[0] if rows is None else rows
    ws, e8m0 = _scale_arg(w_scale)
    if fp4 and a_scale is not None:
        return _fp4_rows(a, a_scale, act_block, weight, ws, e8m0, weight_block, out_dtype, M, groups, config,
                         split_groups, quantize_a or swapped or kstep is not None)
    fp4_tiles = fp4 and fp4_tiled(N, K)
    if e4m3_tiles and (groups is None or swapped or (config is not None and config.block_n != E4M3_TILE)):
        raise ValueError(f"fp8 gemm: E4M3 weights in {E4M3_TILE} x {E4M3_TILE} tiles take a grouped GEMM with "
                         f"{E4M3_TILE}-row N tiles, not swapped")
    if fp4:
        kstep = kstep or fp4_span(K)
        if quantize_a or swapped or tuple(weight_block) != (1, 32) or kstep != fp4_span(K):
            raise ValueError(f"fp8 gemm: packed E2M1 weights with a bf16 activation (the bf16 path) take (1, 32) "
                             f"scale blocks and kstep {fp4_span(K)} (their span)")
        if fp4_tiles and config is not None and config.block_n != FP4_TILE_ROWS:
            raise ValueError(f"fp8 gemm: packed E2M1 weights in {FP4_TILE_ROWS}-row tiles take {FP4_TILE_ROWS}-row "
                             f"N tiles, not {config.block_n}")
    if kstep is not None and (a_scale is not None or kstep % weight_block[1]):
        raise ValueError(f"fp8 gemm: kstep {kstep} needs a bf16 activation and a multiple of {weight_block[1]}")
    kstep = kstep or kstep_for(weight_block, act_block)
    steps_fit = act_block > 0 and BF16_KSTEP % max(act_block, weight_block[1]) == 0 and K % BF16_KSTEP == 0
    if bf16_steps:
        if swapped is False or not steps_fit:
            raise ValueError(f"fp8 gemm: bf16_steps take the swapped kernel, FP8 activations and scale blocks "
                             f"dividing {BF16_KSTEP}, K a multiple of it (K = {K})")
        swapped = True
    if quantize_a and (a_scale is not None or act_block != kstep):
        raise ValueError(f"fp8 gemm: quantize_a needs a bf16 activation and act_block == K step ({kstep})")
    if K % kstep:
        raise ValueError(f"fp8 gemm: K = {K} is not a multiple of the scale block {kstep}")
    invariant = invariance.enabled()
    grouped = groups is not None
    if swapped is None:
        swapped = (not grouped and not invariant and config is None and M <= SWAPPED_ROWS
                   and (a_scale is not None or quantize_a))
    if swapped and (grouped or M > (config or SWAPPED_CONFIG).block_m or (a_scale is None and not quantize_a)):
        raise ValueError(f"fp8 gemm: the swapped kernel takes up to {(config or SWAPPED_CONFIG).block_m} rows of FP8 "
                         "activations, ungrouped")
    if bf16_steps is None:
        bf16_steps = bool(swapped and config is None and steps_fit and BF16_STEPS
                          and triton.cdiv(N, BF16_STEPS_CONFIG.block_n) < BF16_STEPS_CONFIG.programs // 4)
        if bf16_steps:
            config = BF16_STEPS_CONFIG
    rows_per_tile = max(1, M // weight.shape[0]) if grouped else M
    cfg = (config or SWAPPED_CONFIG) if swapped else config or (
        invariant_config(kstep) if invariant else default_config(rows_per_tile, kstep))
    if fp4_tiles or e4m3_tiles:  # the N tile is the weights' row tile
        cfg = dataclasses.replace(cfg, block_n=FP4_TILE_ROWS if fp4 else E4M3_TILE)
    if bf16_steps:
        kstep = BF16_KSTEP
    sub = max(s for s in (cfg.sub, 2, 1) if s <= cfg.sub and K % (kstep * s) == 0)
    step = kstep * sub
    if e4m3_tiles and E4M3_TILE % step:
        raise ValueError(f"fp8 gemm: E4M3 weights in tiles of {E4M3_TILE} inputs take K steps dividing "
                         f"{E4M3_TILE}, not {step}")
    m_tiles = groups.expert.numel() if groups is not None else triton.cdiv(M, cfg.block_m)
    n_tiles = triton.cdiv(N, cfg.block_n)
    split_tiles = n_tiles if invariant else m_tiles * n_tiles  # invariant: never from M
    split, k_per_split = split_k(split_tiles, K, step, 0 if grouped and not split_groups else cfg.programs)
    if quantize_a and k_per_split // step > QUANT_IN_GEMM_STEPS:
        a, a_scale = act_quant(a, act_block)
        quantize_a = False
    out = torch.empty((split, M, N) if split > 1 else (M, N), device=a.device,
                      dtype=torch.float32 if split > 1 else out_dtype)
    if M == 0:
        return out if split == 1 else sum_splits(out, out_dtype)
    row_idx = groups.row_idx if grouped and groups.row_idx is not None else None
    if swapped:
        rows_kernel[(n_tiles, split)](
            a, a if a_scale is None else a_scale, weight, ws, out, M, N, K, k_per_split,
            a.stride(0), 0 if a_scale is None else a_scale.stride(0), weight.stride(0), ws.stride(0),
            out.stride(-2), out.stride(0) if split > 1 else 0,
            BLOCK_N=cfg.block_n, BLOCK_T=cfg.block_m, KSTEP=kstep, SUB=sub, A_SB=act_block,
            W_BN=weight_block[0], W_BK=weight_block[1], W_E8M0=e8m0, QUANT_A=quantize_a, BF16_STEPS=bf16_steps,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_launch())
    else:
        _rows_first(kernel, a, a_scale, act_block, weight, ws, out, row_idx, groups, grouped, M, N, K, k_per_split,
                    m_tiles, n_tiles, split, cfg, kstep, sub, weight_block, e8m0, quantize_a, fp4,
                    fp4_tiles or e4m3_tiles)
    return out if split == 1 else sum_splits(out, out_dtype)


# Packed E2M1 experts with E4M3 activations (grouped only): ``fp4_gemm_rows_kernel``, 16 rows of a tile
# against 128 weight rows, one 64-input span (or 128-input block) per iteration. With blocks at V4 widths
# (bench_fp4_experts.py, H200, session 13, 8 / 32 tokens): 2 stages 1.25x / 1.22x this one's time, 4 stages
# 1.02x / 1.00x, at most 128 registers a thread (4 programs an SM instead of 3, a few spills) 1.08x / 1.07x.
FP4_ROWS_CONFIG = GemmConfig(16, 128, 1, 4, 3)
# One 128-input block an iteration (K a multiple of 128), the weight scales read as int32 words through an
# inline load (``fp4_gemm_rows_kernel``'s BLOCK_ACC): no shared-memory layout conversions in the loop; with
# activation scales per 128 (V4) each block summed under the weight scales only, its activation scale applied
# once (4.7 -> 3.0 SASS instructions a weight value). H200, session 13, V4's scales: one V4 layer's experts at
# 8 / 32 tokens 357 -> 203 / 1032 -> 566 us (1.47x / 1.31x the FP4 floor; E4M3 experts 280 / 802); V4 widths
# B = 8 / 32 2.66 -> 2.06 / 5.40 -> 3.62 ms a step, logits bit-identical (the scales are powers of two).
FP4_BLOCK_ACCUMULATE = True
def fp4_rows_fit(k_in: int, w2: torch.Tensor, w2_scale: torch.Tensor, block: tuple[int, int], act_block: int) -> bool:
    """Whether an MoE's packed E2M1 experts (input width ``k_in``, w2's packed K) fit ``fp4_gemm_rows_kernel``."""
    return (tuple(block) == (1, 32) and _scale_arg(w2_scale)[1] and act_block % 32 == 0
            and all(k % 64 == 0 and k % act_block == 0 for k in (k_in, 2 * w2.shape[-1])))


def _scale_words_fit(ws: torch.Tensor) -> bool:
    """Whether E8M0 scale bytes [E, N, K / 32] read as int32 words (``fp4_gemm_rows_kernel``'s BLOCK_ACC)."""
    return (ws.stride(-1) == 1 and ws.shape[-1] % 4 == 0 and ws.data_ptr() % 4 == 0
            and all(st % 4 == 0 for st in ws.stride()[:-1]))


def _fp4_rows(a, a_scale, act_block, weight, ws, e8m0, weight_block, out_dtype, M, groups, config, split_groups,
              unsupported) -> torch.Tensor:
    """``gemm`` for packed E2M1 weights and E4M3 activations: ``fp4_gemm_rows_kernel``."""
    triton = _kernels()[0]
    from deepinfer_adapters.kernels.fp8_triton_jit import fp4_gemm_rows_kernel

    N, K = weight.shape[-2], 2 * weight.shape[-1]
    cfg = config or FP4_ROWS_CONFIG
    tiled = fp4_tiled(N, K)
    if (unsupported or groups is None or not e8m0 or tuple(weight_block) != (1, 32) or fp4_span(K) != 64
            or act_block % 32 or K % act_block or cfg.block_m < 16 or (tiled and cfg.block_n != FP4_TILE_ROWS)):
        raise ValueError(f"fp8 gemm: packed E2M1 weights with E4M3 activations take a grouped GEMM, E8M0 scales "
                         f"per (1, 32), K a multiple of 64 (K = {K}) and of the activation block ({act_block}, a "
                         f"multiple of 32), tiles of >= 16 rows (of {FP4_TILE_ROWS} weight rows where the weights "
                         "are tiled), and no kstep, quantize_a or swapped")
    n_tiles = triton.cdiv(N, cfg.block_n)
    m_tiles = groups.expert.numel()
    block_acc = (FP4_BLOCK_ACCUMULATE and K % 128 == 0 and (act_block % 128 == 0 or 128 % act_block == 0)
                 and _scale_words_fit(ws))
    if block_acc:
        ws = ws.view(torch.int32)  # a row's four scale bytes of a 128-input block as one word
    split, k_per_split = split_k(m_tiles * n_tiles, K, 128 if block_acc else 64, cfg.programs if split_groups else 0)
    out = torch.empty((split, M, N) if split > 1 else (M, N), device=a.device,
                      dtype=torch.float32 if split > 1 else out_dtype)
    if M:
        row_idx = groups.row_idx
        fp4_gemm_rows_kernel[(m_tiles, n_tiles, split)](
            a, a_scale, weight, ws, out, a if row_idx is None else row_idx, groups.expert, groups.row0, groups.row1,
            N, K, k_per_split, a.stride(0), a_scale.stride(0), weight.stride(0), weight.stride(1), ws.stride(0),
            ws.stride(1), out.stride(-2), out.stride(0) if split > 1 else 0,
            BLOCK_N=cfg.block_n, BLOCK_T=cfg.block_m, A_SB=act_block, W_BK=32, GATHER_A=row_idx is not None,
            SCATTER_OUT=groups.scatter_out, PTX=not interpreting(), TILED=tiled, BLOCK_ACC=block_acc,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_launch())
    return out if split == 1 else sum_splits(out, out_dtype)


def split_k(tiles: int, K: int, step: int, programs: int) -> tuple[int, int]:
    """(splits, K per split, a multiple of ``step``): K is split while fewer than ``programs``
    tiles run (0: never), until about that many programs do."""
    split = min(-(-programs // tiles), -(-K // step)) if tiles < programs else 1
    k_per_split = -(-(-(-K // split)) // step) * step
    return -(-K // k_per_split), k_per_split


def sum_splits(parts: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """Split-K partials [S, M, N] fp32 -> [M, N] in ``out_dtype``: added one by one in split
    order and rounded once (torch's sum picks its order by shape), one launch."""
    triton, _, _, split_sum, _ = _kernels()
    S, M, N = parts.shape
    total = torch.empty((M, N), device=parts.device, dtype=out_dtype)
    if M * N:
        # one value per thread while the partials are small (decode): a thread's S loads stay in
        # flight together (at 8 values per thread the MoE gate's 40 splits of 384 took ~6 us,
        # H200 profile, session 6); each value's sum order is the same whatever the block
        block = min(1024, max(128, triton.next_power_of_2(triton.cdiv(M * N, TARGET_PROGRAMS))))
        split_sum[(triton.cdiv(M * N, block),)](parts, total, M * N, SPLIT=S, BLOCK=block, num_warps=4, **pdl_launch())
    return total


def _rows_first(kernel, a, a_scale, act_block, weight, ws, out, row_idx, groups, grouped, M, N, K, k_per_split,
                m_tiles, n_tiles, split, cfg, kstep, sub, weight_block, e8m0, quantize_a, fp4, tiled) -> None:
    """Launch ``fp8_gemm_kernel`` (tiles of rows x weight rows; grouped or not)."""
    tiles = groups if grouped else Groups(out, out, out)  # unused pointers when not grouped
    w_strides = (weight.stride(0), weight.stride(1)) if grouped else (0, weight.stride(0))
    s_strides = (ws.stride(0), ws.stride(1)) if grouped else (0, ws.stride(0))
    kernel[(m_tiles, n_tiles, split)](
        a, a if a_scale is None else a_scale, weight, ws, out,
        a if row_idx is None else row_idx, tiles.expert, tiles.row0, tiles.row1,
        M, N, K, k_per_split,
        a.stride(0), 0 if a_scale is None else a_scale.stride(0), *w_strides, *s_strides,
        out.stride(-2), out.stride(0) if split > 1 else 0,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, KSTEP=kstep, SUB=sub,
        A_SB=act_block if a_scale is not None or quantize_a else 0, W_BN=weight_block[0], W_BK=weight_block[1],
        W_E8M0=e8m0, GROUPED=grouped, GATHER_A=row_idx is not None,
        SCATTER_OUT=grouped and groups.scatter_out, QUANT_A=quantize_a,
        W_FP4=0 if not fp4 else 1 if interpreting() else _FP4_MODES[FP4_UNPACK],
        W_TILED=tiled,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_launch())


DEQUANT_TILE = (64, 128)  # dequant_bf16_kernel's [rows, inputs] a program


def dequant_bf16(weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """Dense bf16 copy of a block-scaled weight: each E4M3 value times its block's scale as bf16, rounded
    to bf16 once (exact for E8M0 scales: E4M3 x 2^e fits bf16). On CUDA one Triton pass
    (``dequant_bf16_kernel``; the prefill's dense linears dequantize their weight each call: 8192-token
    V4.1 prefill: 191.5 -> 183.1 ms, the same logits bits, BENCHMARKS.md session 15); elsewhere one
    broadcast multiply where the blocks tile the weight."""
    N, K = weight.shape
    if scale.dtype in (torch.uint8, torch.float8_e8m0fnu):  # powers of two: exact in fp32 and in bf16
        s32 = scale.view(torch.float8_e8m0fnu).float()  # one launch (the prefill's 39 dense linears: two fewer each)
    else:
        s32 = scale.float().to(torch.bfloat16).float()
    if weight.is_cuda and triton_available():
        return dequant_bf16_triton(weight, s32, block)
    s = s32.to(torch.bfloat16)
    if N % block[0] == 0 and K % block[1] == 0:
        tiles = weight.view(N // block[0], block[0], K // block[1], block[1]).to(torch.bfloat16)
        return (tiles * s[:, None, :, None]).view(N, K)
    s = s.repeat_interleave(block[0], 0)[:N].repeat_interleave(block[1], 1)[:, :K]
    return weight.to(torch.bfloat16) * s


def dequant_bf16_triton(weight: torch.Tensor, scale32: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """``dequant_bf16`` by ``dequant_bf16_kernel`` (``scale32``: the block scales' bf16 values, as fp32)."""
    triton = _kernels()[0]
    from deepinfer_adapters.kernels.fp8_triton_jit import dequant_bf16_kernel

    N, K = weight.shape
    weight = weight if weight.stride(-1) == 1 else weight.contiguous()
    s = scale32.contiguous()
    out = torch.empty(N, K, device=weight.device, dtype=torch.bfloat16)
    bn, bk = DEQUANT_TILE
    if N and K:
        dequant_bf16_kernel[(triton.cdiv(N, bn), triton.cdiv(K, bk))](
            weight, s, out, N, K, weight.stride(0), s.stride(0), out.stride(0), B0=block[0], B1=block[1],
            BLOCK_N=bn, BLOCK_K=bk, num_warps=4, **pdl_launch())
    return out


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int],
               act_block: int, *, config: GemmConfig | None = None, path: str | None = None,
               swapped: bool | None = None, bf16_steps: bool | None = None) -> torch.Tensor:
    """See ``reference_fp8.fp8_linear``: [.., K] bf16 -> [.., N] bf16 (``swapped``, ``bf16_steps``:
    see ``gemm``)."""
    lead, K = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, K)
    large = x2.shape[0] >= LARGE_M and not invariance.enabled()
    if path is None and large and fp8_blockwise.takes(x2, weight, scale, block, act_block):
        path = "fp8_blockwise"  # FP8 products on cuBLAS, both sides under wider scales (its doc says why)
    path = path or (LARGE_M_PATH if large else "triton")
    if path == "fp8_blockwise":
        out = fp8_blockwise.linear(x2, weight, scale, block, act_block)
    elif path == "bf16_cublas":
        xa = act_quant(x2, act_block, dequant_to=x.dtype)[0] if act_block else x2
        out = torch.nn.functional.linear(xa, dequant_bf16(weight, scale, block))
    elif act_block and x2.shape[0] <= QUANT_IN_GEMM_ROWS and kstep_for(block, act_block) == act_block:
        out = gemm(x2, None, act_block, weight, scale, block, x.dtype, config=config, quantize_a=True,
                   swapped=swapped, bf16_steps=bf16_steps)
    elif act_block:
        q, s = act_quant(x2, act_block)
        out = gemm(q, s, act_block, weight, scale, block, x.dtype, config=config, swapped=swapped,
                   bf16_steps=bf16_steps)
    else:
        out = gemm(x2, None, 0, weight, scale, block, x.dtype, config=config)
    return out.view(*lead, weight.shape[0])


# wo_a at decode: G groups x R / 64 column tiles (8 x 16 = 128 programs at V4.1's widths) each
# walking K = 4096 alone ran at ~1.3 TB/s (25 us, H200 profile, session 6); split-K as for an
# ungrouped GEMM while fewer than TARGET_PROGRAMS tiles run
GROUPED_SPLIT_K = True
# From LARGE_M rows on (prefill, LARGE_M_PATH "bf16_cublas", not batch-invariant): the weight dequantized and
# one batched cuBLAS bf16 GEMM (torch.bmm) instead of this kernel. Why: the 8192-token V4.1 prefill profile
# (session 15) has wo_a's grouped GEMM at 1.64-1.73 ms a layer on the Triton kernel (~330 TFLOP/s), where
# the dense linears' cuBLAS GEMMs run ~2x that rate.
GROUPED_CUBLAS = True


def fp8_grouped_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                       block: tuple[int, int]) -> torch.Tensor:
    """See ``reference_fp8.fp8_grouped_linear``: [T, G, Din] -> [T, G, R], one GEMM per group,
    all in one launch: group g is expert g of a grouped GEMM whose rows are x's (t, g) rows."""
    T, G, Din = x.shape
    R = weight.shape[0] // G
    if GROUPED_CUBLAS and T >= LARGE_M and LARGE_M_PATH == "bf16_cublas" and x.dtype == torch.bfloat16 \
            and not invariance.enabled():
        # prefill: as fp8_linear's bf16_cublas path, one batched cuBLAS GEMM over the groups, each writing its
        # [T, R] block of the [T, G, R] result in place (leading dimension G R): no transposing copy after
        # (168 us a layer at 8192 tokens, session 16's profile)
        w = dequant_bf16(weight, scale, block).view(G, R, Din)
        out = torch.empty(T, G, R, device=x.device, dtype=x.dtype)
        torch.bmm(x.transpose(0, 1), w.transpose(1, 2), out=out.transpose(0, 1))
        return out
    kstep = bf16_kstep(Din, block)
    if invariance.enabled():
        cfg = invariant_config(kstep)
    else:
        cfg = BF16_LARGE_CONFIG if T >= LARGE_M else default_config(T, kstep)
    a = x.reshape(T * G, Din)
    w = weight.view(G, R, Din)
    ws = scale.view(G, R // block[0], scale.shape[-1])
    return gemm(a, None, 0, w, ws, block, x.dtype, rows=T * G, groups=_group_tiles(T, G, cfg.block_m, x.device),
                config=cfg, kstep=kstep, split_groups=GROUPED_SPLIT_K).view(T, G, R)


_SHAPE_TENSORS: dict[tuple, object] = {}


def shape_cached(key: tuple, build):
    """``build()``'s tensors, kept per ``key`` (they must be a function of shapes only; up to 256
    keys): ``batch.cached_constant``, so never kept from inside a CUDA graph capture."""
    return cached_constant(_SHAPE_TENSORS, key, build, limit=256)


def _group_tiles(T: int, G: int, block_m: int, device: torch.device) -> Groups:
    """Tiles of ``fp8_grouped_linear``: group g owns sorted rows [g T, (g + 1) T), sorted row
    g T + t reads and writes x's row t G + g."""
    def build() -> Groups:
        per_group = -(-T // block_m)
        t = torch.arange(G * per_group, device=device)
        group = t // per_group
        r = torch.arange(G * T, device=device)
        return Groups(expert=group.to(torch.int32), row0=(group * T + (t % per_group) * block_m).to(torch.int32),
                      row1=((group + 1) * T).to(torch.int32), row_idx=((r % T) * G + r // T).to(torch.int32),
                      scatter_out=True)

    return shape_cached(("grouped_linear", T, G, block_m, device), build)


def _fp8_weight_ok(x: torch.Tensor, weight: torch.Tensor, block: tuple[int, int], act_block: int) -> bool:
    kstep = kstep_for(block, act_block)
    return (x.is_cuda and x.dtype == torch.bfloat16 and weight.dtype == torch.float8_e4m3fn
            and x.shape[-1] % kstep == 0 and kstep >= (32 if act_block else 16)
            and (act_block == 0 or max(act_block, block[1]) % kstep == 0) and triton_available())


def supports_linear(x, weight, scale, block, act_block, **_) -> bool:
    return _fp8_weight_ok(x, weight, block, act_block)


def supports_grouped(x, weight, scale, block, **_) -> bool:
    R = weight.shape[0] // max(1, x.shape[1])
    return _fp8_weight_ok(x, weight, block, 0) and R % block[0] == 0


register("fp8_linear", "triton", fp8_linear, supports=supports_linear, priority=10)
register("fp8_grouped_linear", "triton", fp8_grouped_linear, supports=supports_grouped, priority=10)
