"""The MoE's bf16-path grouped GEMM on Hopper as a warp-specialized Gluon kernel (``gluon_moe_jit``), for
prefill-sized calls: the same bits as the Triton bf16 path (``triton_fp8_gemm.gemm`` with 128 x 128 tiles,
128-deep steps), faster.

Why: the Triton kernel converts each E4M3 weight tile to bf16 in registers, writes it back to shared
memory and waits for its products before the next step (~250 TFLOP/s at 8192 tokens; a plain bf16 GEMM
reaches 518, BENCHMARKS.md session 14). Here the converted tile stays in registers as wgmma's register
operand (the weight rows are the product's M: acc[weight rows, token rows]), and each of two warpgroups
owns 64 weight rows in its own partition, so one converts while the other's products run; a loader warp
keeps a ring of TMA copies ahead. Each output sums the same exact products (E4M3 x power-of-two scale,
bf16 activations that are E4M3 codes x power-of-two scales) in the same 16-deep order: the same bits,
checked on the H200 (tests/gpu/test_gluon_moe_gpu.py).

H200, V4.1 widths, one layer's experts at 8192 tokens (``benchmarks/bench_gluon_moe.py``, BENCHMARKS.md
session 15): w13 9.3 -> 5.1 ms (249 -> 455 TFLOP/s), w2 5.0 -> 2.6 ms, with each expert's last <= 32 rows
carried by the tile before (``absorb_tails``; 6.1 / 3.3 ms without); the model's 8192-token prefill 181.8
-> 146.4 ms with wo_a on cuBLAS too, logits bit-identical. Tried on the way: a converter partition writing
bf16 tiles for an SS-wgmma partition (187 TFLOP/s: slower than the Triton kernel); both warpgroups in one
partition (335); 64-row token tiles (298); session 16: a persistent grid (one program an SM walking the
tiles, the ring's phases carried across tiles: same bits, w13 5.40-5.45 vs 5.21-5.35 ms, w2 2.86-3.39 vs
2.85-3.15, the prefill 137.9 vs 134.9 ms in one run -- removed). Nsight Compute (session 16, w13 at 8192
tokens): tensor pipe ~61% busy, DRAM ~48%; each warpgroup spends about as long converting its 64 x 128 weight
tile (32 two-byte shared loads, 32 E4M3 unpacks, 64 f16->f32, 64 multiplies, packs: ~250 instructions a
thread a step) as waiting for its products, so the other warpgroup's products do not cover the conversion.

Also here (session 29, on by default: ``FP8_PRODUCTS``): the same GEMMs on FP8 products, ``grouped_gemm_fp8``
(``moe_fp8_kernel``): E4M3 activations with one scale a 128-deep step (V4.1's per-32 codes re-expressed under each
128 values' largest scale by the quantizing pass, ``act_quant`` / ``swiglu_quant``'s ``scale_block``), tokens as
wgmma's M (a row's scale one register a thread; a 64-row group past an expert's last row takes no products), a
step's four 32-deep products of all 128 weight rows summed on the tensor cores, then one promotion times the row's
and the columns' scales (DeepGEMM's), three warpgroups with an expert's last <= 64 rows. Within bf16 rounding of
exact sums of its inputs (rel 1.7e-3; the tensor cores' accumulation up to 9e-4 of the products' magnitudes).
H200, 8192 tokens, uniform routing (session 31, ``probe_moe_fp8_bounds.py``, part s31f): w13 3.62 ms, w2 2.20
(session 30's two 64-wide column halves a step: 3.96-4.10 / 2.30-2.44; the bf16 kernel 4.9-5.1 / 2.9). Where the
time goes (part s31b-f): the loader's stream alone (no products) takes 2.44 / 1.27 ms -- the weights' bytes at
~3.7 TB/s --, the products with every tile's weights in L2 3.48 / 2.06: the warpgroups' products and promotions
bound it, not memory (Nsight Compute, session 30's form: DRAM 56%, L2 70%, issue slots 40%). Session 29's form
kept V4.1's per-32 scales and chained the four products in Horner form with their scale ratios: exact products,
but 5 fp32 operations a value a step and issue-bound (w13 5.34-5.96 ms); removed. Session 32 (part s32d): with
data already in shared memory 3.54 ms, with a step's sums added unscaled 2.86 -- the promotion, not the stream,
was the cost. Experts whose scales are one per 128 x 128 tile (native_format converts so where exact: every
realistic weight) promote with the tile's scale, one multiply-add a value, and skip ``scale_steps``' per-call pass
(``tile_scales``): w13 3.10 against 3.84 ms, w2 1.84 against 2.16, the same bits (part s32f). The 8192-token
prefill: 97.81 against 103.98 ms per column (s32f), 93.58 against 124.24 on the bf16 kernel (s32g).

Takes: bf16 activations already in sorted row order (w13's gathered by ``index_select`` first), E4M3
experts in ``quant.to_e4m3_tiles``' layout with E8M0 scales per (1, 128), ``triton_moe.route``'s 128-row
tiles, optionally through ``absorb_tails``.
"""

