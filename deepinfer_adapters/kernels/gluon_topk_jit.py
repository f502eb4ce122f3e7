"""The row top-k in Gluon: imported only to launch on a CUDA GPU (``gluon_topk``; design and status there).

The same arithmetic as ``triton_topk.topk_kernel`` (order-preserving keys, the k-th largest key found bit by bit
from the top, every key above it and the first ties in index order, each pick's slot from one running count), with
the layouts and the cross-warp traffic written out, which Triton's own lowering of that kernel does not give:
- each thread holds PER consecutive scores (a [W, 32, PER] tensor: warp, lane, element), so a thread's share of a
  count is in-thread and a warp's one REDUX;
- a pass's warp counts meet in shared memory, a row of its own each pass, behind one barrier, and every thread
  sums the W of them itself (Triton's block-wide sum: two barriers and a shuffle tree a pass);
- the picks' running count is a scan inside the thread, one across the warp's lanes and one shared-memory row of
  warp totals (Triton's scan of this row: a 5-step lane scan for each of a thread's elements, and its stores went
  through a layout conversion in shared memory).
"""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from deepinfer_adapters.kernels.gluon_gemv_jit import _let_next_launch, _wait_for_previous


@gluon.jit
def _add(a, b):
    return a + b


@triton.constexpr_function
def _layout(W, PER):
    """[W, 32, PER]: warp, lane, a thread's PER consecutive scores."""
    return gl.BlockedLayout([1, 1, PER], [1, 32, 1], [W, 1, 1], [2, 1, 0])


@gluon.jit
def _offsets(start, W: gl.constexpr, PER: gl.constexpr):
    """The indices a part of the row holds from ``start`` on: thread (w, l) the PER from start + (32 w + l) PER."""
    L3: gl.constexpr = _layout(W, PER)
    warp = gl.expand_dims(gl.expand_dims(gl.arange(0, W, layout=gl.SliceLayout(1, gl.SliceLayout(2, L3))), 1), 2)
    lane = gl.expand_dims(gl.expand_dims(gl.arange(0, 32, layout=gl.SliceLayout(0, gl.SliceLayout(2, L3))), 0), 2)
    element = gl.expand_dims(gl.expand_dims(gl.arange(0, PER, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3))), 0), 1)
    return start + (warp * 32 + lane) * PER + element


@gluon.jit
def _keys(S, offs, m, TORCH_ORDER: gl.constexpr, KEY_BITS: gl.constexpr):
    """(scores, their order-preserving keys: 0 past the row) at ``offs`` -- ``triton_topk.topk_kernel``'s keys,
    written again: a Gluon function cannot call a Triton one."""
    inside = offs < m
    s = gl.load(S + offs, mask=inside, other=0.0)
    x = s.to(gl.float32)
    if not TORCH_ORDER:
        x = x + 0.0  # -0.0 -> +0.0
    bits = x.to(gl.uint32, bitcast=True)
    key = gl.where((bits >> 31) != 0, ~bits, bits | 0x80000000)
    if TORCH_ORDER:
        key = gl.where(x != x, 0xFFFFFFFF, key)  # NaN above everything
    key = gl.where(inside, key, 0)
    if KEY_BITS == 16:  # bf16 scores: the top 16 bits order the keys
        key = key >> 16
    return s, key


@gluon.jit
def _per_thread(values, W: gl.constexpr):
    """A thread's sum of its [W, 32, PER] values, as [W, 32] in one layout for every PER."""
    return gl.convert_layout(gl.sum(values, axis=2), gl.BlockedLayout([1, 1], [1, 32], [W, 1], [1, 0]),
                             assert_trivial=True)


@gluon.jit
def _store_picks(IDX, VAL, s, offs, above, tie, packed, per_thread, before, need, W: gl.constexpr,
                 PER: gl.constexpr):
    """Each pick's slot from the running count (``before``: the packed count of the row's keys before this thread's
    first) and its index and value stored there."""
    lanes_before = gl.convert_layout(gl.associative_scan(per_thread, 1, _add) - per_thread,
                                     gl.SliceLayout(2, _layout(W, PER)), assert_trivial=True)
    seen = gl.associative_scan(packed, 2, _add) + gl.expand_dims(lanes_before, 2) + before
    ties_so_far = seen >> 16
    take = above | (tie & (ties_so_far <= need))
    slot = (seen & 0xFFFF) + gl.minimum(ties_so_far, need) - 1
    gl.store(IDX + slot, offs.to(gl.int64), mask=take)
    gl.store(VAL + slot, s, mask=take)


