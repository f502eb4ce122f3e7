"""The decode GEMV on FP8 products for Hopper in Gluon: imported only to launch on an sm_90 GPU
(``gluon_gemv``). Design and status: ``gluon_gemv``'s module doc.

Persistent: a program (one an SM) takes work items in turn, an item 64 weight rows x a K range of 128-input
steps, against up to 16 activation rows; the ring runs on across items, so its copies never drain between
them (the first form, one program an item, refilled the ring at each and lost to the Triton GEMV on every
weight under ~64 MB, session 18).
- loader (1 warp): TMA copies of the step's E4M3 weight tile [64, 128] and E4M3 activation tile [16, 128]
  (rows past N or M come as zeros) into a ring of STAGES slots;
- one warpgroup: four FP8 wgmma products 32 deep a step, straight from shared memory (weights as the
  64-row operand, activations as the narrow one), each promoted into the fp32 accumulator with its
  weight block's E8M0 scale times its activation row's scale -- the scales are per 32 inputs, as the
  model's. The weight scales of a step come as one int32 word a row (its four 32-input blocks), or with
  weight scales per 128 inputs (W_BK 128) one byte.

LANES 2 (``gluon_gemv.lanes``: one-row products of the FP8 kernel; ``GROUPED_LANES`` for wo_a's
``bf16_gemv_kernel``, which also takes 4): two (four) warpgroups an SM, each with its loader warp and its ring, take
the program's items lane-major -- one warpgroup's step is latency-bound (wo_a: ~0.7 us a step against ~0.26 for its
copies, session 21).

PDL (``gluon_gemv.pdl_options``): launched under programmatic dependent launch, as the Triton kernels
(``triton_pdl``): every partition waits for the kernel before (``_wait_for_previous``) before it reads the
activations, their scales or a pair's expert, or writes; the next kernel may launch from the start, after each
loader's last copy or at the end (NEXT_LAUNCH).

PAIRS (one token's routed experts, ``gluon_gemv.pair_gemm``): the items are (pair, 64-row tile, K split); pair r
reads expert EXPERT[r]'s weights, held in 128 x 128 tiles (quant.to_e4m3_tiles, viewed as rows of 128 inputs:
a step's [64, 128] box starts at its tile's row), against activation row AROW[r], and writes output row r.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

# registers a thread of a loader warp that also copies the scales (its pointers: 64 rows' and 4 x 16 blocks'). Two
# lanes' CTA: 4 warps at 256 + 4 at 224 + the loaders and Triton's two padding warps at 32 = the SM's 64K
LOADER_REGS = gl.constexpr(32)
# registers a thread of the three worker warpgroups of ``bf16_gemv_kernel`` with four lanes: 16 product warps at 104
# and 4 loader warps (+ Triton's padding) at LOADER_REGS fit the 64K
FOUR_LANE_REGS = gl.constexpr(104)

# Triton 3.6 (the GPU machine's) calls the TMA load async_copy_global_to_shared; later releases async_load.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


@gluon.jit
def _let_next_launch(NOW: gl.constexpr):
    """NOW (under programmatic dependent launch, ``triton_pdl``): the kernel after this one may launch once every
    program got here; it waits for this one's end before it touches memory."""
    if NOW:
        gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // dummy $0", "=r", [], dtype=gl.int32,
                                  is_pure=False, pack=1)


@gluon.jit
def _wait_for_previous(PDL: gl.constexpr):
    """Under programmatic dependent launch: wait until the kernel before has finished and its writes are
    visible. Every partition calls it before it reads what that kernel may have written (activations, their
    scales, a pair's expert) or writes anything (the output may reuse memory that kernel reads)."""
    if PDL:
        gl.inline_asm_elementwise("griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False,
                                  pack=1)


@gluon.jit
def _barriers(STAGES: gl.constexpr):
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    return bars


@gluon.jit
def _ring(w_desc, a_desc, STAGES: gl.constexpr):
    """The ring's STAGES slots of a weight tile and an activation tile (the descriptors' boxes), with their
    ready and empty barriers."""
    W_ROWS: gl.constexpr = w_desc.block_type.shape[0]
    T: gl.constexpr = a_desc.block_type.shape[0]
    w_smem = gl.allocate_shared_memory(w_desc.dtype, [STAGES, W_ROWS, 128], w_desc.layout)
    a_smem = gl.allocate_shared_memory(a_desc.dtype, [STAGES, T, 128], a_desc.layout)
    return w_smem, a_smem, _barriers(STAGES), _barriers(STAGES)