from __future__ import annotations

import functools
import importlib
import weakref

import torch

from deepinfer_adapters.kernels.triton_fp8_gemm import Groups
from deepinfer_adapters.kernels.triton_support import interpreting, pdl_launch, triton_available
from deepinfer_adapters.model_impl.quant import E4M3_TILE, e8m0_to_float, expert_matrix, is_e4m3_tiles

TILE = 128  # token rows (beyond the tail), weight rows and K of a step: the E4M3 tiles' side
TAIL = 32  # rows past TILE a tile may carry (``absorb_tails``), in a second, narrower product
GLUON_MOE = True  # prefill-sized bf16-path MoE GEMMs through moe_bf16_kernel where it fits
STAGES = 3  # ring slots (48 KB each); 4 measured 2-8% slower (session 15)
# prefill-sized MoE GEMMs with per-32 activation scales (V4.1) on FP8 products (``grouped_gemm_fp8``) instead of
# the bf16 path, outside batch-invariant mode. H200, the 8192-token prefill (medians of 3, the dense linears on FP8
# too): 93.58 ms against 124.24 on the bf16 kernel (session 32, part s32g)
FP8_PRODUCTS = True
FP8_STAGES = 4  # ring slots of moe_fp8_kernel (40 KB each; 3 within noise, session 31)
# experts whose (1, 128) scales are one per 128 x 128 tile (native_format's conversion, where exact) promote with the
# tile's scale (tile_scales; moe_fp8_kernel's UNIFORM): one multiply-add a value, no per-call scale layout pass. H200
# (session 32, part s32f): the 8192-token prefill 97.81 ms against 103.98 per column, bit-identical logits
FP8_UNIFORM_TILES = True
# moe_fp8_kernel's DROP: work taken away for benchmarks/probe_moe_fp8_bounds.py only (wrong values unless 0)
FP8_PROBE_DROP = 0
FP8_TAIL = 64  # rows past TILE a tile of moe_fp8_kernel may carry (absorb_tails), on its third warpgroup


@functools.cache
def _gluon_hopper(device_index: int) -> bool:
    """Whether the Gluon kernel can run on this device: Triton's Gluon with Hopper TMA and wgmma, and an
    sm_90 GPU (wgmma is Hopper's; Blackwell would want tcgen05)."""
    if not triton_available() or torch.cuda.get_device_capability(device_index) != (9, 0):
        return False
    try:
        importlib.import_module("deepinfer_adapters.kernels.gluon_moe_jit")
    except Exception:  # a Triton without Gluon or its Hopper module
        return False
    return True


def gluon_hopper(device: torch.device) -> bool:
    """``_gluon_hopper`` for a tensor's device (an index-less "cuda" is the current one)."""
    return _gluon_hopper(device.index if device.index is not None else torch.cuda.current_device())