@gluon.jit
def topk_gluon_kernel(S, IDX, VAL, m, k, stride_s, stride_i, stride_v, W: gl.constexpr, PER: gl.constexpr,
                      TAIL: gl.constexpr, TORCH_ORDER: gl.constexpr, KEY_BITS: gl.constexpr, PDL: gl.constexpr):
    """One program a row of ``m`` scores: the ``k`` picks' indices (ascending) and values, as
    ``triton_topk.topk_kernel``. The row in two parts, each thread holding consecutive scores of each: the first
    32 W PER scores at PER a thread, the rest (up to 32 W TAIL) at TAIL a thread (TAIL 0: none) -- a row just past a
    power of two (4104 scores) takes 8 + 1 a thread on 16 warps instead of a padded block's 16."""
    _let_next_launch(PDL)
    EVERY: gl.constexpr = gl.BlockedLayout([W], [32], [W], [0])  # all W warps' values in every thread
    MAIN: gl.constexpr = 32 * W * PER
    row = gl.program_id(0).to(gl.int64)
    S = S + row * stride_s
    IDX = IDX + row * stride_i
    VAL = VAL + row * stride_v
    offs = _offsets(0, W, PER)
    # the warps' counts: a row each key bit (no row reused, so no barrier before a write), the last two the picks'
    counts = gl.allocate_shared_memory(gl.int32, [KEY_BITS + 2, W], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    _wait_for_previous(PDL)
    s, key = _keys(S, offs, m, TORCH_ORDER, KEY_BITS)
    if TAIL:
        offs_t = _offsets(MAIN, W, TAIL)
        s_t, key_t = _keys(S, offs_t, m, TORCH_ORDER, KEY_BITS)
    threshold = gl.zeros([], gl.uint32)
    for bit in gl.static_range(KEY_BITS - 1, -1, -1):
        candidate = threshold | (1 << bit)
        per_thread = _per_thread((key >= candidate).to(gl.int32), W)
        if TAIL:
            per_thread += _per_thread((key_t >= candidate).to(gl.int32), W)
        counts.index(bit).store(gl.sum(per_thread, axis=1))
        gl.thread_barrier()
        count = gl.sum(counts.index(bit).load(EVERY), axis=0)
        threshold = gl.where(count >= k, candidate, threshold)
    # one running count of both, the keys above in the low 16 bits and the ties in the high (m < 2^16)
    above = (offs < m) & (key > threshold)
    tie = (offs < m) & (key == threshold)
    packed = above.to(gl.int32) | (tie.to(gl.int32) << 16)
    per_thread = _per_thread(packed, W)
    counts.index(KEY_BITS).store(gl.sum(per_thread, axis=1))
    if TAIL:
        above_t = (offs_t < m) & (key_t > threshold)
        tie_t = (offs_t < m) & (key_t == threshold)
        packed_t = above_t.to(gl.int32) | (tie_t.to(gl.int32) << 16)
        per_thread_t = _per_thread(packed_t, W)
        counts.index(KEY_BITS + 1).store(gl.sum(per_thread_t, axis=1))
    gl.thread_barrier()
    per_warp = counts.index(KEY_BITS).load(EVERY)
    main = gl.sum(per_warp, axis=0)
    total = main
    if TAIL:
        per_warp_t = counts.index(KEY_BITS + 1).load(EVERY)
        total += gl.sum(per_warp_t, axis=0)
    need = k - (total & 0xFFFF)  # ties to take, the lowest indices first
    thread = gl.inline_asm_elementwise("mov.u32 $0, %tid.x;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)
    earlier = gl.arange(0, W, layout=EVERY) < thread // 32  # the warps before this thread's
    _store_picks(IDX, VAL, s, offs, above, tie, packed, per_thread, gl.sum(gl.where(earlier, per_warp, 0), axis=0),
                 need, W, PER)
    if TAIL:  # after every key of the first part
        _store_picks(IDX, VAL, s_t, offs_t, above_t, tie_t, packed_t, per_thread_t,
                     main + gl.sum(gl.where(earlier, per_warp_t, 0), axis=0), need, W, TAIL)
