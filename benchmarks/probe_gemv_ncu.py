"""One call each of the decode GEMVs and of one layer's routed experts at one row, for Nsight Compute.

Why: at one row the dense FP8 GEMVs run at ~50% of the copy bandwidth (wq_b 20 us against a 10 us
floor) while the routed experts' grouped GEMM, a similar amount of weight per call, runs at ~80%
(BENCHMARKS.md sessions 10 and 15). This issues each once, after a warm-up, between
cudaProfilerStart / Stop, so ``ncu --profile-from-start off`` sees exactly these launches:

    ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats python benchmarks/probe_gemv_ncu.py
"""

from __future__ import annotations

import torch

from benchmarks.bench_decode_gemv import BLOCK, LINEARS, random_weight
from benchmarks.bench_moe_blocks import experts
from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import triton_fp8_gemm as tg

SHAPES = ("wq_a+wkv", "wq_b", "wo_b", "engram_wkv")


def main():
    g = torch.Generator(device="cuda").manual_seed(0)
    calls = []
    for name in SHAPES:
        N, K = LINEARS[name]
        w = random_weight(N, K, g)
        x = torch.randn(1, K, device="cuda", generator=g).bfloat16()
        calls.append((name, lambda x=x, w=w: tg.fp8_linear(x, *w, BLOCK, 32, path="triton")))
    m = experts(128)
    E = m.w13.shape[0]
    x = torch.randn(1, 5120, device="cuda", generator=g).bfloat16()
    ids = torch.rand(1, E, device="cuda", generator=g).topk(6, dim=1).indices
    wts = torch.rand(1, 6, device="cuda", generator=g)
    calls.append(("moe T=1", lambda: kernels.moe_experts(x, wts, ids, m.w13, m.w13_scale, m.w2, m.w2_scale, m.block,
                                                         m.act_block, m.limit)))
    for _, f in calls:  # compile and warm up outside the profiled range
        f()
        f()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, f in calls:
        torch.cuda.nvtx.range_push(name)
        f()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.cudart().cudaProfilerStop()
    print("probed:", ", ".join(n for n, _ in calls))


if __name__ == "__main__":
    main()
