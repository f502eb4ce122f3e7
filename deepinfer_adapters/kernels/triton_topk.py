"""Triton backends of ``topk_lowest_index`` and ``topk_torch_order`` (CUDA; registered as "triton").

Both return the k picks of each row in ascending index order with their values; they differ
in which of the entries equal to the k-th largest they take:
- ``topk_lowest_index`` (our rule, layers/topk.py): the lower index wins, and -0.0 ties with 0.0
  (the reference: a stable sort, then the picks re-sorted);
- ``topk_torch_order`` (DeepSeek's reference code: ``torch.topk`` then the picks re-sorted): the
  set torch's CUDA top-k takes. Its radix select ranks each value by its float bits sign-flipped
  (so -0.0 sits below +0.0, and every NaN above +inf), and its gather writes the values above the
  k-th, then the ones equal to it in index order until k are written (aten's sbtopk / mbtopk
  ``gatherTopK``). tests/gpu/test_topk_gpu.py checks the set against torch.topk on CUDA.

One program per row, the whole row in registers (rows up to ``MAX_ROW``), no sort:
1. each score becomes an order-preserving unsigned key (the float's bits, sign-flipped; for our
   rule -0.0 first made +0.0 so that it ties with 0.0 as in the sort);
2. the k-th largest key T is found ``RADIX_BITS`` at a time from the top (a radix select: per
   pass, counts of the next digit's values among the keys sharing the prefix found so far);
3. every key > T is picked, and of the keys == T the first (k - #keys > T) in index
   order; a running count over the row gives each pick its output slot, so the output is
   in ascending index order with no sort.
torch's own top-k then index sort at 8 rows of 1024 bf16 scores took 16-22 us + 8 + 5 (gather),
four times per reduced V4.1 decode step (H200 profile, session 10).
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.triton_support import pdl_launch, triton_available

MAX_ROW = 16384  # the row must fit the registers of one program
RADIX_BITS = 2  # bits of the key found per pass (1, 2 or 4: benchmarks/bench_topk.py, BENCHMARKS.md session 11)


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def topk_kernel(S, IDX, VAL, m, k, stride_s, stride_i, stride_v, BLOCK: tl.constexpr,
                    TORCH_ORDER: tl.constexpr, RADIX_BITS: tl.constexpr):
        pdl_start()
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        inside = offs < m
        s = tl.load(S + row * stride_s + offs, mask=inside, other=0.0)
        x = s.to(tl.float32)
        if not TORCH_ORDER:
            x = x + 0.0  # -0.0 -> +0.0
        bits = x.to(tl.uint32, bitcast=True)
        key = tl.where((bits >> 31) != 0, ~bits, bits | 0x80000000)
        if TORCH_ORDER:
            key = tl.where(x != x, 0xFFFFFFFF, key)  # NaN above everything
        # the k-th largest key, RADIX_BITS a pass from the top (a radix select): each pass counts
        # the next digit of the keys that share the prefix found so far (a one-hot sum: one
        # reduction for all the digit's values) and keeps the digit where the count from the top
        # reaches the picks still wanted
        bins = tl.arange(0, 1 << RADIX_BITS)
        threshold = tl.zeros([], tl.uint32)
        wanted = k
        for p in tl.static_range(32 // RADIX_BITS):
            shift = 32 - RADIX_BITS * (p + 1)
            same = inside
            if p > 0:
                same = inside & ((key >> (shift + RADIX_BITS)) == (threshold >> (shift + RADIX_BITS)))
            digit = ((key >> shift) & ((1 << RADIX_BITS) - 1)).to(tl.int32)
            hist = tl.sum(((digit[:, None] == bins[None, :]) & same[:, None]).to(tl.int32), axis=0)
            from_top = tl.sum(hist, axis=0) - tl.cumsum(hist, axis=0) + hist  # keys with this digit or above
            chosen = tl.max(tl.where(from_top >= wanted, bins, 0), axis=0)
            wanted -= tl.sum(tl.where(bins > chosen, hist, 0), axis=0)
            threshold = threshold | (chosen.to(tl.uint32) << shift)
        above = inside & (key > threshold)
        tie = inside & (key == threshold)
        take = above | (tie & (tl.cumsum(tie.to(tl.int32), axis=0) <= k - tl.sum(above.to(tl.int32), axis=0)))
        slot = tl.cumsum(take.to(tl.int32), axis=0) - 1
        tl.store(IDX + row * stride_i + slot, offs.to(tl.int64), mask=take)
        tl.store(VAL + row * stride_v + slot, s, mask=take)

    return triton, topk_kernel


def warps(block: int) -> int:
    """Warps of a program taking a row of ``block`` (a power of two) scores: twice what the bit loop
    had (one warp per 512) was 1.4-1.7x faster at 2k-4k scores, four times no faster (session 11)."""
    return max(2, min(16, block // 256))


def _topk(scores: torch.Tensor, k: int, torch_order: bool) -> tuple[torch.Tensor, torch.Tensor]:
    triton, kernel = _kernel()
    lead, m = scores.shape[:-1], scores.shape[-1]
    rows = scores.reshape(-1, m)
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    n = rows.shape[0]
    idx = torch.empty(n, k, device=scores.device, dtype=torch.long)
    val = torch.empty(n, k, device=scores.device, dtype=scores.dtype)
    if n and k:
        block = max(16, triton.next_power_of_2(m))
        kernel[(n,)](rows, idx, val, m, k, rows.stride(0), idx.stride(0), val.stride(0), BLOCK=block,
                     TORCH_ORDER=torch_order, RADIX_BITS=RADIX_BITS, num_warps=warps(block), **pdl_launch())
    return idx.view(*lead, k), val.view(*lead, k)


def topk_lowest_index(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``reference.topk_lowest_index``."""
    return _topk(scores, k, torch_order=False)


def topk_torch_order(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``reference.topk_torch_order``: the set torch.topk takes on CUDA (module docstring)."""
    return _topk(scores, k, torch_order=True)


def supports(scores: torch.Tensor, k: int) -> bool:
    return (scores.is_cuda and scores.dtype in (torch.float32, torch.bfloat16, torch.float16)
            and 0 <= k <= scores.shape[-1] <= MAX_ROW and scores.dim() >= 1 and triton_available())


register("topk_lowest_index", "triton", topk_lowest_index, supports=supports, priority=10)
register("topk_torch_order", "triton", topk_torch_order, supports=supports, priority=10)
