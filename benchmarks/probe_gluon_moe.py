"""Session 14 probe (prepared, not yet run on a GPU): the MoE's bf16-path grouped GEMM as a warp-specialized
Gluon kernel for Hopper, to find out whether overlapping the weight conversion with the products lifts it from
~250 TFLOP/s (BENCHMARKS.md session 14: the Triton loop is bound by its structure -- the weight tile goes smem ->
registers -> smem, then a wgmma the next step waits for -- not by the conversion's instructions).

Partitions of one program (a 128-row tile of one expert x 128 weight rows):
- loader (1 warp): TMA loads of the activation tile (bf16, rows gathered beforehand) and the E4M3 weight tile
  (``quant.to_e4m3_tiles``' 128 x 128 tiles, one per K step) into a ring of STAGES slots;
- converter (4 warps): each E4M3 tile to bf16 times its (1, 128) block's scale -- the bf16 path's values -- into a
  second ring;
- default (4 warps): async wgmma from the two rings, one product in flight while the next is prepared; the
  epilogue stores the tile's rows.
Each output element sums the same exact products in the same K order as the bf16 path, so the same bits are
expected (checked below, with the speed, against ``triton_fp8_gemm.gemm(..., kstep=128)``).

    PYTHONPATH=. python benchmarks/probe_gluon_moe.py
``--compile-only`` compiles for sm_90 with Triton 3.6 and no GPU (session 14: 164 KB of shared
memory, 168 registers at most, no spills; the partitions get 256 / 24 / 160 registers through setmaxnreg).
"""

from __future__ import annotations

import argparse
import json

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, \
    warpgroup_mma_wait

STAGES = 2
BLOCK = 128  # rows of a tile, weight rows of a tile, K of a step (the E4M3 tiles' side)