@gluon.jit
def _scale_slots(STAGES: gl.constexpr, W_ROWS: gl.constexpr, T: gl.constexpr):
    """SCALES_IN_RING's slots next to the ring's: a step's weight scale word for each of its W_ROWS rows, and
    its activation rows' four per-32 scales (4 T: block j's T scales at j T ..)."""
    # a slot's layout (the ring's leading dimension is the slot index, as the tiles' layouts leave it out)
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    return (gl.allocate_shared_memory(gl.int32, [STAGES, W_ROWS], flat),
            gl.allocate_shared_memory(gl.float32, [STAGES, 4 * T], flat))


@gluon.jit
def _item(item, n_splits, k_per_split, K, tiles_per_pair, W_ROWS: gl.constexpr):
    """Work item -> (pair, first weight row, K split, its first input, its 128-input steps): items run
    tile-major, a tile's K splits next to each other; the last split may be shorter. Without PAIRS one pair
    holds every tile (``tiles_per_pair`` = the weight's tiles)."""
    split = item % n_splits
    k0 = split * k_per_split
    tile = item // n_splits
    return tile // tiles_per_pair, (tile % tiles_per_pair) * W_ROWS, split, k0, gl.minimum(k_per_split, K - k0) // 128


@gluon.jit
def _pair(EXPERT, AROW, pair, PAIRS: gl.constexpr):
    """(expert, activation row) of a pair: (0, 0) without PAIRS (one weight, activations from row 0)."""
    if PAIRS:
        return gl.load(EXPERT + pair), gl.load(AROW + pair)
    else:
        return 0, 0


