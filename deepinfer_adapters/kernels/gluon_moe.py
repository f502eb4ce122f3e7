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

Session 29 (BENCHMARKS.md): FP8 products instead (``moe_fp8_kernel``, code at 5865b09, removed): E4M3 activations
with their per-32 scales, tokens as wgmma's M, each 128-deep step's four 32-deep products chained on the
accumulator with the ratios of their scales (Horner form), two column-half chains a warpgroup, three warpgroups
with an expert's tail. Within bf16 rounding of exact sums (rel 1.7e-3; the tensor cores' accumulation up to 9e-4 of
the products' magnitudes), but slower: w13 5.95 ms against this kernel's 4.72-4.90 at 8192 tokens, w2 3.03 against
2.74-2.80. Issue-bound: a step costs ~430 instructions a thread (offline SASS), 320 of them the promotion's fp32
multiplies -- the per-32 scales' price, as session 16 estimated.

Takes: bf16 activations already in sorted row order (w13's gathered by ``index_select`` first), E4M3
experts in ``quant.to_e4m3_tiles``' layout with E8M0 scales per (1, 128), ``triton_moe.route``'s 128-row
tiles, optionally through ``absorb_tails``.
"""

from __future__ import annotations

import functools
import importlib

import torch

from deepinfer_adapters.kernels.triton_fp8_gemm import Groups
from deepinfer_adapters.kernels.triton_support import interpreting, triton_available
from deepinfer_adapters.model_impl.quant import E4M3_TILE, expert_matrix, is_e4m3_tiles

TILE = 128  # token rows (beyond the tail), weight rows and K of a step: the E4M3 tiles' side
TAIL = 32  # rows past TILE a tile may carry (``absorb_tails``), in a second, narrower product
GLUON_MOE = True  # prefill-sized bf16-path MoE GEMMs through moe_bf16_kernel where it fits
STAGES = 3  # ring slots (48 KB each); 4 measured 2-8% slower (session 15)


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


def absorb_tails(groups: Groups) -> Groups:
    """``triton_moe.route``'s 128-row tiles with each expert's last tile of at most ``TAIL`` rows idle (expert
    -1): the full tile before it computes those rows too. (A route tile's row1 is its expert's last row + 1;
    ``moe_bf16_kernel`` gives a tile with 128 < row1 - row0 <= 128 + TAIL its rows past 128 in a second,
    32-wide product with the weights it has already converted.) Device tensor ops, no host sync. Why: at
    8192 tokens an expert gets 128 +- 11 rows, so half the experts had a second tile of a few rows that cost
    a whole pass over the expert's weights. Only for ``grouped_gemm``: the Triton kernel would skip the rows."""
    e, r0, r1 = groups.expert, groups.row0, groups.row1
    carries = (e >= 0) & (r1 - r0 > TILE) & (r1 - r0 <= TILE + TAIL)  # the tile computes its expert's tail
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
