"""Triton backends of ``topk_lowest_index`` and ``sort_rows`` (CUDA; registered as "triton").

``sort_rows`` (the reference tie rule's top-k picks put in index order): one program per
row, ``tl.sort`` over the row padded to a power of two with 2^62 (above any index); torch's
radix sort of 512 int64 picks took ~26 us at one row (H200 profile, session 6).

Same result as the reference (a stable sort, then the k picks re-sorted): the k largest
entries of each row, the lower index winning among equal values, returned in ascending
index order with their values. The reference's two sorts are several kernels each; here one
program per row, the whole row in registers (rows up to ``MAX_ROW``):
1. each score becomes an order-preserving unsigned key (the float's bits, sign-flipped;
   -0.0 first made +0.0 so it ties with 0.0 as in the sort);
2. the k-th largest key T is found bit by bit from the top: 32 counts of keys >= a
   candidate prefix;
3. every key > T is picked, and of the keys == T the first (k - #keys > T) in index
   order; a running count over the row gives each pick its output slot, so the output is
   in ascending index order with no sort.
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.triton_support import pdl_launch, triton_available

MAX_ROW = 16384  # the row must fit the registers of one program


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def topk_kernel(S, IDX, VAL, m, k, stride_s, stride_i, stride_v, BLOCK: tl.constexpr):
        pdl_start()
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        inside = offs < m
        s = tl.load(S + row * stride_s + offs, mask=inside, other=0.0)
        bits = (s.to(tl.float32) + 0.0).to(tl.uint32, bitcast=True)  # + 0.0: -0.0 -> +0.0
        key = tl.where((bits >> 31) != 0, ~bits, bits | 0x80000000)
        key = tl.where(inside, key, 0)  # below every score's key (0 would be a negative NaN)
        threshold = tl.zeros([], tl.uint32)
        for bit in tl.static_range(31, -1, -1):
            candidate = threshold | (1 << bit)
            count = tl.sum((key >= candidate).to(tl.int32), axis=0)
            threshold = tl.where(count >= k, candidate, threshold)
        above = inside & (key > threshold)
        tie = inside & (key == threshold)
        take = above | (tie & (tl.cumsum(tie.to(tl.int32), axis=0) <= k - tl.sum(above.to(tl.int32), axis=0)))
        slot = tl.cumsum(take.to(tl.int32), axis=0) - 1
        tl.store(IDX + row * stride_i + slot, offs.to(tl.int64), mask=take)
        tl.store(VAL + row * stride_v + slot, s, mask=take)

    @triton.jit
    def sort_kernel(X, OUT, m, stride_x, stride_o, BLOCK: tl.constexpr):
        pdl_start()
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + offs, mask=offs < m)
        x = tl.sort(tl.where(offs < m, x, tl.full([BLOCK], 2**62, tl.int64)), dim=0)  # padding above any index
        tl.store(OUT + row * stride_o + offs, x, mask=offs < m)

    return triton, topk_kernel, sort_kernel


def topk_lowest_index(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``reference.topk_lowest_index``."""
    triton, kernel, _ = _kernel()
    lead, m = scores.shape[:-1], scores.shape[-1]
    rows = scores.reshape(-1, m)
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    n = rows.shape[0]
    idx = torch.empty(n, k, device=scores.device, dtype=torch.long)
    val = torch.empty(n, k, device=scores.device, dtype=scores.dtype)
    if n and k:
        block = max(16, triton.next_power_of_2(m))
        kernel[(n,)](rows, idx, val, m, k, rows.stride(0), idx.stride(0), val.stride(0), BLOCK=block,
                     num_warps=max(1, min(16, block // 512)), **pdl_launch())
    return idx.view(*lead, k), val.view(*lead, k)


def supports(scores: torch.Tensor, k: int) -> bool:
    return (scores.is_cuda and scores.dtype in (torch.float32, torch.bfloat16, torch.float16)
            and 0 <= k <= scores.shape[-1] <= MAX_ROW and scores.dim() >= 1 and triton_available())


register("topk_lowest_index", "triton", topk_lowest_index, supports=supports, priority=10)


MAX_SORT_ROW = 4096


def sort_rows(x: torch.Tensor) -> torch.Tensor:
    """See ``reference.sort_rows`` (int64 values below 2^62: top-k indices)."""
    triton, _, kernel = _kernel()
    lead, m = x.shape[:-1], x.shape[-1]
    rows = x.reshape(-1, m)
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    out = torch.empty_like(rows)
    if rows.numel():
        block = max(16, triton.next_power_of_2(m))
        kernel[(rows.shape[0],)](rows, out, m, rows.stride(0), out.stride(0), BLOCK=block,
                                 num_warps=max(1, min(8, block // 256)), **pdl_launch())
    return out.view(*lead, m)


def supports_sort(x: torch.Tensor) -> bool:
    return x.is_cuda and x.dtype == torch.int64 and x.dim() >= 1 and x.shape[-1] <= MAX_SORT_ROW and triton_available()


register("sort_rows", "triton", sort_rows, supports=supports_sort, priority=10)