@gluon.jit
def _loader(a_desc, w_desc, a_smem, w8_smem, a_ready, w8_ready, a_empty, w8_empty, row0, w_row0, k_steps,
            STAGES: gl.constexpr):
    for kb in range(k_steps):
        s = kb % STAGES
        free = ((kb // STAGES) & 1) ^ 1  # a slot starts free: the first wait on phase 1 passes
        mbarrier.wait(a_empty.index(s), free)
        mbarrier.expect(a_ready.index(s), a_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(a_desc, [row0, kb * 128], a_ready.index(s), a_smem.index(s))
        mbarrier.wait(w8_empty.index(s), free)
        mbarrier.expect(w8_ready.index(s), w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [w_row0 + kb * 128, 0], w8_ready.index(s), w8_smem.index(s))


@gluon.jit
def _converter(WS, w8_smem, wb_smem, w8_ready, w8_empty, wb_ready, wb_empty, scale_row0, stride_wsn, n_valid,
               k_steps, STAGES: gl.constexpr, BLOCK_N: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    for kb in range(k_steps):
        s = kb % STAGES
        phase = (kb // STAGES) & 1
        mbarrier.wait(w8_ready.index(s), phase)
        w = w8_smem.index(s).load(layout)
        mbarrier.arrive(w8_empty.index(s), count=1)
        e8m0 = gl.load(WS + scale_row0 + rows.to(gl.int64) * stride_wsn + kb, mask=rows < n_valid, other=0)
        sw = (e8m0.to(gl.int32) << 23).to(gl.float32, bitcast=True)
        wb = (w.to(gl.float32) * gl.expand_dims(sw, 1)).to(gl.bfloat16)
        mbarrier.wait(wb_empty.index(s), phase ^ 1)
        wb_smem.index(s).store(wb)
        fence_async_shared()
        mbarrier.arrive(wb_ready.index(s), count=1)


@gluon.jit
def _mma(a_smem, wb_smem, a_ready, wb_ready, a_empty, wb_empty, OUT, row0, row1, col0, N, stride_om, k_steps,
         STAGES: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, num_warps: gl.constexpr):
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BLOCK_N, 16])
    acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout)
    for kb in range(k_steps):
        s = kb % STAGES
        phase = (kb // STAGES) & 1
        mbarrier.wait(a_ready.index(s), phase)
        mbarrier.wait(wb_ready.index(s), phase)
        acc = warpgroup_mma(a_smem.index(s), wb_smem.index(s).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        if kb > 0:  # the previous step's product is done: its slots are free
            p = (kb - 1) % STAGES
            mbarrier.arrive(a_empty.index(p), count=1)
            mbarrier.arrive(wb_empty.index(p), count=1)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma_layout))
    cols = col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
    mask = gl.expand_dims(rows < row1, 1) & gl.expand_dims(cols < N, 0)
    ptrs = OUT + gl.expand_dims(rows.to(gl.int64) * stride_om, 1) + gl.expand_dims(cols, 0)
    gl.store(ptrs, acc.to(gl.bfloat16), mask=mask)


@gluon.jit
def _barriers(STAGES: gl.constexpr):
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    return bars


@gluon.jit
def moe_bf16_ws_kernel(a_desc, w_desc, WS, OUT, TILE_EXPERT, TILE_ROW0, TILE_ROW1, N, K, stride_wse, stride_wsn,
                       stride_om, STAGES: gl.constexpr, num_warps: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    pid_n = gl.program_id(0)
    pid_m = gl.program_id(1)
    expert = gl.load(TILE_EXPERT + pid_m)
    if expert >= 0:
        row0 = gl.load(TILE_ROW0 + pid_m)
        row1 = gl.load(TILE_ROW1 + pid_m)
        k_steps = K // 128
        n_tiles = gl.cdiv(N, BLOCK_N)
        w_row0 = ((expert * n_tiles + pid_n) * k_steps) * 128  # quant.to_e4m3_tiles' tile rows (TMA: int32)
        scale_row0 = expert.to(gl.int64) * stride_wse + pid_n.to(gl.int64) * BLOCK_N * stride_wsn
        a_smem = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, 128], a_desc.layout)
        w8_smem = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BLOCK_N, 128], w_desc.layout)
        wb_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 128], gl.bfloat16)
        wb_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, 128], wb_layout)
        a_ready = _barriers(STAGES)
        w8_ready = _barriers(STAGES)
        wb_ready = _barriers(STAGES)
        a_empty = _barriers(STAGES)
        w8_empty = _barriers(STAGES)
        wb_empty = _barriers(STAGES)
        gl.warp_specialize([
            (_mma, (a_smem, wb_smem, a_ready, wb_ready, a_empty, wb_empty, OUT, row0, row1, pid_n * BLOCK_N, N,
                    stride_om, k_steps, STAGES, BLOCK_M, BLOCK_N, num_warps)),
            (_loader, (a_desc, w_desc, a_smem, w8_smem, a_ready, w8_ready, a_empty, w8_empty, row0, w_row0, k_steps,
                       STAGES)),
            (_converter, (WS, w8_smem, wb_smem, w8_ready, w8_empty, wb_ready, wb_empty, scale_row0, stride_wsn,
                          N - pid_n * BLOCK_N, k_steps, STAGES, BLOCK_N)),
        ], [1, 4], [24, 160])


