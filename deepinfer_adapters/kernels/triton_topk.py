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
2. the k-th largest key T is found bit by bit from the top: 32 counts of keys >= a
   candidate prefix (16 for bf16 scores: a bf16 value's low 16 fp32 bits are zero, so the low
   16 bits of its key follow from its sign and the top 16 order the keys alike -- torch's own
   bf16 radix key; half the serial passes, which set the kernel's time);
3. every key > T is picked, and of the keys == T the first (k - #keys > T) in index
   order; one running count over the row (keys > T and keys == T packed in an int32) gives each
   pick its output slot, so the output is in ascending index order with no sort.
H200 profiles of the reduced V4.1 decode step at 8 sequences (four top-ks: rows of 2048 and 4097
bf16 scores, and the candidate pool's blocks): torch's top-k, index sort and gather 16-22 + 8 + 5 us
each (session 10), this kernel with 32 passes 9-26 us (session 11). Radix selects of 2 or 8 bits a
pass were slower in the model (their per-pass reductions: 18-72 us, session 11), and so was one of 4 bits a pass
through ``tl.histogram`` (8 passes, 40 barriers against 112 offline; one row of the indexer's 1026 fp32 scores
at B=1 17.0 us against 13.6, V4.1 B=1 2.337 vs 2.327 ms: H200, session 20). Session 22 (H200, alone, bf16 rows;
Nsight Compute had 4104 scores at 17 us, 68K instructions, ~7.5 cycles a warp between them, over half of them the
tail's two scans): the picks' slots from one packed scan instead of two, 4104 scores 18.1 -> 14.0 us, 1026 7.2 -> 6.9
(V4.1 decode B=1 2.078 vs 2.097 ms, B=8 4.587 vs 4.604, 5 alternating rounds). Neither the passes rolled into a loop
(a warm i-cache: 17.6 us) nor two key bits a pass (three counts packed in one int64 reduction: 19.1 unrolled, 14.9
rolled with the one scan) paid.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.triton_support import FLOAT_DTYPES, pdl_launch, triton_available

MAX_ROW = 16384  # the row must fit the registers of one program
# scores a thread holds: the program's warps (1 to 16) follow from the row's block. Fewer warps were slower (one row
# of 1026 fp32 scores 9.6 us at 16 a thread, 12.9 at 32, 32.6 at 64; V4.1 B=1 2.18 ms at 64 against 2.03), more
# no faster (bf16 rows of 1026 / 4104: 7.5 / 16.8 us at 4, 6.7 / 17.4 at 8, 7.3 / 17.4 at 16; H200, session 21):
# the time follows the row's block, not the warps
ROW_PER_THREAD = 16
# the program's warps at most: 16 (512 threads). 32 warps at 8 scores a thread (58 registers a thread offline) were
# no faster: one bf16 row of 4104 scores 15.9 us against 14.5 in 16 warps at 8 a thread, 14.2 at 16 a thread; V4.1
# B=1 graphs 1.984-2.030 ms against 1.965-1.971 (H200, alternating, session 23)
MAX_WARPS = 16


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def topk_kernel(S, IDX, VAL, m, k, stride_s, stride_i, stride_v, BLOCK: tl.constexpr,
                    TORCH_ORDER: tl.constexpr, KEY_BITS: tl.constexpr):
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
        key = tl.where(inside, key, 0)  # below every score's key (0 would be a negative NaN)
        if KEY_BITS == 16:  # bf16 scores: the low 16 bits follow from the sign, the top 16 order the keys
            key = key >> 16
        threshold = tl.zeros([], tl.uint32)
        for bit in tl.static_range(KEY_BITS - 1, -1, -1):
            candidate = threshold | (1 << bit)
            count = tl.sum((key >= candidate).to(tl.int32), axis=0)
            threshold = tl.where(count >= k, candidate, threshold)
        above = inside & (key > threshold)
        tie = inside & (key == threshold)
        need = k - tl.sum(above.to(tl.int32), axis=0)  # ties to take, the lowest indices first
        # one scan counts both, the keys above in the low 16 bits and the ties in the high (rows <= MAX_ROW < 2^16)
        seen = tl.cumsum(above.to(tl.int32) | (tie.to(tl.int32) << 16), axis=0)
        ties_so_far = seen >> 16
        take = above | (tie & (ties_so_far <= need))
        slot = (seen & 0xFFFF) + tl.minimum(ties_so_far, need) - 1
        tl.store(IDX + row * stride_i + slot, offs.to(tl.int64), mask=take)
        tl.store(VAL + row * stride_v + slot, s, mask=take)

    return triton, topk_kernel


def rows_topk(scores: torch.Tensor, k: int, launch: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """A row top-k kernel's frame: the scores' rows [n, m] (unit stride), the picks [n, k] (int64) and their values,
    ``launch(rows, idx, val)`` where there is work, the outputs as [..., k]."""
    lead, m = scores.shape[:-1], scores.shape[-1]
    rows = scores.reshape(-1, m)
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    idx = torch.empty(rows.shape[0], k, device=scores.device, dtype=torch.long)
    val = torch.empty(rows.shape[0], k, device=scores.device, dtype=scores.dtype)
    if rows.shape[0] and k:
        launch(rows, idx, val)
    return idx.view(*lead, k), val.view(*lead, k)


def register_both(name: str, topk: Callable[..., tuple[torch.Tensor, torch.Tensor]], supports: Callable[..., bool],
                  priority: int) -> None:
    """``topk(scores, k, torch_order)`` as backend ``name`` of ``topk_lowest_index`` and ``topk_torch_order``."""
    register("topk_lowest_index", name, functools.partial(topk, torch_order=False), supports=supports,
             priority=priority)
    register("topk_torch_order", name, functools.partial(topk, torch_order=True), supports=supports, priority=priority)


def topk(scores: torch.Tensor, k: int, torch_order: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``reference.topk_lowest_index``, or with ``torch_order`` ``reference.topk_torch_order`` (the set torch.topk
    takes on CUDA: module doc)."""
    triton, kernel = _kernel()
    m = scores.shape[-1]
    block = max(16, triton.next_power_of_2(m))

    def launch(rows: torch.Tensor, idx: torch.Tensor, val: torch.Tensor) -> None:
        kernel[(rows.shape[0],)](rows, idx, val, m, k, rows.stride(0), idx.stride(0), val.stride(0), BLOCK=block,
                                 TORCH_ORDER=torch_order, KEY_BITS=16 if scores.dtype == torch.bfloat16 else 32,
                                 num_warps=max(1, min(MAX_WARPS, block // (32 * ROW_PER_THREAD))), **pdl_launch())

    return rows_topk(scores, k, launch)


topk_lowest_index = functools.partial(topk, torch_order=False)
topk_torch_order = functools.partial(topk, torch_order=True)


def supports(scores: torch.Tensor, k: int) -> bool:
    return (scores.is_cuda and scores.dtype in FLOAT_DTYPES
            and 0 <= k <= scores.shape[-1] <= MAX_ROW and scores.dim() >= 1 and triton_available())


register_both("triton", topk, supports, priority=10)
