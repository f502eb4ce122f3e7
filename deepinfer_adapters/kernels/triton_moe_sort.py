"""The MoE's token-expert pairs sorted into expert row tiles in one Triton program.

``sort_pairs`` returns what ``triton_moe.route`` returns -- the stable order of the pairs
by expert, the row tiles (each inside one expert's rows, at most ``block_m`` rows) and
each token's sorted rows in ascending expert order -- with the same values, from one
launch where the torch version is ~45 small kernels (an argsort, scans, a searchsorted,
gathers, scatters, a second argsort): per MoE layer of a 32-token decode step ~90 us
against 6.4 us for this kernel (H200 profiles, V4-Flash widths, session 6).

One program holds every pair (up to ``MAX_PAIRS``; larger batches, prefill chunks, take
``sort_pairs_blocked``: per-block counts, one program for the offsets and tiles, per-block
placement -- three launches instead of the torch version's ~45):
1. key = expert x P + pair, sorted: the pairs in stable expert order;
2. key = token x P + sorted row, sorted: each token's rows ascending, which is ascending
   expert order (a token's experts are distinct; with repeated experts, pair order);
3. a row starts its expert's group where the expert differs from the row before, ends it
   where it differs from the row after (the sorted experts go through a scratch buffer
   to read the neighbours); a tile starts every ``block_m`` rows of a group, and a running
   count of tile starts numbers the tiles in expert order, as the torch version does.
Tiles past the last are idle (expert -1, no rows).

``sort_each_token`` is the one-token decode's routing (``triton_moe.pair_route``): each token's
pairs in ascending expert order with their route weights, one program per token, where torch's
sort, its index copies and the gather were ~7 launches a layer. Imports Triton at its top: import
it where Triton runs (``triton_moe`` does, lazily).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deepinfer_adapters.kernels import triton_fp8_gemm as fp8
from deepinfer_adapters.kernels.fp8_triton_jit import quantize_store
from deepinfer_adapters.kernels.triton_pdl import pdl_start
from deepinfer_adapters.kernels.triton_support import pdl_launch

MAX_PAIRS = 4096  # pairs one program sorts (keys stay int32: experts x pairs < 2^31)


@triton.jit
def _max(a, b):
    return tl.maximum(a, b)


@triton.jit
def _min(a, b):
    return tl.minimum(a, b)


@triton.jit
def sort_pairs_kernel(IDS, ORDER, ROW_IDX, EXPERT, ROW0, ROW1, POS, SCRATCH, P, n_experts, max_tiles,
                      K: tl.constexpr, BM: tl.constexpr, P_PAD: tl.constexpr, TILES_PAD: tl.constexpr):
    pdl_start()
    r = tl.arange(0, P_PAD)
    inside = r < P
    ids = tl.load(IDS + r, mask=inside, other=n_experts).to(tl.int32)  # padding sorts last
    key = tl.sort(ids * P_PAD + r, 0)
    pair = key % P_PAD
    expert = key // P_PAD
    tl.store(ORDER + r, pair.to(tl.int64), mask=inside)
    tl.store(ROW_IDX + r, pair // K, mask=inside)
    rows = tl.sort(tl.where(inside, (pair // K) * P_PAD + r, 2**30 + r), 0)
    tl.store(POS + r, (rows % P_PAD).to(tl.int64), mask=inside)
    # neighbours through memory: SCRATCH[1 + r] = expert of sorted row r, -1 on both sides
    tl.store(SCRATCH + 1 + r, tl.where(inside, expert, -1))
    tl.store(SCRATCH + r * 0, -1, mask=r == 0)
    tl.store(SCRATCH + P_PAD + 1 + r * 0, -1, mask=r == 0)
    tl.debug_barrier()
    before = tl.load(SCRATCH + r)
    after = tl.load(SCRATCH + 2 + r)
    first = inside & (expert != before)
    last = inside & (expert != after)
    start = tl.associative_scan(tl.where(first, r, 0), 0, _max)
    end = tl.associative_scan(tl.where(last, r + 1, P_PAD), 0, _min, reverse=True)
    tile_start = inside & ((r - start) % BM == 0)
    tile = tl.cumsum(tile_start.to(tl.int32), 0) - 1
    tl.store(EXPERT + tile, expert, mask=tile_start)
    tl.store(ROW0 + tile, r, mask=tile_start)
    tl.store(ROW1 + tile, end, mask=tile_start)
    t = tl.arange(0, TILES_PAD)
    idle = (t > tl.max(tile, 0)) & (t < max_tiles)
    tl.store(EXPERT + t, -1, mask=idle)
    tl.store(ROW0 + t, 0, mask=idle)
    tl.store(ROW1 + t, 0, mask=idle)


@triton.jit
def sort_each_token_kernel(IDS, W, EXPERT, RW, T, X, Q, S, D, stride_xm, stride_qm, stride_sm, chunks,
                           K: tl.constexpr, K_PAD: tl.constexpr, BIG: tl.constexpr, QUANTIZE: tl.constexpr = False,
                           BLOCK: tl.constexpr = 32, GROUPS: tl.constexpr = 1):
    """Programs 0 .. T - 1: token t's K pairs by expert, stably (key = expert x K_PAD + pair): the
    experts (int32) and their route weights (fp32) at rows t K .. t K + K - 1. QUANTIZE: the programs
    after them quantize the tokens' activations X [T, D] as ``act_quant_kernel`` does (``chunks`` of
    GROUPS blocks of BLOCK values a row: its codes and scales, the same bits) -- the experts' input,
    in the routing's launch rather than one of its own after it."""
    pdl_start()
    t = tl.program_id(0).to(tl.int64)
    if t < T:
        j = tl.arange(0, K_PAD)
        inside = j < K
        ids = tl.load(IDS + t * K + j, mask=inside, other=BIG).to(tl.int64)  # padding sorts last
        key = tl.sort(ids * K_PAD + j, 0)
        pair = key % K_PAD
        tl.store(EXPERT + t * K + j, (key // K_PAD).to(tl.int32), mask=inside)
        tl.store(RW + t * K + j, tl.load(W + t * K + pair, mask=inside, other=0.0).to(tl.float32), mask=inside)
    elif QUANTIZE:
        row = (t - T) // chunks
        group = ((t - T) % chunks) * GROUPS + tl.arange(0, GROUPS)
        offs = group[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
        mask = offs < D
        x = tl.load(X + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
        quantize_store(x, Q + row * stride_qm, S + row * stride_sm, offs, group, mask, D, BLOCK, False)


def sort_each_token(expert_ids: torch.Tensor, route_w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """expert_ids, route_w [T, k] -> (experts int32 [T k], route weights fp32 [T k]): each token's
    pairs in ascending expert order (stable: repeated experts keep pair order)."""
    return _sort_each_token(expert_ids, route_w, None, 0)[:2]


def sort_each_token_and_quantize(expert_ids: torch.Tensor, route_w: torch.Tensor, x: torch.Tensor, block: int
                                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``sort_each_token``'s (experts, route weights) and ``triton_fp8_gemm.act_quant(x, block)``'s (E4M3 [T, D],
    fp32 scales [T, D / block]) from one launch: the one-token MoE's two steps before its experts."""
    return _sort_each_token(expert_ids, route_w, x, block)


def _sort_each_token(expert_ids, route_w, x, block):
    T, k = expert_ids.shape
    device = expert_ids.device
    expert = torch.empty(T * k, device=device, dtype=torch.int32)
    rw = torch.empty(T * k, device=device, dtype=torch.float32)
    if x is None:
        q = s = rw  # unused pointers
        D, chunks, groups, strides = 0, 0, 1, (0, 0, 0)
    else:
        x = x if x.stride(-1) == 1 else x.contiguous()
        D = x.shape[1]
        blocks = triton.cdiv(D, block)
        groups = fp8.quant_groups(blocks, block)  # act_quant's grid
        chunks = triton.cdiv(blocks, groups)
        q = torch.empty(T, D, device=device, dtype=torch.float8_e4m3fn)
        s = torch.empty(T, blocks, device=device, dtype=torch.float32)
        strides = (x.stride(0), q.stride(0), s.stride(0))
    if T:
        sort_each_token_kernel[(T + T * chunks,)](
            expert_ids.contiguous(), route_w.contiguous(), expert, rw, T, rw if x is None else x, q, s, D, *strides,
            max(chunks, 1), K=k, K_PAD=max(2, triton.next_power_of_2(k)), BIG=2**40, QUANTIZE=x is not None,
            BLOCK=block or 32, GROUPS=groups, num_warps=1 if x is None else 4, **pdl_launch())
    return expert, rw, (None if x is None else q), (None if x is None else s)


@triton.jit
def block_counts_kernel(IDS, COUNTS, P, n_experts, BLOCK: tl.constexpr, E_PAD: tl.constexpr):
    """COUNTS[b, e] = pairs of block b (BLOCK pairs) routed to expert e (padding in bin n_experts)."""
    pdl_start()
    b = tl.program_id(0)
    r = b * BLOCK + tl.arange(0, BLOCK)
    ids = tl.load(IDS + r, mask=r < P, other=n_experts).to(tl.int32)
    tl.store(COUNTS + b * E_PAD + tl.arange(0, E_PAD), tl.histogram(ids, E_PAD))


@triton.jit
def block_tiles_kernel(COUNTS, ADJ, EXPERT, ROW0, ROW1, NB, n_experts, max_tiles, BM: tl.constexpr,
                       E_PAD: tl.constexpr, CHUNK: tl.constexpr):
    """One program: each expert's first sorted row (pairs in stable expert order), ADJ[b, e] = the row of
    block b's first pair of expert e minus that pair's place in the block's own expert-sorted order, and the
    row tiles as ``sort_pairs_kernel`` numbers them (idle ones expert -1, no rows)."""
    pdl_start()
    e = tl.arange(0, E_PAD)
    real = e < n_experts
    total = tl.zeros([E_PAD], tl.int32)
    for b in range(NB):
        total += tl.load(COUNTS + b * E_PAD + e)
    total = tl.where(real, total, 0)
    start = tl.cumsum(total, 0) - total
    running = start
    for b in range(NB):
        c = tl.where(real, tl.load(COUNTS + b * E_PAD + e), 0)
        tl.store(ADJ + b * E_PAD + e, running - (tl.cumsum(c, 0) - c))
        running += c
    per_expert = (total + BM - 1) // BM
    first_tile = tl.cumsum(per_expert, 0) - per_expert
    for j in range(tl.max(per_expert, 0)):
        m = j < per_expert
        tl.store(EXPERT + first_tile + j, e, mask=m)
        tl.store(ROW0 + first_tile + j, start + j * BM, mask=m)
        tl.store(ROW1 + first_tile + j, start + total, mask=m)
    for t0 in range(tl.sum(per_expert, 0), max_tiles, CHUNK):
        t = t0 + tl.arange(0, CHUNK)
        idle = t < max_tiles
        tl.store(EXPERT + t, -1, mask=idle)
        tl.store(ROW0 + t, 0, mask=idle)
        tl.store(ROW1 + t, 0, mask=idle)


@triton.jit
def block_scatter_kernel(IDS, ADJ, ORDER, ROW_IDX, POS, P, n_experts, K: tl.constexpr, BLOCK: tl.constexpr,
                         E_PAD: tl.constexpr):
    """Block b's pairs into their sorted rows: the block's stable expert order (key = expert x BLOCK + pair)
    plus ADJ; each token's rows in ascending expert order (its pair's rank among the token's K experts, ties
    in pair order) into POS."""
    pdl_start()
    b = tl.program_id(0)
    s = tl.arange(0, BLOCK)
    ids = tl.load(IDS + b * BLOCK + s, mask=b * BLOCK + s < P, other=n_experts).to(tl.int32)  # padding last
    key = tl.sort(ids * BLOCK + s, 0)
    expert = key // BLOCK
    pair = b * BLOCK + key % BLOCK
    valid = pair < P
    row = tl.load(ADJ + b * E_PAD + expert, mask=valid, other=0) + s
    tl.store(ORDER + row, pair.to(tl.int64), mask=valid)
    tok = pair // K
    tl.store(ROW_IDX + row, tok, mask=valid)
    slot = pair % K
    rank = tl.zeros([BLOCK], tl.int32)
    for j in tl.static_range(K):
        other = tl.load(IDS + tok * K + j, mask=valid, other=0).to(tl.int32)
        rank += ((other < expert) | ((other == expert) & (j < slot))).to(tl.int32)
    tl.store(POS + tok * K + rank, row.to(tl.int64), mask=valid)


SORT_BLOCK = 1024  # pairs a program of the blocked sort holds
BLOCKED_MAX_EXPERTS = 4095  # a block's expert counts are one vector of next_pow2(E + 1) bins in registers


def fits_blocked(expert_ids: torch.Tensor, n_experts: int) -> bool:
    """Whether ``sort_pairs_blocked`` takes these pairs (``route`` asks once ``fits`` declines): up to
    ``BLOCKED_MAX_EXPERTS`` experts, pairs and rows in int32."""
    return 0 < expert_ids.numel() < 2**30 and n_experts <= BLOCKED_MAX_EXPERTS


def sort_pairs_blocked(expert_ids: torch.Tensor, n_experts: int, block_m: int
                       ) -> tuple[torch.Tensor, fp8.Groups, torch.Tensor]:
    """``sort_pairs`` for any number of pairs in three launches (per-block expert counts; one program for
    the rows' offsets and the tiles; per-block placement), where the torch route is ~45 small kernels, each
    a host launch (an 8192-token prefill: 49152 pairs a MoE layer). The same values as ``sort_pairs`` and
    the torch route (``tests/test_moe_sort_kernel.py``)."""
    T, k = expert_ids.shape
    P = T * k
    max_tiles = P // block_m + min(n_experts, P)
    dev = expert_ids.device
    nb = triton.cdiv(P, SORT_BLOCK)
    e_pad = triton.next_power_of_2(n_experts + 1)
    ids = expert_ids.contiguous()
    counts = torch.empty(nb, e_pad, device=dev, dtype=torch.int32)
    adj = torch.empty(nb, e_pad, device=dev, dtype=torch.int32)
    order = torch.empty(P, device=dev, dtype=torch.int64)
    positions = torch.empty(T, k, device=dev, dtype=torch.int64)
    row_idx, expert, row0, row1 = (torch.empty(n, device=dev, dtype=torch.int32)
                                   for n in (P, max_tiles, max_tiles, max_tiles))
    block_counts_kernel[(nb,)](ids, counts, P, n_experts, BLOCK=SORT_BLOCK, E_PAD=e_pad, num_warps=4, **pdl_launch())
    block_tiles_kernel[(1,)](counts, adj, expert, row0, row1, nb, n_experts, max_tiles, BM=block_m, E_PAD=e_pad,
                             CHUNK=256, num_warps=4, **pdl_launch())
    block_scatter_kernel[(nb,)](ids, adj, order, row_idx, positions, P, n_experts, K=k, BLOCK=SORT_BLOCK,
                                E_PAD=e_pad, num_warps=8, **pdl_launch())
    return order, fp8.Groups(expert=expert, row0=row0, row1=row1, row_idx=row_idx), positions


def fits(expert_ids: torch.Tensor, n_experts: int) -> bool:
    P = expert_ids.numel()
    return 0 < P <= MAX_PAIRS and (n_experts + 1) * _padded(P) < 2**30


def _padded(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def sort_pairs(expert_ids: torch.Tensor, n_experts: int, block_m: int) -> tuple[torch.Tensor, fp8.Groups, torch.Tensor]:
    """(order, tiles, positions) as ``triton_moe.route`` (which checks ``fits`` first)."""
    T, k = expert_ids.shape
    P = T * k
    p_pad = _padded(P)
    max_tiles = P // block_m + min(n_experts, P)
    dev = expert_ids.device
    order = torch.empty(P, device=dev, dtype=torch.int64)
    positions = torch.empty(T, k, device=dev, dtype=torch.int64)
    row_idx, expert, row0, row1 = (torch.empty(n, device=dev, dtype=torch.int32)
                                   for n in (P, max_tiles, max_tiles, max_tiles))
    scratch = torch.empty(p_pad + 2, device=dev, dtype=torch.int32)
    sort_pairs_kernel[(1,)](expert_ids.contiguous(), order, row_idx, expert, row0, row1, positions, scratch, P,
                            n_experts, max_tiles, K=k, BM=block_m, P_PAD=p_pad, TILES_PAD=_padded(max_tiles),
                            num_warps=max(1, min(16, p_pad // 256)), **pdl_launch())
    return order, fp8.Groups(expert=expert, row0=row0, row1=row1, row_idx=row_idx), positions