@gluon.jit
def _gemv_loader(w_desc, a_desc, w_smem, a_smem, ready, empty, EXPERT, AROW, n_items, n_splits, k_per_split, K,
                 tiles_per_pair, NT, KT, STAGES: gl.constexpr, PAIRS: gl.constexpr, GROUP_ROWS: gl.constexpr = 0,
                 LANE: gl.constexpr = 0, LANES: gl.constexpr = 1, PDL: gl.constexpr = False,
                 NEXT_LAUNCH: gl.constexpr = 0, ws_smem=None, as_smem=None, WS=None, AS=None, N=0, M=0,
                 stride_wsn=0, stride_asm=0, W_BN: gl.constexpr = 32, SCALES_IN_RING: gl.constexpr = False,
                 ACT_SCALES: gl.constexpr = True):
    """Copies the steps of the items of the program's lane LANE (of LANES, each with its ring) into the ring.
    Under PDL with NEXT_LAUNCH 1, lets the next kernel launch after its last copy. SCALES_IN_RING: also each
    step's scales, by cp.async into ``ws_smem`` / ``as_smem`` (the weight's words alone without ACT_SCALES: bf16
    activations), which then arrive with its tiles."""
    _wait_for_previous(PDL)
    W_ROWS: gl.constexpr = w_desc.block_type.shape[0]
    T: gl.constexpr = a_desc.block_type.shape[0]
    if SCALES_IN_RING:  # one warp: 64 rows' words, 2 a thread; 4 blocks x 16 activation rows, 2 a thread
        word_layout: gl.constexpr = gl.BlockedLayout([W_ROWS // 32], [32], [1], [0])
        block_layout: gl.constexpr = gl.BlockedLayout([4 * T // 32], [32], [1], [0])
        rows = gl.arange(0, W_ROWS, layout=word_layout)
        block_toks = gl.arange(0, 4 * T, layout=block_layout)  # block j's token t at j T + t
    g = 0  # steps copied so far by this program: the ring's position runs on across items
    for item in range(gl.program_id(0) + LANE * gl.num_programs(0), n_items, gl.num_programs(0) * LANES):
        pair, row0, _, k0, k_steps = _item(item, n_splits, k_per_split, K, tiles_per_pair, W_ROWS)
        expert, a_row = _pair(EXPERT, AROW, pair, PAIRS)
        a_k0 = k0
        if GROUP_ROWS:  # a grouped weight: each group of its rows reads its own K inputs of the activation rows
            a_k0 = k0 + row0 // GROUP_ROWS * K
        if SCALES_IN_RING:  # as _gemv_products reads them: rows past N the last row's, tokens past M the last's
            srow = (expert * N + gl.minimum(row0 + rows, N - 1)) // W_BN
            words = WS + srow.to(gl.int64) * stride_wsn + k0 // 128
            if ACT_SCALES:
                act_scales = AS + (a_row + gl.minimum(block_toks % T, M - 1)).to(gl.int64) * stride_asm \
                    + block_toks // T + k0 // 32
        for i in range(k_steps):
            s = g % STAGES
            free = ((g // STAGES) & 1) ^ 1  # a slot starts free: the first wait on phase 1 passes
            mbarrier.wait(empty.index(s), free)
            if SCALES_IN_RING:
                # cp.async, tracked by the ready barrier (one more pending arrival each thread until its copies
                # land): issued before the expect, whose arrival could otherwise complete the phase first
                async_copy.async_copy_global_to_shared(ws_smem.index(s), words + i)
                if ACT_SCALES:
                    async_copy.async_copy_global_to_shared(as_smem.index(s), act_scales + 4 * i)
                async_copy.mbarrier_arrive(ready.index(s))
            mbarrier.expect(ready.index(s), w_desc.block_type.nbytes + a_desc.block_type.nbytes)
            if PAIRS:  # the step's 128 x 128 tile of the expert, rows of 128 inputs: its row0 % 128 half
                tile_row = ((expert * NT + row0 // 128) * KT + k0 // 128 + i) * 128 + row0 % 128
                _tma_load(w_desc, [tile_row, 0], ready.index(s), w_smem.index(s))
            else:
                _tma_load(w_desc, [row0, k0 + i * 128], ready.index(s), w_smem.index(s))
            _tma_load(a_desc, [a_row, a_k0 + i * 128], ready.index(s), a_smem.index(s))
            g += 1
    _let_next_launch(PDL and NEXT_LAUNCH == 1)


@gluon.jit
def _block_scale(words, j: gl.constexpr):
    """Byte j of each weight row's scale word as its E8M0 scale in fp32 (the byte in the exponent field)."""
    return (((words >> (8 * j)) & 0xFF) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def _step_scales(wrow, arow, i, k_steps):
    """Step i's scales (clamped to the last step: a load ahead past the end reads scales that are there):
    the weight rows' words (or bytes) and the activation rows' four per-32 scales."""
    i = gl.minimum(i, k_steps - 1)
    return (gl.load(wrow + i).to(gl.int32), gl.load(arow + 4 * i), gl.load(arow + 4 * i + 1),
            gl.load(arow + 4 * i + 2), gl.load(arow + 4 * i + 3))


@gluon.jit
def _step(acc, zero, w_smem, a_smem, ready, empty, g, words, a0, a1, a2, a3, STAGES: gl.constexpr,
          W_BK: gl.constexpr, ws_smem=None, as_smem=None, SCALES_IN_RING: gl.constexpr = False,
          mma_layout: gl.constexpr = None):
    """acc plus the program's step g: four FP8 products 32 deep from the ring, each times its scales, in K
    order. SCALES_IN_RING: the scales are read from the step's scale slots (``words``, ``a0``..``a3`` unused)."""
    s = g % STAGES
    mbarrier.wait(ready.index(s), (g // STAGES) & 1)
    w_tile = w_smem.index(s)
    a_tile = a_smem.index(s)
    p0 = warpgroup_mma(w_tile.slice(0, 32, dim=1), a_tile.slice(0, 32, dim=1).permute((1, 0)), zero,
                       use_acc=False, is_async=True)
    p1 = warpgroup_mma(w_tile.slice(32, 32, dim=1), a_tile.slice(32, 32, dim=1).permute((1, 0)), zero,
                       use_acc=False, is_async=True)
    p2 = warpgroup_mma(w_tile.slice(64, 32, dim=1), a_tile.slice(64, 32, dim=1).permute((1, 0)), zero,
                       use_acc=False, is_async=True)
    p3 = warpgroup_mma(w_tile.slice(96, 32, dim=1), a_tile.slice(96, 32, dim=1).permute((1, 0)), zero,
                       use_acc=False, is_async=True)
    if SCALES_IN_RING:  # read while the products run, before the slot is handed back
        words = ws_smem.index(s).load(gl.SliceLayout(1, mma_layout))
        block_scales = as_smem.index(s)
        T: gl.constexpr = zero.shape[1]
        a0 = block_scales.slice(0, T).load(gl.SliceLayout(0, mma_layout))
        a1 = block_scales.slice(T, T).load(gl.SliceLayout(0, mma_layout))
        a2 = block_scales.slice(2 * T, T).load(gl.SliceLayout(0, mma_layout))
        a3 = block_scales.slice(3 * T, T).load(gl.SliceLayout(0, mma_layout))
    p0, p1, p2, p3 = warpgroup_mma_wait(num_outstanding=0, deps=(p0, p1, p2, p3))
    mbarrier.arrive(empty.index(s), count=1)
    # each 32-deep product times its weight block's and activation row's scales (powers of two), added in K
    # order: the swapped Triton kernel's FP8 steps (fp8_gemm_rows_kernel) do the same
    # (W_BK 128: the one weight scale of the step for all four)
    acc += p0 * (gl.expand_dims(_block_scale(words, 0), 1) * gl.expand_dims(a0, 0))
    acc += p1 * (gl.expand_dims(_block_scale(words, 1 if W_BK == 32 else 0), 1) * gl.expand_dims(a1, 0))
    acc += p2 * (gl.expand_dims(_block_scale(words, 2 if W_BK == 32 else 0), 1) * gl.expand_dims(a2, 0))
    acc += p3 * (gl.expand_dims(_block_scale(words, 3 if W_BK == 32 else 0), 1) * gl.expand_dims(a3, 0))
    return acc


@gluon.jit
def _store_tile(acc, OUT, row0, out_row0, split, N, M, stride_om, stride_os):
    """An item's [64 weight rows, T tokens] result into OUT[split][out_row0 + token, row0 + row] (rows past N and
    tokens past M left out), in OUT's dtype."""
    W_ROWS: gl.constexpr = acc.shape[0]
    T: gl.constexpr = acc.shape[1]
    out_layout: gl.constexpr = gl.BlockedLayout([4, 1], [16, 2], [1, 4], [0, 1])
    res = gl.convert_layout(acc.to(OUT.dtype.element_ty), out_layout)
    orows = row0 + gl.arange(0, W_ROWS, layout=gl.SliceLayout(1, out_layout))
    otoks = gl.arange(0, T, layout=gl.SliceLayout(0, out_layout))
    mask = gl.expand_dims(orows < N, 1) & gl.expand_dims(otoks < M, 0)
    ptrs = OUT + split.to(gl.int64) * stride_os + gl.expand_dims((out_row0 + otoks).to(gl.int64) * stride_om, 0) \
        + gl.expand_dims(orows, 1)
    gl.store(ptrs, res, mask=mask)


@gluon.jit
def _gemv_products(w_smem, a_smem, ready, empty, WS, AS, OUT, EXPERT, AROW, n_items, n_splits, k_per_split, K, N,
                   M, tiles_per_pair, stride_wsn, stride_asm, stride_om, stride_os, STAGES: gl.constexpr,
                   W_BN: gl.constexpr, W_BK: gl.constexpr, PAIRS: gl.constexpr, LANE: gl.constexpr = 0,
                   LANES: gl.constexpr = 1, PDL: gl.constexpr = False, ws_smem=None, as_smem=None,
                   SCALES_IN_RING: gl.constexpr = False):
    """A warpgroup of ``fp8_gemv_kernel``: ``_step`` over the K range of each item of its lane."""
    _wait_for_previous(PDL)
    W_ROWS: gl.constexpr = w_smem.type.shape[1]
    T: gl.constexpr = a_smem.type.shape[1]
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, T, 32])
    tile_rows = gl.arange(0, W_ROWS, layout=gl.SliceLayout(1, mma_layout))
    toks = gl.arange(0, T, layout=gl.SliceLayout(0, mma_layout))
    zero = gl.zeros((W_ROWS, T), dtype=gl.float32, layout=mma_layout)
    g = 0  # the ring's position, as the loader's
    for item in range(gl.program_id(0) + LANE * gl.num_programs(0), n_items, gl.num_programs(0) * LANES):
        pair, row0, split, k0, k_steps = _item(item, n_splits, k_per_split, K, tiles_per_pair, W_ROWS)
        acc = gl.zeros((W_ROWS, T), dtype=gl.float32, layout=mma_layout)
        if SCALES_IN_RING:  # the loader copies each step's scales with its tiles: no global load here
            for i in range(k_steps):
                acc = _step(acc, zero, w_smem, a_smem, ready, empty, g + i, 0, 0.0, 0.0, 0.0, 0.0, STAGES, W_BK,
                            ws_smem, as_smem, True, mma_layout)
        else:
            expert, a_row = _pair(EXPERT, AROW, pair, PAIRS)
            # rows past N read the last row's scales, tokens past M the last token's: their products are zeros.
            # An expert's scale rows follow the one before's (PAIRS: W_BN is 1)
            srow = (expert * N + gl.minimum(row0 + tile_rows, N - 1)) // W_BN
            wrow = WS + srow.to(gl.int64) * stride_wsn + k0 // 128
            arow = AS + (a_row + gl.minimum(toks, M - 1)).to(gl.int64) * stride_asm + k0 // 32
            # Two steps an iteration, each step's scales loaded a whole step's work before their use and into
            # registers not live then: with one step an iteration and the next step's scales carried, ptxas
            # copied the carried registers at the iteration's end, and each copy waited for its load (offline
            # SASS). Scale bytes only (W_BK 128): these loads' latency was the products' main stall where words
            # came this way too (Nsight Compute, session 23), which the ring's scale slots then took off
            wa, a0, a1, a2, a3 = _step_scales(wrow, arow, 0, k_steps)
            for i in range(0, k_steps, 2):
                wb, b0, b1, b2, b3 = _step_scales(wrow, arow, i + 1, k_steps)
                acc = _step(acc, zero, w_smem, a_smem, ready, empty, g + i, wa, a0, a1, a2, a3, STAGES, W_BK)
                wa, a0, a1, a2, a3 = _step_scales(wrow, arow, i + 2, k_steps)
                if i + 1 < k_steps:
                    acc = _step(acc, zero, w_smem, a_smem, ready, empty, g + i + 1, wb, b0, b1, b2, b3, STAGES, W_BK)
        g += k_steps
        _store_tile(acc, OUT, row0, pair, split, N, M, stride_om, stride_os)


@gluon.jit
def fp8_gemv_kernel(w_desc, a_desc, WS, AS, OUT, EXPERT, AROW, N, M, K, k_per_split, n_splits, n_items, tiles_per_pair,
                    NT, KT, stride_wsn, stride_asm, stride_om, stride_os, STAGES: gl.constexpr, W_BN: gl.constexpr,
                    W_BK: gl.constexpr, PAIRS: gl.constexpr, LANES: gl.constexpr = 1, PDL: gl.constexpr = False,
                    NEXT_LAUNCH: gl.constexpr = 0):
    """Persistent: program p takes work items p, p + programs, ... (an item: a 64-row tile x one K split) and
    writes OUT[split][token, row] = sum over the split's K range of A[token] W[row] with both operands'
    block scales. WS: the weight's E8M0 scales, per 32 inputs as int32 words (four blocks a word) or per 128
    as bytes (W_BK), ``stride_wsn`` in those; AS: the activations' fp32 scales per 32 inputs. PAIRS: pair r
    (M = 1) is OUT[split][r] = A[AROW[r]] W_EXPERT[r]^T, N and the scale rows per expert, NT / KT its 128-row
    and 128-input tiles. LANES 2: two warpgroups, each with its loader warp and a ring of STAGES slots, as
    ``bf16_gemv_kernel``'s. PDL: launched under programmatic dependent launch, each partition waits for the
    kernel before first; the next kernel may launch from the start (NEXT_LAUNCH 0), after each loader's last
    copy (1) or at the end (2). Weight scales as words (W_BK 32): each step's scales copied by the loader into the
    ring next to its tiles (cp.async, tracked by the step's ready barrier); as bytes (W_BK 128, pairs only)
    loaded by the warpgroup a step ahead."""
    _let_next_launch(PDL and NEXT_LAUNCH == 0)
    W_ROWS: gl.constexpr = w_desc.block_type.shape[0]
    T: gl.constexpr = a_desc.block_type.shape[0]
    # H200, session 24: a CSA layer's six dense GEMVs alone at M = 1 78.6 -> 69.0 us (one lane), 73.7 -> 68.3 (two)
    SCALES_IN_RING: gl.constexpr = W_BK == 32
    loader_regs: gl.constexpr = LOADER_REGS if SCALES_IN_RING else 24
    w0, a0, ready0, empty0 = _ring(w_desc, a_desc, STAGES)
    ws0, as0 = _scale_slots(STAGES, W_ROWS, T)
    if LANES == 1:
        gl.warp_specialize([
            (_gemv_products, (w0, a0, ready0, empty0, WS, AS, OUT, EXPERT, AROW, n_items, n_splits, k_per_split, K,
                              N, M, tiles_per_pair, stride_wsn, stride_asm, stride_om, stride_os, STAGES, W_BN, W_BK,
                              PAIRS, 0, 1, PDL, ws0, as0, SCALES_IN_RING)),
            (_gemv_loader, (w_desc, a_desc, w0, a0, ready0, empty0, EXPERT, AROW, n_items, n_splits, k_per_split,
                            K, tiles_per_pair, NT, KT, STAGES, PAIRS, 0, 0, 1, PDL, NEXT_LAUNCH, ws0, as0, WS, AS,
                            N, M, stride_wsn, stride_asm, W_BN, SCALES_IN_RING)),
        ], [1], [loader_regs])
    else:
        w1, a1, ready1, empty1 = _ring(w_desc, a_desc, STAGES)
        ws1, as1 = _scale_slots(STAGES, W_ROWS, T)
        gl.warp_specialize([
            (_gemv_products, (w0, a0, ready0, empty0, WS, AS, OUT, EXPERT, AROW, n_items, n_splits, k_per_split, K,
                              N, M, tiles_per_pair, stride_wsn, stride_asm, stride_om, stride_os, STAGES, W_BN, W_BK,
                              PAIRS, 0, 2, PDL, ws0, as0, SCALES_IN_RING)),
            (_gemv_products, (w1, a1, ready1, empty1, WS, AS, OUT, EXPERT, AROW, n_items, n_splits, k_per_split, K,
                              N, M, tiles_per_pair, stride_wsn, stride_asm, stride_om, stride_os, STAGES, W_BN, W_BK,
                              PAIRS, 1, 2, PDL, ws1, as1, SCALES_IN_RING)),
            (_gemv_loader, (w_desc, a_desc, w0, a0, ready0, empty0, EXPERT, AROW, n_items, n_splits, k_per_split,
                            K, tiles_per_pair, NT, KT, STAGES, PAIRS, 0, 0, 2, PDL, NEXT_LAUNCH, ws0, as0, WS, AS,
                            N, M, stride_wsn, stride_asm, W_BN, SCALES_IN_RING)),
            (_gemv_loader, (w_desc, a_desc, w1, a1, ready1, empty1, EXPERT, AROW, n_items, n_splits, k_per_split,
                            K, tiles_per_pair, NT, KT, STAGES, PAIRS, 0, 1, 2, PDL, NEXT_LAUNCH, ws1, as1, WS, AS,
                            N, M, stride_wsn, stride_asm, W_BN, SCALES_IN_RING)),
        ], [4, 1, 1], [224, loader_regs, loader_regs])


@gluon.jit
def _bf16_step(acc, w_smem, a_smem, ws_smem, ready, empty, g, STAGES: gl.constexpr, w_layout: gl.constexpr):
    """acc plus the program's step g: the [64, 128] E4M3 weight tile read from shared memory in four 32-input
    slices, each times its rows' E8M0 block scale (from the step's scale words in the ring) and rounded to bf16
    in registers (the bf16 path's values: ``dequant_bf16``'s, exact), as wgmma's register operand against the
    bf16 activation slice, in K order."""
    s = g % STAGES
    mbarrier.wait(ready.index(s), (g // STAGES) & 1)
    words = ws_smem.index(s).load(gl.SliceLayout(1, w_layout))
    w_tile = w_smem.index(s)
    a_tile = a_smem.index(s)
    for j in gl.static_range(4):
        w = w_tile.slice(32 * j, 32, dim=1).load(w_layout)
        wb = (w.to(gl.float32) * gl.expand_dims(_block_scale(words, j), 1)).to(gl.bfloat16)
        acc = warpgroup_mma(wb, a_tile.slice(32 * j, 32, dim=1).permute((1, 0)), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    mbarrier.arrive(empty.index(s), count=1)
    return acc


@gluon.jit
def _bf16_products(w_smem, a_smem, ws_smem, ready, empty, OUT, n_items, n_splits, k_per_split, K, N, M, stride_om,
                   stride_os, STAGES: gl.constexpr, LANE: gl.constexpr, LANES: gl.constexpr, PDL: gl.constexpr):
    """A warpgroup of ``bf16_gemv_kernel``: ``_bf16_step`` over the K range of each item of its lane, the
    products accumulated in fp32."""
    _wait_for_previous(PDL)
    W_ROWS: gl.constexpr = w_smem.type.shape[1]
    T: gl.constexpr = a_smem.type.shape[1]
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, T, 16])
    w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    tiles = gl.cdiv(N, W_ROWS)
    g = 0  # the ring's position, as the loader's
    for item in range(gl.program_id(0) + LANE * gl.num_programs(0), n_items, gl.num_programs(0) * LANES):
        _, row0, split, k0, k_steps = _item(item, n_splits, k_per_split, K, tiles, W_ROWS)
        acc = gl.zeros((W_ROWS, T), dtype=gl.float32, layout=mma_layout)
        for i in range(k_steps):  # the loader copies each step's words into the ring with its tiles
            acc = _bf16_step(acc, w_smem, a_smem, ws_smem, ready, empty, g + i, STAGES, w_layout)
        g += k_steps
        _store_tile(acc, OUT, row0, 0, split, N, M, stride_om, stride_os)


@gluon.jit
def bf16_gemv_kernel(w_desc, a_desc, WS, OUT, N, M, K, k_per_split, n_splits, n_items, stride_wsn, stride_om,
                     stride_os, STAGES: gl.constexpr, W_BN: gl.constexpr, GROUP_ROWS: gl.constexpr,
                     LANES: gl.constexpr, PDL: gl.constexpr = False, NEXT_LAUNCH: gl.constexpr = 0):
    """Persistent, as ``fp8_gemv_kernel``: OUT[split][token, row] = sum over the split's K range of A[token]
    (bf16, not quantized) times the weight row converted to bf16 with its [W_BN, 32] E8M0 block scales (int32
    words: four blocks a 128-input step, copied by the loader into the ring with the step's tiles). GROUP_ROWS
    > 0: a grouped weight (wo_a), rows g GROUP_ROWS .. read activation inputs g K .. (g + 1) K - 1 (A as
    [tokens, groups x K]).

    LANES 2 or 4: that many warpgroups, each with its loader warp and a ring of STAGES slots; of P programs,
    program p's lane l takes items p + l P, p + (l + LANES) P, ... The conversion to bf16 holds one warpgroup to
    ~0.7 us a step against ~0.26 us for the step's copies (session 21): a second one converts while the first
    waits; four gain little more (the SM's issue rate bounds the conversion; session 26). PDL, NEXT_LAUNCH: as
    ``fp8_gemv_kernel``'s."""
    _let_next_launch(PDL and NEXT_LAUNCH == 0)
    W_ROWS: gl.constexpr = w_desc.block_type.shape[0]
    T: gl.constexpr = a_desc.block_type.shape[0]
    tiles = gl.cdiv(N, W_ROWS)
    w0, a0, ready0, empty0 = _ring(w_desc, a_desc, STAGES)
    ws0, as0 = _scale_slots(STAGES, W_ROWS, T)  # the activation slots unused (bf16 activations have no scales)
    if LANES == 1:
        gl.warp_specialize([
            (_bf16_products, (w0, a0, ws0, ready0, empty0, OUT, n_items, n_splits, k_per_split, K, N, M, stride_om,
                              stride_os, STAGES, 0, 1, PDL)),
            (_gemv_loader, (w_desc, a_desc, w0, a0, ready0, empty0, WS, WS, n_items, n_splits, k_per_split, K,
                            tiles, 1, 1, STAGES, False, GROUP_ROWS, 0, 1, PDL, NEXT_LAUNCH, ws0, as0, WS, WS, N, M,
                            stride_wsn, 0, W_BN, True, False)),
        ], [1], [LOADER_REGS])
    elif LANES == 2:
        w1, a1, ready1, empty1 = _ring(w_desc, a_desc, STAGES)
        ws1, as1 = _scale_slots(STAGES, W_ROWS, T)
        gl.warp_specialize([
            (_bf16_products, (w0, a0, ws0, ready0, empty0, OUT, n_items, n_splits, k_per_split, K, N, M, stride_om,
                              stride_os, STAGES, 0, 2, PDL)),
            (_bf16_products, (w1, a1, ws1, ready1, empty1, OUT, n_items, n_splits, k_per_split, K, N, M, stride_om,
                              stride_os, STAGES, 1, 2, PDL)),
            (_gemv_loader, (w_desc, a_desc, w0, a0, ready0, empty0, WS, WS, n_items, n_splits, k_per_split, K,
                            tiles, 1, 1, STAGES, False, GROUP_ROWS, 0, 2, PDL, NEXT_LAUNCH, ws0, as0, WS, WS, N, M,
                            stride_wsn, 0, W_BN, True, False)),
            (_gemv_loader, (w_desc, a_desc, w1, a1, ready1, empty1, WS, WS, n_items, n_splits, k_per_split, K,
                            tiles, 1, 1, STAGES, False, GROUP_ROWS, 1, 2, PDL, NEXT_LAUNCH, ws1, as1, WS, WS, N, M,
                            stride_wsn, 0, W_BN, True, False)),
        # registers a thread: the CTA's 64K hold the first warpgroup at 256, the second at 224 and the loaders
        # (with the two warps Triton pads them with) at LOADER_REGS; ptxas then launches the 12 warps at 168 each
        ], [4, 1, 1], [224, LOADER_REGS, LOADER_REGS])
    else:  # LANES 4: four warpgroups, each with its loader warp and ring (16 product warps + 4 loaders: the 64K
        # registers hold ~104 a thread)
        w1, a1, ready1, empty1 = _ring(w_desc, a_desc, STAGES)
        ws1, as1 = _scale_slots(STAGES, W_ROWS, T)
        w2, a2, ready2, empty2 = _ring(w_desc, a_desc, STAGES)
        ws2, as2 = _scale_slots(STAGES, W_ROWS, T)
        w3, a3, ready3, empty3 = _ring(w_desc, a_desc, STAGES)
        ws3, as3 = _scale_slots(STAGES, W_ROWS, T)
        gl.warp_specialize([
            (_bf16_products, (w0, a0, ws0, ready0, empty0, OUT, n_items, n_splits, k_per_split, K, N, M, stride_om,
                              stride_os, STAGES, 0, 4, PDL)),
            (_bf16_products, (w1, a1, ws1, ready1, empty1, OUT, n_items, n_splits, k_per_split, K, N, M, stride_om,
                              stride_os, STAGES, 1, 4, PDL)),
            (_bf16_products, (w2, a2, ws2, ready2, empty2, OUT, n_items, n_splits, k_per_split, K, N, M, stride_om,
                              stride_os, STAGES, 2, 4, PDL)),
            (_bf16_products, (w3, a3, ws3, ready3, empty3, OUT, n_items, n_splits, k_per_split, K, N, M, stride_om,
                              stride_os, STAGES, 3, 4, PDL)),
            (_gemv_loader, (w_desc, a_desc, w0, a0, ready0, empty0, WS, WS, n_items, n_splits, k_per_split, K,
                            tiles, 1, 1, STAGES, False, GROUP_ROWS, 0, 4, PDL, NEXT_LAUNCH, ws0, as0, WS, WS, N, M,
                            stride_wsn, 0, W_BN, True, False)),
            (_gemv_loader, (w_desc, a_desc, w1, a1, ready1, empty1, WS, WS, n_items, n_splits, k_per_split, K,
                            tiles, 1, 1, STAGES, False, GROUP_ROWS, 1, 4, PDL, NEXT_LAUNCH, ws1, as1, WS, WS, N, M,
                            stride_wsn, 0, W_BN, True, False)),
            (_gemv_loader, (w_desc, a_desc, w2, a2, ready2, empty2, WS, WS, n_items, n_splits, k_per_split, K,
                            tiles, 1, 1, STAGES, False, GROUP_ROWS, 2, 4, PDL, NEXT_LAUNCH, ws2, as2, WS, WS, N, M,
                            stride_wsn, 0, W_BN, True, False)),
            (_gemv_loader, (w_desc, a_desc, w3, a3, ready3, empty3, WS, WS, n_items, n_splits, k_per_split, K,
                            tiles, 1, 1, STAGES, False, GROUP_ROWS, 3, 4, PDL, NEXT_LAUNCH, ws3, as3, WS, WS, N, M,
                            stride_wsn, 0, W_BN, True, False)),
        ], [4, 4, 4, 1, 1, 1, 1], [FOUR_LANE_REGS, FOUR_LANE_REGS, FOUR_LANE_REGS, LOADER_REGS, LOADER_REGS,
                                   LOADER_REGS, LOADER_REGS])
