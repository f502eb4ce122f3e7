"""The MoE's bf16-path grouped GEMM for Hopper in Gluon (Triton's explicit dialect): imported only to launch
on an sm_90 GPU (``gluon_moe``). Design and measurements: ``gluon_moe``'s module doc.

One program: a 128-row tile of one expert's sorted rows (up to 32 more: the expert's last ones,
``gluon_moe.absorb_tails``) x 128 weight rows, K in 128-deep steps.
- loader (1 warp): TMA copies of the activation tile (bf16, rows already in sorted order) and the E4M3
  weight tile (one 16 KB tile of ``quant.to_e4m3_tiles`` a step) into a ring of STAGES slots;
- two warpgroups, each its own partition, each 64 of the weight rows: the E4M3 values times their (1, 128)
  block's E8M0 scale, to bf16 in registers (the bf16 path's values), as the register operand of wgmma
  (acc[weight rows, token rows]); the activation tile from shared memory as the other. One warpgroup
  converts its next step while the other's products run on the tensor cores.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

# Triton 3.6 (the GPU machine's) calls the TMA load async_copy_global_to_shared; later releases async_load.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

@gluon.jit
def _barriers(STAGES: gl.constexpr, COUNT: gl.constexpr):
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=COUNT)
    return bars


@gluon.jit
def _loader(a_desc, t_desc, w_desc, a_smem, t_smem, w8_smem, a_ready, t_ready, w8_ready, a_empty, w8_empty, row0,
            w_row0, has_tail, k_steps, STAGES: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    for kb in range(k_steps):
        s = kb % STAGES
        free = ((kb // STAGES) & 1) ^ 1  # a slot starts free: the first wait on phase 1 passes
        mbarrier.wait(w8_empty.index(s), free)
        mbarrier.expect(w8_ready.index(s), w_desc.block_type.nbytes)
        _tma_load(w_desc, [w_row0 + kb * 128, 0], w8_ready.index(s), w8_smem.index(s))
        mbarrier.wait(a_empty.index(s), free)
        mbarrier.expect(a_ready.index(s), a_desc.block_type.nbytes)
        _tma_load(a_desc, [row0, kb * 128], a_ready.index(s), a_smem.index(s))
        mbarrier.expect(t_ready.index(s), t_desc.block_type.nbytes, pred=has_tail)
        _tma_load(t_desc, [row0 + BLOCK_M, kb * 128], t_ready.index(s), t_smem.index(s), pred=has_tail)


@gluon.jit
def _store(acc, OUT, trow0, row1, ncol0, N, stride_om):
    """acc[weight rows, token rows] into OUT[token row, column], 16-byte stores along the columns (the mma
    layout's would be 2-byte ones); token rows from row1 on and columns from N on left out. Also
    ``moe_fp8_kernel``'s, its acc[token rows, weight rows] permuted."""
    W: gl.constexpr = acc.shape[0]
    M: gl.constexpr = acc.shape[1]
    out_layout: gl.constexpr = gl.BlockedLayout([8, 1], [8, 4], [1, 4], [0, 1])
    res = gl.convert_layout(acc.to(OUT.dtype.element_ty), out_layout)
    ncols = ncol0 + gl.arange(0, W, layout=gl.SliceLayout(1, out_layout))
    trows = trow0 + gl.arange(0, M, layout=gl.SliceLayout(0, out_layout))
    mask = gl.expand_dims(ncols < N, 1) & gl.expand_dims(trows < row1, 0)
    ptrs = OUT + gl.expand_dims(trows.to(gl.int64) * stride_om, 0) + gl.expand_dims(ncols, 1)
    gl.store(ptrs, res, mask=mask)


@gluon.jit
def _products(a_smem, t_smem, w8_smem, a_ready, t_ready, w8_ready, a_empty, w8_empty, WS, scale_row0, stride_wsn,
              n_valid, OUT, row0, row1, has_tail, col0, N, stride_om, k_steps, STAGES: gl.constexpr,
              ROW_OFF: gl.constexpr):
    """The warpgroup of weight rows ROW_OFF .. ROW_OFF + 64. (The two warpgroups issuing each step's products in
    turn, one converting while the other's products run: the same bits, within the run's noise -- w13 4.95-5.12
    against 4.77-5.35 ms, w2 2.79-2.83 against 2.77-3.10, session 32, part s32c; removed.)"""
    BLOCK_M: gl.constexpr = a_smem.type.shape[1]
    TAIL: gl.constexpr = t_smem.type.shape[1]
    HALF: gl.constexpr = w8_smem.type.shape[1] // 2
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BLOCK_M, 16])
    tail_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, TAIL, 16])
    w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    wt_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=tail_layout, k_width=2)
    rows = ROW_OFF + gl.arange(0, HALF, layout=gl.SliceLayout(1, w_layout))
    srow = WS + scale_row0 + rows.to(gl.int64) * stride_wsn
    smask = rows < n_valid
    acc = gl.zeros((HALF, BLOCK_M), dtype=gl.float32, layout=mma_layout)
    acc_t = gl.zeros((HALF, TAIL), dtype=gl.float32, layout=tail_layout)
    e8m0 = gl.load(srow, mask=smask, other=0)
    for kb in range(k_steps):
        s = kb % STAGES
        phase = (kb // STAGES) & 1
        sw = (e8m0.to(gl.int32) << 23).to(gl.float32, bitcast=True)
        e8m0 = gl.load(srow + kb + 1, mask=smask & (kb + 1 < k_steps), other=0)  # the next step's, ahead
        mbarrier.wait(w8_ready.index(s), phase)
        w = w8_smem.index(s).slice(ROW_OFF, HALF).load(w_layout)
        mbarrier.arrive(w8_empty.index(s), count=1)
        wb = (w.to(gl.float32) * gl.expand_dims(sw, 1)).to(gl.bfloat16)
        mbarrier.wait(a_ready.index(s), phase)
        acc = warpgroup_mma(wb, a_smem.index(s).permute((1, 0)), acc, is_async=True)
        if has_tail:  # the expert's last few rows, with the same converted weights
            mbarrier.wait(t_ready.index(s), phase)
            acc_t = warpgroup_mma(gl.convert_layout(wb, wt_layout), t_smem.index(s).permute((1, 0)), acc_t)
        # Waited for before the next conversion: with a product in flight ptxas serializes every wgmma
        # (C7514 / C7515: the register operand), unrolled or not. The other warpgroup fills the gap.
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(a_empty.index(s), count=1)
    _store(acc, OUT, row0, row1, col0 + ROW_OFF, N, stride_om)
    if has_tail:
        _store(acc_t, OUT, row0 + BLOCK_M, row1, col0 + ROW_OFF, N, stride_om)


@gluon.jit
def moe_bf16_kernel(a_desc, t_desc, w_desc, WS, OUT, TILE_EXPERT, TILE_ROW0, TILE_ROW1, N, K, stride_wse,
                    stride_wsn, stride_om, STAGES: gl.constexpr):
    """A tile covers up to BLOCK_M + TAIL rows (``t_desc``' box: TAIL rows): the rows past the first BLOCK_M
    take a second, narrower product with the same converted weights, so an expert's few extra rows do not
    cost a tile of their own (``gluon_moe.absorb_tails``)."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    TAIL: gl.constexpr = t_desc.block_type.shape[0]
    W_ROWS: gl.constexpr = w_desc.block_type.shape[0]
    pid_n = gl.program_id(0)
    pid_m = gl.program_id(1)
    expert = gl.load(TILE_EXPERT + pid_m)
    if expert >= 0:
        row0 = gl.load(TILE_ROW0 + pid_m)
        row1 = gl.load(TILE_ROW1 + pid_m)
        # row1: the expert's last row + 1 (triton_moe.route); a tile carries the rest of its expert where that
        # fits in TAIL more rows (gluon_moe.absorb_tails idles the tile that would otherwise take them)
        has_tail = (row1 - row0 > BLOCK_M) & (row1 - row0 <= BLOCK_M + TAIL)
        k_steps = K // 128
        n_tiles = gl.cdiv(N, W_ROWS)
        w_row0 = ((expert * n_tiles + pid_n) * k_steps) * 128  # the tile's first row in the [-1, 128] view
        scale_row0 = expert.to(gl.int64) * stride_wse + pid_n.to(gl.int64) * W_ROWS * stride_wsn
        a_smem = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, 128], a_desc.layout)
        t_smem = gl.allocate_shared_memory(t_desc.dtype, [STAGES, TAIL, 128], t_desc.layout)
        w8_smem = gl.allocate_shared_memory(w_desc.dtype, [STAGES, W_ROWS, 128], w_desc.layout)
        a_ready = _barriers(STAGES, 1)
        t_ready = _barriers(STAGES, 1)
        w8_ready = _barriers(STAGES, 1)
        a_empty = _barriers(STAGES, 2)  # one arrival a warpgroup
        w8_empty = _barriers(STAGES, 2)
        n_valid = N - pid_n * W_ROWS
        col0 = pid_n * W_ROWS
        gl.warp_specialize([
            (_products, (a_smem, t_smem, w8_smem, a_ready, t_ready, w8_ready, a_empty, w8_empty, WS,
                         scale_row0, stride_wsn, n_valid, OUT, row0, row1, has_tail, col0, N, stride_om, k_steps,
                         STAGES, 0)),
            (_products, (a_smem, t_smem, w8_smem, a_ready, t_ready, w8_ready, a_empty, w8_empty, WS,
                         scale_row0, stride_wsn, n_valid, OUT, row0, row1, has_tail, col0, N, stride_om, k_steps,
                         STAGES, W_ROWS // 2)),
            (_loader, (a_desc, t_desc, w_desc, a_smem, t_smem, w8_smem, a_ready, t_ready, w8_ready, a_empty,
                       w8_empty, row0, w_row0, has_tail, k_steps, STAGES)),
        ], [4, 1], [232, 24])
