"""Why the MoE's bf16 prefill GEMM runs at ~190 TFLOP/s: one weight matrix, step by step.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/probe_bf16_gemm.py

Same problem each time, A [8192, 5120] bf16 x W^T with W [4608, 5120] (an expert's w13 at
the real width; 387 GFLOP), 128 x 128 tiles, 8 warps, 3 stages, 128-deep products:
  cublas      torch.mm on W dequantized to bf16 beforehand (the ceiling)
  plain       a Triton bf16 x bf16 GEMM on the same bf16 W (what Triton reaches at all)
  cast        W kept as E4M3, converted to bf16 in registers, no scale
  scaled      W as E4M3 with its E8M0 scale per 32 along K applied in registers (our path)
  ours        kernels/triton_fp8_gemm.gemm(kstep=128) as the MoE's bf16 path calls it
Also prints whether Triton pipelined the loads (async copies in the TTGIR) for plain and ours.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from benchmarks.timing import time_eager
from deepinfer_adapters.kernels import triton_fp8_gemm as tg

M, N, K = 8192, 4608, 5120


@triton.jit
def probe_kernel(A, W, S, OUT, M, N, K, MODE: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """MODE 0: W bf16; 1: W E4M3 cast; 2: W E4M3 x 2^(S - 127) per 32 along K."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros([BM, BN], tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        a = tl.load(A + rows[:, None] * K + ks[None, :])
        w = tl.load(W + cols[None, :] * K + ks[:, None])
        if MODE == 0:
            wb = w
        elif MODE == 1:
            wb = w.to(tl.bfloat16)
        else:
            s = tl.load(S + cols[None, :] * (K // 32) + (ks // 32)[:, None])
            wb = (w.to(tl.float32) * (s.to(tl.int32) << 23).to(tl.float32, bitcast=True)).to(tl.bfloat16)
        acc = tl.dot(a, wb, acc)
    tl.store(OUT + rows[:, None] * N + cols[None, :], acc.to(tl.bfloat16))


def run_probe(mode, a, w, s, out):
    return probe_kernel[(M // 128, N // 128)](a, w, s, out, M, N, K, MODE=mode, BM=128, BN=128, BK=128,
                                             num_warps=8, num_stages=3)


def main():
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
    w8 = (torch.randn(N, K, device="cuda", generator=g) * 0.5).to(torch.float8_e4m3fn)
    s = torch.randint(118, 124, (N, K // 32), device="cuda", generator=g, dtype=torch.uint8)
    wb = tg.dequant_bf16(w8, s.view(torch.float8_e8m0fnu), (1, 32))
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    flop = 2 * M * N * K
    ref = a @ wb.t()
    results = {"cublas": time_eager(lambda: torch.mm(a, wb.t()), reps=10)}
    for mode, name in ((0, "plain"), (1, "cast"), (2, "scaled")):
        arg_w = wb if mode == 0 else w8
        compiled = run_probe(mode, a, arg_w, s, out)
        if name == "plain":
            print(f"plain: async copies in TTGIR: {compiled.asm['ttgir'].count('async_copy')}, "
                  f"tma: {compiled.asm['ttgir'].count('tma')}")
        results[name] = time_eager(lambda m=mode, x=arg_w: run_probe(m, a, x, s, out), reps=10)
        if name == "scaled":
            print(f"scaled rel err vs cuBLAS: {float((out.float() - ref.float()).norm() / ref.float().norm()):.1e}")
    results["ours"] = time_eager(lambda: tg.gemm(a, None, 0, w8, s, (1, 32), torch.bfloat16,
                                                 config=tg.BF16_LARGE_CONFIG, kstep=128), reps=10)
    try:  # the JIT's cache layout differs between Triton versions: a diagnosis only
        cache = tg._kernels()[2].device_caches[torch.cuda.current_device()][0]
        for compiled in cache.values():
            print(f"ours ({compiled.name}): async copies in TTGIR: {compiled.asm['ttgir'].count('async_copy')}")
    except Exception as e:
        print(f"ours: TTGIR not found ({type(e).__name__}: {e})")
    for name, us in results.items():
        print(f"{name:8s} {us:9.1f} us  {flop / us / 1e6:6.0f} TFLOP/s")


if __name__ == "__main__":
    main()
