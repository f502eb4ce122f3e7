"""The MoE's prefill grouped GEMM on FP8 products for Hopper in Gluon: imported only to launch on an sm_90 GPU
(``gluon_moe.grouped_gemm_fp8``, whose doc says why and what it measured).

One program: a 128-row tile of one expert's sorted rows (up to 64 more: the expert's last ones,
``gluon_moe.absorb_tails``) x 128 weight rows, K in 128-deep steps.
- loader (1 warp): TMA copies of the step's E4M3 weight tile (one 16 KB tile of ``quant.to_e4m3_tiles``), its
  columns' fp32 weight scales (``gluon_moe.scale_steps``' layout; not with UNIFORM) and the 64-row groups of the
  E4M3 activation tile into a ring of STAGES slots;
- three warpgroups, each its own partition and its own 64 of the tile's rows (acc[token rows, weight rows]:
  tokens are wgmma's M, so a token row's activation scale is one register a thread): a step is four 32-deep FP8
  products of all 128 weight rows summed on the tensor cores' accumulator, straight from shared memory, then times
  the rows' scale and the columns' (1, 128) weight scales into the fp32 accumulator (``_products``), or with
  UNIFORM (experts with one scale per 128 x 128 tile) the tile's one scale. A group past the expert's last row takes
  no products.
``DROP`` takes work away for ``benchmarks/probe_moe_fp8_bounds.py`` only (0 in the model): bit 0, the loader refills
no slot after the first STAGES steps (the products on resident data: the warpgroups' side alone); bit 1, a step's sum
is added unscaled (the promotion's scales left out). Either gives wrong values.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from deepinfer_adapters.kernels.gluon_moe_jit import _barriers, _store, _tma_load

# registers a thread of the second and third product warpgroups: three warpgroups at 160, the loader warp (and
# Triton's padding warps) at 24 fit the SM's 64K
PRODUCT_REGS = gl.constexpr(160)


@gluon.jit
def _loader(a_desc, w_desc, s_desc, a_smem, w_smem, ws_smem, ready, t_ready, empty, row0, w_row0, s_row0, col0,
            has_tail, k_steps, STAGES: gl.constexpr, GROUPS: gl.constexpr, DROP: gl.constexpr,
            UNIFORM: gl.constexpr):
    HALF: gl.constexpr = a_desc.block_type.shape[0]
    for kb in range(k_steps):
        s = kb % STAGES
        free = ((kb // STAGES) & 1) ^ 1  # a slot starts free: the first wait on phase 1 passes
        mbarrier.wait(empty.index(s), free)
        # DROP bit 0 (the probe's resident data): past the first fill the slot is only handed back
        resident = ((DROP & 1) != 0) & (kb >= STAGES)
        load = ((DROP & 1) == 0) | (kb < STAGES)
        mbarrier.expect(ready.index(s), w_desc.block_type.nbytes + (GROUPS - 1) * a_desc.block_type.nbytes
                        + (0 if UNIFORM else s_desc.block_type.nbytes), pred=load)
        mbarrier.arrive(ready.index(s), pred=resident)
        _tma_load(w_desc, [w_row0 + kb * 128, 0], ready.index(s), w_smem.index(s), pred=load)
        # the step's weight scales, one a column: in the ring, as the products' registers could not hold 128
        # columns' pointers (ptxas spilled); with UNIFORM the products load their one scale a step themselves
        if not UNIFORM:
            _tma_load(s_desc, [s_row0 + kb, col0], ready.index(s), ws_smem.index(s), pred=load)
        # rows past the activations' end come as zeros; the next expert's rows are computed and not stored
        for h in gl.static_range(GROUPS - 1):
            _tma_load(a_desc, [row0 + h * HALF, kb * 128], ready.index(s), a_smem.index(GROUPS * s + h), pred=load)
        # the last group's rows (an expert's tail) only where the tile carries one, on a barrier of its own
        mbarrier.expect(t_ready.index(s), a_desc.block_type.nbytes, pred=has_tail & load)
        mbarrier.arrive(t_ready.index(s), pred=has_tail & resident)
        _tma_load(a_desc, [row0 + (GROUPS - 1) * HALF, kb * 128], t_ready.index(s),
                  a_smem.index(GROUPS * s + GROUPS - 1), pred=has_tail & load)


@gluon.jit
def _issue(a_tile, w_tile, acc, j: gl.constexpr, USE_ACC: gl.constexpr):
    """Issues acc (USE_ACC) plus the step's j-th 32-deep FP8 product of the group's rows and the weight tile."""
    b = w_tile.slice(32 * j, 32, dim=1).permute((1, 0))
    return warpgroup_mma(a_tile.slice(32 * j, 32, dim=1), b, acc, use_acc=USE_ACC, is_async=True)


@gluon.jit
def _column_scales(ws_slot, layout: gl.constexpr):
    """The step's fp32 weight scales, one a column, from its slot (the unswizzled row read as a flat one). (As E8M0
    bytes, converted here, they cost ~3 instructions a value: ~190 of a step's ~545, offline SASS, session 29.)"""
    row = ws_slot._reinterpret(gl.float32, [ws_slot.type.shape[1]], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    return gl.expand_dims(row.load(gl.SliceLayout(0, layout)), 0)


@gluon.jit
def _issue_step(a_smem, w_smem, p, s, GROUPS: gl.constexpr, H: gl.constexpr):
    """Issues slot s's four 32-deep products of warpgroup H's rows and the weight tile into p (its old value
    dropped)."""
    a_tile = a_smem.index(GROUPS * s + H)
    w_tile = w_smem.index(s)
    p = _issue(a_tile, w_tile, p, 0, False)
    for j in gl.static_range(1, 4):
        p = _issue(a_tile, w_tile, p, j, True)
    return p


@gluon.jit
def _wait_step(ready, t_ready, kb, STAGES: gl.constexpr, GROUPS: gl.constexpr, H: gl.constexpr):
    """Waits until step kb's slot holds its tiles (the tail group's too for the warpgroup that carries it)."""
    s = kb % STAGES
    mbarrier.wait(ready.index(s), (kb // STAGES) & 1)
    if H == GROUPS - 1:  # active only where the tile carries a tail
        mbarrier.wait(t_ready.index(s), (kb // STAGES) & 1)


@gluon.jit
def _promote(acc, p, a, ws_slot, layout: gl.constexpr):
    """acc + a step's sum p times its rows' scales a and its columns' weight scales."""
    return acc + p * (gl.expand_dims(a, 1) * _column_scales(ws_slot, layout))


@gluon.jit
def _promote_tile(acc, p, a, sw):
    """acc + a step's sum p times its rows' scales a and the tile's one weight scale sw (``UNIFORM``): one fp32
    multiply-add a value (``_promote`` takes two)."""
    return acc + p * gl.expand_dims(a * sw, 1)


@gluon.jit
def _products(a_smem, w_smem, ws_smem, ready, t_ready, empty, AS, WT, wt_row0, OUT, row0, row1, col0, N,
              stride_asm, stride_om, k_steps, STAGES: gl.constexpr, GROUPS: gl.constexpr, H: gl.constexpr,
              DROP: gl.constexpr, UNIFORM: gl.constexpr):
    """Warpgroup H: rows row0 + 64 H .. of the tile (none past row1: it then only hands the slots back).

    Activations with one scale a 128-deep step (``act_quant``'s ``scale_block``): a step is four 32-deep FP8
    products summed on the tensor cores' accumulator, then times the rows' and columns' scales into acc --
    DeepGEMM's promotion, 2 fp32 operations a value a step (session 29's per-32 scales, in a Horner chain of four
    scalings, took 5 and left the kernel issue-bound).

    One 128-wide product chain a step (session 31): the activations are read from shared memory once a step.
    Session 30's two 64-wide column halves (one half's sum scaled while the other's products ran) read them
    twice and were 5-11% slower (``probe_moe_fp8_bounds.py``, part s31e); with the halves pipelined over two
    steps a loop iteration (each half's next step issued before the other half was promoted: the same bits),
    3-5% faster than the halves alone. (Products left in flight across the loop's back edge made ptxas serialize
    them all, C7514, offline.)

    The warpgroups issue together: the tensor cores interleave their products, all finish at about the same time,
    and all promote at once. The promotion was the kernel's largest cost after the products (probe, session 32,
    part s32d: w13 3.73 ms, 2.86 with a step's sums added unscaled, 2.38 with that on resident data); UNIFORM's
    takes one multiply-add a value instead of two and no shared-memory loads: w13 3.10 against 3.84 ms, w2 1.84
    against 2.16, the same bits (part s32f). Taking turns did not pay: each warpgroup issuing after the previous
    one's issue (session 31's ping-pong, same bits) was 1-3% slower, and after the previous one's products were all
    but done (wgmma wait 1) 6% slower on w13 (part s32e): one warpgroup's chain of products alone runs the tensor
    cores at ~60% of three's (504 against ~800 TFLOP/s). Nor did less tensor work on the tail: a tail of <= 16 / 32
    rows as wgmma's N (two 64-weight-row halves x the tail's rows; the same bits) left w13 at 3.22 ms and the
    prefill at 99.64 against 97.76 (part s32h, code at a1adff8): the third warpgroup's products are not on the
    tile's critical path.

    Nor did starting them one product chain apart (warpgroup h's first step after h - 1's first products, then
    free, so that one promotes while the others' products run): w13 3.14 against 3.08 ms, the prefill 95.44 against
    95.14 (session 33, part s33a; code at 520a35d)."""
    HALF: gl.constexpr = a_smem.type.shape[1]
    W_ROWS: gl.constexpr = w_smem.type.shape[1]
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, W_ROWS, 32])
    trow0 = row0 + H * HALF
    if trow0 < row1:
        rows = trow0 + gl.arange(0, HALF, layout=gl.SliceLayout(1, mma_layout))
        # rows past row1 read the last row's scales (their results are not stored)
        arow = AS + gl.minimum(rows, row1 - 1).to(gl.int64) * stride_asm
        p = gl.zeros((HALF, W_ROWS), dtype=gl.float32, layout=mma_layout)
        acc = gl.zeros((HALF, W_ROWS), dtype=gl.float32, layout=mma_layout)
        for kb in range(k_steps):
            a = gl.load(arow + kb)  # loaded before the wait, its latency under it
            if UNIFORM:
                sw = gl.load(WT + wt_row0 + kb)
            s = kb % STAGES
            _wait_step(ready, t_ready, kb, STAGES, GROUPS, H)
            p = _issue_step(a_smem, w_smem, p, s, GROUPS, H)
            p = warpgroup_mma_wait(num_outstanding=0, deps=(p, ))
            if (DROP & 2) != 0:  # the probe's unscaled sums
                acc = acc + p
            elif UNIFORM:
                acc = _promote_tile(acc, p, a, sw)
            else:
                acc = _promote(acc, p, a, ws_smem.index(s), mma_layout)
            mbarrier.arrive(empty.index(s), count=1)
        # acc[token rows, weight rows] as [weight rows, token rows] (a relabelled layout) through the bf16
        # kernel's 16-byte stores (stores straight from the accumulator's layout, 4-byte ones, with the shared
        # memory so saved as a fifth ring slot: 4-11% slower, session 31)
        _store(gl.permute(acc, (1, 0)), OUT, trow0, row1, col0, N, stride_om)
    else:
        for kb in range(k_steps):
            s = kb % STAGES
            mbarrier.wait(ready.index(s), (kb // STAGES) & 1)
            mbarrier.arrive(empty.index(s), count=1)


@gluon.jit
def moe_fp8_kernel(a_desc, w_desc, s_desc, AS, WT, OUT, TILE_EXPERT, TILE_ROW0, TILE_ROW1, N, K, stride_asm,
                   stride_om, STAGES: gl.constexpr, DROP: gl.constexpr, UNIFORM: gl.constexpr):
    """Program (n tile, route tile): OUT[r, n tile's columns] = sum over K of A[r] W_expert^T with A's per-128
    scales AS (fp32 [rows, K / 128]) and the weight's (1, 128) scales (``s_desc``: fp32 [E K / 128, N], a step's
    columns in a row) for the tile's rows r in [row0, row1): its first 128, and up to 64 more (the
    expert's last rows, ``gluon_moe.absorb_tails``) on a third warpgroup. UNIFORM: the weight's scales are one per
    128 x 128 tile, WT (fp32 [E, N / 128, K / 128], ``gluon_moe.tile_scales``); s_desc is then not read."""
    HALF: gl.constexpr = a_desc.block_type.shape[0]
    W_ROWS: gl.constexpr = w_desc.block_type.shape[0]
    GROUPS: gl.constexpr = 3
    pid_n = gl.program_id(0)
    pid_m = gl.program_id(1)
    expert = gl.load(TILE_EXPERT + pid_m)
    if expert >= 0:
        row0 = gl.load(TILE_ROW0 + pid_m)
        # a route tile's row1 is its expert's end: the tile takes its 128 rows, or all where at most 64 more
        row1 = gl.load(TILE_ROW1 + pid_m)
        has_tail = (row1 - row0 > 2 * HALF) & (row1 - row0 <= GROUPS * HALF)
        row1 = gl.minimum(row1, row0 + gl.where(has_tail, GROUPS * HALF, 2 * HALF))
        k_steps = K // 128
        n_tiles = gl.cdiv(N, W_ROWS)
        w_row0 = ((expert * n_tiles + pid_n) * k_steps) * 128  # the tile's first row in the [-1, 128] view
        col0 = pid_n * W_ROWS
        wt_row0 = (expert * n_tiles + pid_n) * k_steps  # the tile's first step in WT
        a_smem = gl.allocate_shared_memory(a_desc.dtype, [GROUPS * STAGES, HALF, 128], a_desc.layout)
        w_smem = gl.allocate_shared_memory(w_desc.dtype, [STAGES, W_ROWS, 128], w_desc.layout)
        ws_smem = gl.allocate_shared_memory(s_desc.dtype, [STAGES, 1, W_ROWS], s_desc.layout)
        ready = _barriers(STAGES, 1)
        t_ready = _barriers(STAGES, 1)
        empty = _barriers(STAGES, GROUPS)  # one arrival a warpgroup
        gl.warp_specialize([
            (_products, (a_smem, w_smem, ws_smem, ready, t_ready, empty, AS, WT, wt_row0, OUT, row0, row1, col0, N,
                         stride_asm, stride_om, k_steps, STAGES, GROUPS, 0, DROP, UNIFORM)),
            (_products, (a_smem, w_smem, ws_smem, ready, t_ready, empty, AS, WT, wt_row0, OUT, row0, row1, col0, N,
                         stride_asm, stride_om, k_steps, STAGES, GROUPS, 1, DROP, UNIFORM)),
            (_products, (a_smem, w_smem, ws_smem, ready, t_ready, empty, AS, WT, wt_row0, OUT, row0, row1, col0, N,
                         stride_asm, stride_om, k_steps, STAGES, GROUPS, 2, DROP, UNIFORM)),
            (_loader, (a_desc, w_desc, s_desc, a_smem, w_smem, ws_smem, ready, t_ready, empty, row0, w_row0,
                       expert * k_steps, col0, has_tail, k_steps, STAGES, GROUPS, DROP, UNIFORM)),
        ], [4, 4, 1], [PRODUCT_REGS, PRODUCT_REGS, 24])