def fits(a: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], block_m: int) -> bool:
    """Whether ``grouped_gemm`` takes this bf16-path GEMM: on an sm_90 GPU (not Triton's interpreter),
    bf16 activations, E4M3 tiles with E8M0 scales per (1, 128), 128-row tiles."""
    if not (GLUON_MOE and a.is_cuda and not interpreting() and a.dtype == torch.bfloat16):
        return False
    if not (is_e4m3_tiles(weight) and tuple(block) == (1, 128) and block_m == TILE == E4M3_TILE):
        return False
    N, K = expert_matrix(weight)
    if scale.dtype not in (torch.uint8, torch.float8_e8m0fnu) or tuple(scale.shape) != (weight.shape[0], N, K // 128) \
            or scale.stride(-1) != 1:
        return False
    return gluon_hopper(a.device)


def absorb_tails(groups: Groups, tail: int = TAIL) -> Groups:
    """``triton_moe.route``'s 128-row tiles with each expert's last tile of at most ``tail`` rows idle (expert
    -1): the full tile before it computes those rows too. (A route tile's row1 is its expert's last row + 1;
    ``moe_bf16_kernel`` gives a tile with 128 < row1 - row0 <= 128 + TAIL its rows past 128 in a second,
    32-wide product with the weights it has already converted; ``moe_fp8_kernel`` up to FP8_TAIL rows on a third
    warpgroup.) Device tensor ops, no host sync. Why: at
    8192 tokens an expert gets 128 +- 11 rows, so half the experts had a second tile of a few rows that cost
    a whole pass over the expert's weights. Only for ``grouped_gemm``: the Triton kernel would skip the rows."""
    e, r0, r1 = groups.expert, groups.row0, groups.row1
    carries = (e >= 0) & (r1 - r0 > TILE) & (r1 - r0 <= TILE + tail)  # the tile computes its expert's tail
    follows = torch.cat([carries.new_zeros(1), carries[:-1]])  # the tail's own tile: idle
    return Groups(torch.where(follows, -1, e), r0, r1, groups.row_idx, groups.scatter_out)


def grouped_gemm(a_sorted: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, groups: Groups) -> torch.Tensor:
    """bf16 [rows, N]: row r = a_sorted[r] @ dequant(weight[expert of r's tile]).T, for the rows the tiles
    cover (others untouched). ``a_sorted`` [rows, K] bf16, contiguous; ``groups``: ``triton_moe.route``'s
    tiles, or ``absorb_tails``' (a tile with 128 < row1 - row0 <= 160 computes all its rows either way, so
    without ``absorb_tails`` the following tile repeats its last rows, with the same bits); see ``fits``."""
    import triton
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from deepinfer_adapters.kernels.gluon_moe_jit import moe_bf16_kernel

    N, K = expert_matrix(weight)
    rows = a_sorted.shape[0]
    if a_sorted.shape[1] != K:
        raise ValueError(f"gluon_moe.grouped_gemm: activations have {a_sorted.shape[1]} columns, the experts {K}")
    a_sorted = a_sorted if a_sorted.is_contiguous() else a_sorted.contiguous()
    out = torch.empty(rows, N, device=a_sorted.device, dtype=torch.bfloat16)
    a_layout = gl.NVMMASharedLayout.get_default_for([TILE, 128], gl.bfloat16)
    w_layout = gl.NVMMASharedLayout.get_default_for([TILE, 128], gl.float8e4nv)
    a_desc = TensorDescriptor(a_sorted, [rows, K], list(a_sorted.stride()), [TILE, 128], a_layout)
    t_layout = gl.NVMMASharedLayout.get_default_for([TAIL, 128], gl.bfloat16)
    t_desc = TensorDescriptor(a_sorted, [rows, K], list(a_sorted.stride()), [TAIL, 128], t_layout)
    w2d = weight.view(-1, 128)  # tile after tile, 128 bytes a row
    w_desc = TensorDescriptor(w2d, list(w2d.shape), list(w2d.stride()), [TILE, 128], w_layout)
    ws = scale.view(torch.uint8)
    grid = (triton.cdiv(N, TILE), groups.expert.numel())
    moe_bf16_kernel[grid](a_desc, t_desc, w_desc, ws, out, groups.expert, groups.row0, groups.row1, N, K, ws.stride(0),
                          ws.stride(1), out.stride(0), STAGES=STAGES, num_warps=4)
    return out


def fp8_fits(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int],
             act_block: int) -> bool:
    """Whether ``grouped_gemm_fp8`` takes this call: ``FP8_PRODUCTS``, an sm_90 GPU, bf16 inputs quantized per 32
    (V4.1), E4M3 tiles with E8M0 scales per (1, 128), N a multiple of 128."""
    if not (FP8_PRODUCTS and act_block == 32 and x.dtype == torch.bfloat16):
        return False
    return fits(x, weight, scale, block, TILE) and expert_matrix(weight)[0] % TILE == 0


