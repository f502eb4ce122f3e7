"""Session 14 probe (temporary): why f16_gemm_kernel runs slower than the bf16 path on the same tiles."""
import torch
import triton
import triton.language as tl

from deepinfer_adapters.kernels.fp8_triton_jit import e4m3_step_ptr, tile_rows, weight_rows_ptr


@triton.jit
def probe_kernel(A, A_SCALE, W, W_SCALE, OUT, ROW_IDX, TILE_EXPERT, TILE_ROW0, TILE_ROW1, N, K,
                 stride_am, stride_we, stride_wn, stride_wse, stride_wsn, stride_om,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MODE: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    expert = tl.load(TILE_EXPERT + pid_m).to(tl.int64)
    if expert >= 0:
        rows, mask_m, a_rows = tile_rows(ROW_IDX, tl.load(TILE_ROW0 + pid_m), tl.load(TILE_ROW1 + pid_m), BLOCK_M, True)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = cols < N
        a_ptr = A + a_rows[:, None] * stride_am
        w_ptr = weight_rows_ptr(W, expert, stride_we, stride_wn, cols, pid_n, K, BLOCK_N, 128, 128, True)[None, :]
        ws_ptr = W_SCALE + expert * stride_wse + cols.to(tl.int64) * stride_wsn
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, K, 128):
            a = tl.load(a_ptr + (k0 + tl.arange(0, 128))[None, :], mask=mask_m[:, None], other=0.0)
            w = tl.load(e4m3_step_ptr(w_ptr, k0, 128, BLOCK_N, True), mask=mask_n[None, :], other=0.0)
            e = tl.load(ws_ptr + k0 // 128, mask=mask_n, other=0).to(tl.int32)
            if MODE == 0:  # fp16 convert, no shift
                wb = w.to(tl.float16)
            elif MODE == 1:  # fp16 convert and shift (as f16_gemm_kernel)
                step = ((e - 120 + 127) << 23).to(tl.float32, bitcast=True).to(tl.float16)
                wb = w.to(tl.float16) * step[None, :]
            elif MODE == 2:  # through fp32, to fp16
                wb = (w.to(tl.float32) * ((e - 120 + 127) << 23).to(tl.float32, bitcast=True)[None, :]).to(tl.float16)
            else:  # bf16 as the bf16 path (A must be bf16)
                wb = (w.to(tl.float32) * ((e) << 23).to(tl.float32, bitcast=True)[None, :]).to(tl.bfloat16)
            acc = tl.dot(a, wb, acc)
        out = acc * tl.load(A_SCALE + a_rows, mask=mask_m, other=0.0)[:, None]
        tl.store(OUT + rows.to(tl.int64)[:, None] * stride_om + cols[None, :], out.to(OUT.dtype.element_ty),
                 mask=mask_m[:, None] & mask_n[None, :])


def main():
    from benchmarks.bench_moe_blocks import ACT_BLOCK, D, E, TOPK, experts
    from benchmarks.timing import time_eager
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg
    from deepinfer_adapters.kernels import triton_moe as tm

    mod = experts(128)
    T = 8192
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    ids = torch.rand(T, E, device="cuda", generator=g).topk(TOPK, dim=-1).indices
    N = tg.expert_matrix(mod.w13)[0]
    flops = 2 * T * TOPK * N * D
    bad = torch.zeros(1, device="cuda", dtype=torch.int32)
    a16, s16 = tg.f16_rows(*tg.act_quant(x, ACT_BLOCK), ACT_BLOCK, bad)
    xa = tg.act_quant(x, ACT_BLOCK, dequant_to=torch.bfloat16)[0]
    w, ws = mod.w13, mod.w13_scale.view(torch.uint8)
    print("tiles", tg.is_e4m3_tiles(w) if hasattr(tg, "is_e4m3_tiles") else "?", tuple(w.shape), flush=True)
    for bm, warps, stages in ((128, 8, 3), (64, 4, 3), (128, 8, 2)):
        _, tiles, _ = tm.route(ids, E, bm)
        out = torch.empty(T * TOPK, N, device="cuda", dtype=torch.bfloat16)
        for mode in (0, 1, 2, 3):
            a = xa if mode == 3 else a16
            call = lambda: probe_kernel[(tiles.expert.numel(), N // 128)](  # noqa: E731
                a, s16, w, ws, out, tiles.row_idx, tiles.expert, tiles.row0, tiles.row1, N, D,
                a.stride(0), w.stride(0), 0, ws.stride(0), ws.stride(1), out.stride(0),
                BLOCK_M=bm, BLOCK_N=128, MODE=mode, num_warps=warps, num_stages=stages)
            us = time_eager(call, reps=10, warm=1)
            print(f"m{bm} w{warps} p{stages} mode {mode}: {us:9.1f} us {flops / us / 1e6:5.0f} TFLOP/s", flush=True)
        gemm = lambda: tg.gemm(xa, None, 0, mod.w13, mod.w13_scale, (1, 128), torch.bfloat16, rows=T * TOPK,  # noqa
                               groups=tiles, config=tg.GemmConfig(bm, 128, 1, warps, stages), kstep=128)
        us = time_eager(gemm, reps=10, warm=1)
        print(f"m{bm} w{warps} p{stages} bf16 path gemm: {us:9.1f} us {flops / us / 1e6:5.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
