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

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from deepinfer_adapters.kernels.gluon_gemv_jit import _let_next_launch, _wait_for_previous


@gluon.jit
def _add(a, b):
    return a + b


@gluon.jit
def topk_gluon_kernel(S, IDX, VAL, m, k, stride_s, stride_i, stride_v, W: gl.constexpr, PER: gl.constexpr,
                      TORCH_ORDER: gl.constexpr, KEY_BITS: gl.constexpr, PDL: gl.constexpr):
    """One program a row of ``m`` scores (W warps, 32 * W * PER >= m): the ``k`` picks' indices (ascending) and
    values, as ``triton_topk.topk_kernel``."""
    _let_next_launch(PDL)
    L3: gl.constexpr = gl.BlockedLayout([1, 1, PER], [1, 32, 1], [W, 1, 1], [2, 1, 0])
    LT: gl.constexpr = gl.SliceLayout(2, L3)  # a value a thread
    LW: gl.constexpr = gl.SliceLayout(1, LT)  # a value a warp
    LANES: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [W, 1], [1, 0])  # LT as a blocked layout (for a scan)
    EVERY: gl.constexpr = gl.BlockedLayout([W], [32], [W], [0])  # all W warps' values in every thread
    row = gl.program_id(0).to(gl.int64)
    warp = gl.expand_dims(gl.expand_dims(gl.arange(0, W, layout=LW), 1), 2)
    lane = gl.expand_dims(gl.expand_dims(gl.arange(0, 32, layout=gl.SliceLayout(0, LT)), 0), 2)
    element = gl.expand_dims(gl.expand_dims(gl.arange(0, PER, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3))), 0), 1)
    offs = (warp * 32 + lane) * PER + element
    inside = offs < m
    # the warps' counts: a row each key bit (no row reused, so no barrier before a write), the last the picks'
    counts = gl.allocate_shared_memory(gl.int32, [KEY_BITS + 1, W], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    _wait_for_previous(PDL)
    s = gl.load(S + row * stride_s + offs, mask=inside, other=0.0)
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
    threshold = gl.zeros([], gl.uint32)
    for bit in gl.static_range(KEY_BITS - 1, -1, -1):
        candidate = threshold | (1 << bit)
        counts.index(bit).store(gl.sum(gl.sum((key >= candidate).to(gl.int32), axis=2), axis=1))
        gl.thread_barrier()
        count = gl.sum(counts.index(bit).load(EVERY), axis=0)
        threshold = gl.where(count >= k, candidate, threshold)
    above = inside & (key > threshold)
    tie = inside & (key == threshold)
    # one running count of both, the keys above in the low 16 bits and the ties in the high (m < 2^16)
    packed = above.to(gl.int32) | (tie.to(gl.int32) << 16)
    per_thread = gl.sum(packed, axis=2)
    counts.index(KEY_BITS).store(gl.sum(per_thread, axis=1))
    gl.thread_barrier()
    per_warp = counts.index(KEY_BITS).load(EVERY)
    need = k - (gl.sum(per_warp, axis=0) & 0xFFFF)  # ties to take, the lowest indices first
    thread = gl.inline_asm_elementwise("mov.u32 $0, %tid.x;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)
    warps_before = gl.sum(gl.where(gl.arange(0, W, layout=EVERY) < thread // 32, per_warp, 0), axis=0)
    lanes = gl.convert_layout(per_thread, LANES, assert_trivial=True)
    lanes_before = gl.convert_layout(gl.associative_scan(lanes, 1, _add) - lanes, LT, assert_trivial=True)
    seen = gl.associative_scan(packed, 2, _add) + gl.expand_dims(lanes_before, 2) + warps_before
    ties_so_far = seen >> 16
    take = above | (tie & (ties_so_far <= need))
    slot = (seen & 0xFFFF) + gl.minimum(ties_so_far, need) - 1
    gl.store(IDX + row * stride_i + slot, offs.to(gl.int64), mask=take)
    gl.store(VAL + row * stride_v + slot, s, mask=take)
