"""Triton backend of ``compressor_v4_gather`` (CUDA fp32 state; registered as "triton"): a V4
compressor's decode step in one kernel, where the torch version takes ~20 launches (row gathers,
selects, index writes, cats, the positional bias's gather and add), each a few us at decode.

One program per (sequence, block of the entry's columns): it reads the token's block from the
state (with overlap also the previous block's first half), puts the token's own row in its
place, writes the pooling's rows [c r, block] and updates the state -- the block moved into the
previous one where the token completes it (overlap), else the token's row stored. A program
touches only its own columns of its own slot, and reads every state value it writes before
writing it, so programs never race (padding rows share a slot, but their results are never
used). Pure data movement plus one fp32 add (the score's ``ape``): the same bits as the torch
version, which ``softmax_pool`` then pools as before.

Triton is imported lazily (importing ``deepinfer_adapters`` needs no GPU stack).
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.triton_support import pdl_launch, triton_available

TILE = 4096  # values of a [c r, BLOCK_C] tile
MAX_RATIO = 256


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def compressor_v4_gather_kernel(KV, SC, APE, KV_ST, SC_ST, SLOTS, AT, OUT_KV, OUT_SC, W,
                                    stride_kv, stride_sc, stride_ape, stride_sts, stride_str, stride_on, stride_or,
                                    R: tl.constexpr, OVERLAP: tl.constexpr, BLOCK_C: tl.constexpr):
        pdl_start()
        b = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        mask_c = cols < W
        slot = tl.load(SLOTS + b).to(tl.int64)
        at = tl.load(AT + b).to(tl.int64)
        j = tl.arange(0, R)
        complete = (j * 0 + at) == R - 1  # [R]: the same for every row (a vector mask for the stores)
        mask = (j < R)[:, None] & mask_c[None, :]
        new_row = (j == at)[:, None] & mask_c[None, :]
        kv_st = KV_ST + slot * stride_sts
        sc_st = SC_ST + slot * stride_sts
        kv_new = KV + b * stride_kv
        sc_new = SC + b * stride_sc
        ape = APE + at * stride_ape
        out_kv = OUT_KV + b * stride_on
        out_sc = OUT_SC + b * stride_on
        off: tl.constexpr = R if OVERLAP else 0
        block = (off + j).to(tl.int64)[:, None] * stride_str
        halves: tl.constexpr = 2 if OVERLAP else 1
        for h in tl.static_range(halves):  # the state's column halves (overlap: A = cols, B = W + cols)
            c = cols + h * W
            # the token's values in this half (its score with the positional bias, as torch adds it)
            kv_tok = tl.load(kv_new + c, mask=mask_c)
            sc_tok = tl.load(sc_new + c, mask=mask_c) + tl.load(ape + c, mask=mask_c)
            cur_kv = tl.where(new_row, kv_tok[None, :], tl.load(kv_st + block + c[None, :], mask=mask))
            cur_sc = tl.where(new_row, sc_tok[None, :], tl.load(sc_st + block + c[None, :], mask=mask))
            if OVERLAP:
                prev = j.to(tl.int64)[:, None] * stride_str + c[None, :]
                if h == 0:  # rows 0 .. R-1 of the pooling: the previous block's first half, read first
                    tl.store(out_kv + j[:, None] * stride_or + cols[None, :], tl.load(kv_st + prev, mask=mask),
                             mask=mask)
                    tl.store(out_sc + j[:, None] * stride_or + cols[None, :], tl.load(sc_st + prev, mask=mask),
                             mask=mask)
                    # every thread has its values of those rows (stored above) before any overwrites them
                    tl.debug_barrier()
                else:  # rows R .. 2R-1: the current block's second half
                    tl.store(out_kv + (R + j)[:, None] * stride_or + cols[None, :], cur_kv, mask=mask)
                    tl.store(out_sc + (R + j)[:, None] * stride_or + cols[None, :], cur_sc, mask=mask)
                # a completed block (the token's row in it) becomes the previous one
                tl.store(kv_st + prev, cur_kv, mask=mask & complete[:, None])
                tl.store(sc_st + prev, cur_sc, mask=mask & complete[:, None])
            else:
                tl.store(out_kv + j[:, None] * stride_or + cols[None, :], cur_kv, mask=mask)
                tl.store(out_sc + j[:, None] * stride_or + cols[None, :], cur_sc, mask=mask)
            # the token joins the block in progress, unless it completes it
            joins = (cols * 0 + at) != R - 1
            row = (off + at) * stride_str
            tl.store(kv_st + row + c, kv_tok, mask=mask_c & joins)
            tl.store(sc_st + row + c, sc_tok, mask=mask_c & joins)

    return triton, compressor_v4_gather_kernel


def compressor_v4_gather(kv: torch.Tensor, score: torch.Tensor, ape: torch.Tensor, kv_state: torch.Tensor,
                         score_state: torch.Tensor, slots: torch.Tensor, at: torch.Tensor, ratio: int,
                         overlap: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``reference.compressor_v4_gather``."""
    triton, kernel = _kernel()
    B = kv.shape[0]
    c = 2 if overlap else 1
    w = kv.shape[-1] // c
    out_kv = torch.empty(B, c * ratio, w, device=kv.device, dtype=torch.float32)
    out_sc = torch.empty_like(out_kv)
    if B and w:
        block_c = max(16, min(triton.next_power_of_2(w), TILE // ratio))
        kernel[(B, triton.cdiv(w, block_c))](
            kv, score, ape, kv_state, score_state, slots, at, out_kv, out_sc, w,
            kv.stride(0), score.stride(0), ape.stride(0), kv_state.stride(0), kv_state.stride(1),
            out_kv.stride(0), out_kv.stride(1), R=ratio, OVERLAP=overlap, BLOCK_C=block_c, num_warps=4,
            **pdl_launch())
    return out_kv, out_sc


def supports(kv: torch.Tensor, score: torch.Tensor, ape: torch.Tensor, kv_state: torch.Tensor,
             score_state: torch.Tensor, slots: torch.Tensor, at: torch.Tensor, ratio: int, overlap: bool) -> bool:
    c = 2 if overlap else 1
    tensors = (kv, score, ape, kv_state, score_state)
    return (all(t.is_cuda and t.dtype == torch.float32 and t.stride(-1) == 1 for t in tensors)
            and kv_state.is_contiguous() and score_state.stride() == kv_state.stride()
            and kv_state.shape == score_state.shape == (kv_state.shape[0], c * ratio, kv.shape[-1])
            and score.shape == kv.shape and ape.shape == (ratio, kv.shape[-1]) and kv.shape[-1] % c == 0
            and 0 < ratio <= MAX_RATIO and ratio & (ratio - 1) == 0 and triton_available())


register("compressor_v4_gather", "triton", compressor_v4_gather, supports=supports, priority=10)