def compile_offline() -> None:
    """Compile for sm_90 without a GPU (Triton 3.6's ptxas) and print what it takes."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    fn = moe_bf16_ws_kernel
    names = list(fn.arg_names)
    a_layout = gl.NVMMASharedLayout.get_default_for([BLOCK, 128], gl.bfloat16)
    w_layout = gl.NVMMASharedLayout.get_default_for([BLOCK, 128], gl.float8e4nv)
    sig = {"a_desc": f"tensordesc<bf16[128,128],{a_layout!r}>", "w_desc": f"tensordesc<fp8e4nv[128,128],{w_layout!r}>",
           "WS": "*u8", "OUT": "*bf16", "TILE_EXPERT": "*i32", "TILE_ROW0": "*i32", "TILE_ROW1": "*i32", "N": "i32",
           "K": "i32", "stride_wse": "i32", "stride_wsn": "i32", "stride_om": "i32", "STAGES": "constexpr",
           "num_warps": "constexpr"}
    const = {"STAGES": STAGES, "num_warps": 4}
    divisible = ("WS", "OUT", "TILE_EXPERT", "TILE_ROW0", "TILE_ROW1", "K", "stride_wse", "stride_wsn", "stride_om")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    src = GluonASTSource(fn, sig, constexprs={(names.index(k),): v for k, v in const.items()}, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = compiled.asm["ptx"]
    print(f"compiled for sm_90: shared memory {compiled.metadata.shared} bytes, "
          f"{ptx.count('wgmma.mma_async')} wgmma and {ptx.count('cvt.rn.f16x2.e4m3x2')} E4M3 pair conversions in the PTX")


def gluon_gemm(a_sorted: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, groups, out: torch.Tensor):
    """A callable running ``moe_bf16_ws_kernel``: ``a_sorted`` [rows, K] bf16 in the groups' row order, ``weight``
    E4M3 in ``quant.to_e4m3_tiles``' tiles with E8M0 scales per (1, 128), ``groups`` 128-row tiles."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from deepinfer_adapters.model_impl.quant import expert_matrix

    N, K = expert_matrix(weight)
    a_layout = gl.NVMMASharedLayout.get_default_for([BLOCK, 128], gl.bfloat16)
    w_layout = gl.NVMMASharedLayout.get_default_for([BLOCK, 128], gl.float8e4nv)
    a_desc = TensorDescriptor(a_sorted, list(a_sorted.shape), list(a_sorted.stride()), [BLOCK, 128], a_layout)
    w2d = weight.view(-1, 128)
    w_desc = TensorDescriptor(w2d, list(w2d.shape), list(w2d.stride()), [BLOCK, 128], w_layout)
    ws = scale.view(torch.uint8)
    grid = (triton.cdiv(N, BLOCK), groups.expert.numel())
    return lambda: moe_bf16_ws_kernel[grid](a_desc, w_desc, ws, out, groups.expert, groups.row0, groups.row1, N, K,
                                            ws.stride(0), ws.stride(1), out.stride(0), STAGES=STAGES, num_warps=4)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--compile-only", action="store_true", help="compile for sm_90 offline, no GPU")
    args = ap.parse_args()
    if args.compile_only:
        compile_offline()
        return
    from benchmarks.bench_moe_blocks import ACT_BLOCK, D, E, TOPK, experts
    from benchmarks.timing import run_info, time_eager
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg
    from deepinfer_adapters.kernels import triton_moe as tm
    from deepinfer_adapters.model_impl.quant import expert_matrix, is_e4m3_tiles

    print(f"INFO {json.dumps(run_info())}", flush=True)
    mod = experts(128)
    assert is_e4m3_tiles(mod.w13) and is_e4m3_tiles(mod.w2)
    T = args.tokens
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    ids = torch.rand(T, E, device="cuda", generator=g).topk(TOPK, dim=-1).indices
    rows = T * TOPK
    _, tiles, _ = tm.route(ids, E, BLOCK)
    plain_rows = tg.Groups(tiles.expert, tiles.row0, tiles.row1)
    xa = tg.act_quant(x, ACT_BLOCK, dequant_to=torch.bfloat16)[0]
    I = expert_matrix(mod.w2)[1]
    ha = (torch.randn(rows, I, device="cuda", generator=g) * 0.1).bfloat16()  # w2's input, already in pair order
    cases = {  # name: (the bf16 path's A and groups, the gathered A, weight, scale)
        "w13": (xa, tiles, xa[tiles.row_idx.long()], mod.w13, mod.w13_scale),
        "w2": (ha, plain_rows, ha, mod.w2, mod.w2_scale),
    }
    for name, (a, groups, a_sorted, weight, scale) in cases.items():
        N, K = expert_matrix(weight)
        bf16 = lambda: tg.gemm(a, None, 0, weight, scale, (1, 128), torch.bfloat16, rows=rows,  # noqa: E731
                               groups=groups, config=tg.BF16_LARGE_CONFIG, kstep=128)
        ref = bf16()
        out = torch.zeros(rows, N, device="cuda", dtype=torch.bfloat16)
        run = gluon_gemm(a_sorted, weight, scale, tiles, out)
        run()
        print(f"gluon ws {name}: same bits as the bf16 path {torch.equal(out, ref)}, max abs diff "
              f"{(out.float() - ref.float()).abs().max().item():.3e}", flush=True)
        flops = 2 * rows * N * K
        for label, fn in (("bf16 path", bf16), ("gluon ws", run), ("bf16 path", bf16)):
            us = time_eager(fn, reps=10, warm=1)
            print(f"{name} {label}: {us:9.1f} us {flops / us / 1e6:6.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