def scale_steps(scale: torch.Tensor) -> torch.Tensor:
    """fp32 [E, K / 128, N] of E8M0 scales [E, N, K / 128] (uint8 or float8_e8m0fnu): a step's columns contiguous,
    as ``moe_fp8_kernel`` copies them into its ring and multiplies them (experts without ``tile_scales``). One
    Triton pass (CUDA, or Triton's CPU interpreter), else torch: in torch (a conversion, then a transposing copy) it
    took ~0.9 ms a layer at V4.1's widths in the 8192-token prefill (session 29's profile), ~5% of the FP8 kernels'
    time; the Triton pass ~90 us a call (session 31)."""
    E, N, KB = scale.shape
    s = scale.view(torch.uint8)
    if not (triton_available() and (s.is_cuda or interpreting())):
        return e8m0_to_float(s).transpose(1, 2).contiguous()
    from deepinfer_adapters.kernels.scale_steps_jit import e8m0_steps_kernel

    s = s if s.is_contiguous() else s.contiguous()
    out = torch.empty(E, KB, N, device=s.device, dtype=torch.float32)
    block_n, block_kb = 64, max(16, 1 << (KB - 1).bit_length())
    if out.numel():
        e8m0_steps_kernel[(E, -(-N // block_n))](s, out, N, KB, BLOCK_N=block_n, BLOCK_KB=block_kb, num_warps=4,
                                                  **pdl_launch())
    return out


# tile_scales' answers by the scale tensor's id: (a weak reference to it, its version, the table or None)
_TILE_SCALES: dict[int, tuple[weakref.ref, int, torch.Tensor | None]] = {}


def tile_scales(scale: torch.Tensor) -> torch.Tensor | None:
    """fp32 [E, N / 128, K / 128]: E8M0 expert scales [E, N, K / 128] (uint8 or float8_e8m0fnu) that are one per 128
    rows and 128 inputs (each row a copy: ``quant.fp4_to_fp8_blocks(..., rows=128)``, native_format's conversion
    where exact), as ``moe_fp8_kernel`` reads them with UNIFORM; None where some tile's rows differ. Checked once a
    tensor and version (one host sync; none while a CUDA graph is captured: None then, unless already known)."""
    key = id(scale)
    known = _TILE_SCALES.get(key)
    if known is not None and known[0]() is scale and known[1] == scale._version:
        return known[2]
    E, N, KB = scale.shape
    if N % TILE or (scale.is_cuda and torch.cuda.is_current_stream_capturing()):
        return None
    s = scale.view(torch.uint8)
    first = s[:, ::TILE]  # [E, N / 128, K / 128]
    uniform = torch.equal(s.view(E, N // TILE, TILE, KB), first.unsqueeze(2).expand(E, N // TILE, TILE, KB))
    table = e8m0_to_float(first).contiguous() if uniform else None
    if known is None or known[0]() is not scale:
        weakref.finalize(scale, _TILE_SCALES.pop, key, None)
    _TILE_SCALES[key] = (weakref.ref(scale), scale._version, table)
    return table


def grouped_gemm_fp8(q_sorted: torch.Tensor, s_sorted: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                     groups: Groups) -> torch.Tensor:
    """bf16 [rows, N]: row r = (q_sorted[r] x its per-128 scales s_sorted[r]) @ dequant(weight[expert]).T for the
    rows ``triton_moe.route``'s 128-row tiles cover, or ``absorb_tails(tiles, FP8_TAIL)``' (a tile with 128 <
    row1 - row0 <= 128 + FP8_TAIL computes all its rows either way, so without ``absorb_tails`` the following tile
    repeats its last rows, with the same bits).
    ``q_sorted`` [rows, K] E4M3 and ``s_sorted`` [rows, K / 128] fp32 power-of-two scales (V4.1's per-32 codes
    re-expressed, ``act_quant``'s ``scale_block``), in sorted row order.

    Numerics: exact products of the re-expressed codes (E4M3 x E4M3 times powers of two: the per-32 values, but
    for those below E4M3's normal range under the wider scale, moved by at most 2^-10 of it), summed in another
    order than the bf16 path's (a 128-deep step's four 32-deep FP8 products on the tensor cores' accumulator, which
    keeps fewer bits than fp32; the step's sum times the row's and the columns' scales into an fp32 accumulator),
    so its bits differ from the bf16 path's: batch-invariant mode keeps that one."""
    import triton
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from deepinfer_adapters.kernels.gluon_moe_fp8_jit import moe_fp8_kernel

    N, K = expert_matrix(weight)
    rows = q_sorted.shape[0]
    if q_sorted.shape[1] != K or s_sorted.shape != (rows, K // 128) or q_sorted.dtype != torch.float8_e4m3fn:
        raise ValueError(f"gluon_moe.grouped_gemm_fp8: activations {tuple(q_sorted.shape)} {q_sorted.dtype} with "
                         f"scales {tuple(s_sorted.shape)} do not match experts of {K} inputs")
    q_sorted = q_sorted if q_sorted.is_contiguous() else q_sorted.contiguous()
    s_sorted = s_sorted.float().contiguous()
    out = torch.empty(rows, N, device=q_sorted.device, dtype=torch.bfloat16)
    half = TILE // 2  # each warpgroup's rows: a TMA box of its own
    a_layout = gl.NVMMASharedLayout.get_default_for([half, 128], gl.float8e4nv)
    w_layout = gl.NVMMASharedLayout.get_default_for([TILE, 128], gl.float8e4nv)
    a_desc = TensorDescriptor(q_sorted, [rows, K], list(q_sorted.stride()), [half, 128], a_layout)
    w2d = weight.view(-1, 128)  # tile after tile, 128 bytes a row
    w_desc = TensorDescriptor(w2d, list(w2d.shape), list(w2d.stride()), [TILE, 128], w_layout)
    tiles = tile_scales(scale) if FP8_UNIFORM_TILES else None
    # the column scales' layout pass only where the kernel reads them (else a placeholder for the descriptor)
    ws_steps = scale_steps(scale).view(-1, N) if tiles is None else out.new_zeros(1, TILE, dtype=torch.float32)
    s_layout = gl.NVMMASharedLayout.get_default_for([1, TILE], gl.float32)
    s_desc = TensorDescriptor(ws_steps, list(ws_steps.shape), list(ws_steps.stride()), [1, TILE], s_layout)
    grid = (triton.cdiv(N, TILE), groups.expert.numel())
    moe_fp8_kernel[grid](a_desc, w_desc, s_desc, s_sorted, s_sorted if tiles is None else tiles, out, groups.expert,
                         groups.row0, groups.row1, N, K, s_sorted.stride(0), out.stride(0), STAGES=FP8_STAGES,
                         DROP=FP8_PROBE_DROP, UNIFORM=tiles is not None, num_warps=4)
    return out
