"""One V4.1 layer's w13 grouped GEMM at prefill size, alone: the bf16 path's (E4M3 weight tile -> fp32 x
scale -> bf16 in registers) against the f16 path's (``f16_grouped_gemm``: fp16 conversion and an exponent
shift), on the same routed rows, with whether fp16 held the input (``bad``) and whether the two outputs
are the same bits. Separates the GEMM from the MoE's other steps (bench_moe_blocks.py times the whole).

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_f16_gemm.py [--tokens 8192]
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.bench_moe_blocks import ACT_BLOCK, D, E, TOPK, experts
from benchmarks.timing import run_info, time_eager
from deepinfer_adapters.kernels import triton_fp8_gemm as tg
from deepinfer_adapters.kernels import triton_moe as tm

F16_CONFIGS = {"m128n128w8p3": tg.GemmConfig(128, 128, 1, 8, 3), "m64n128w4p3": tg.GemmConfig(64, 128, 1, 4, 3),
               "m64n128w4p2": tg.GemmConfig(64, 128, 1, 4, 2), "m128n128w4p3": tg.GemmConfig(128, 128, 1, 4, 3),
               }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    args = ap.parse_args()
    print(f"INFO {json.dumps(run_info())}", flush=True)
    mod = experts(128)
    T = args.tokens
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    ids = torch.rand(T, E, device="cuda", generator=g).topk(TOPK, dim=-1).indices
    flops = 2 * T * TOPK * tg.expert_matrix(mod.w13)[0] * D
    rows = T * TOPK
    bad = torch.zeros(1, device="cuda", dtype=torch.int32)
    q, s = tg.act_quant(x, ACT_BLOCK)
    a16, s16 = tg.f16_rows(q, s, ACT_BLOCK, bad)
    print(f"f16_rows: bad {int(bad.item())}", flush=True)
    xa = tg.act_quant(x, ACT_BLOCK, dequant_to=torch.bfloat16)[0]
    tiles = {bm: tm.route(ids, E, bm)[1] for bm in (64, 128)}
    bf16 = lambda: tg.gemm(xa, None, 0, mod.w13, mod.w13_scale, (1, 128), torch.bfloat16, rows=rows,  # noqa: E731
                           groups=tiles[128], config=tg.BF16_LARGE_CONFIG, kstep=128)
    ref = bf16()
    for n_first in (False, True, False):  # the grid order, A/B/A
        tg.N_FIRST = n_first
        us = time_eager(bf16, reps=10, warm=1)
        print(f"w13 bf16 path, N tiles first {n_first}: {us:9.1f} us {flops / us / 1e6:6.0f} TFLOP/s "
              f"same bits {torch.equal(bf16(), ref)}", flush=True)
    tg.N_FIRST = True
    for name, cfg in F16_CONFIGS.items():
        bad.zero_()
        f16 = lambda: tg.f16_grouped_gemm(a16, s16, mod.w13, mod.w13_scale, (1, 128), torch.bfloat16,  # noqa: E731
                                          rows=rows, groups=tiles[cfg.block_m], bad=bad, config=cfg)
        out = f16()
        flag = int(bad.item())
        us = time_eager(f16, reps=10, warm=1)
        print(f"w13 f16 {name}: {us:9.1f} us {flops / us / 1e6:6.0f} TFLOP/s bad {flag} "
              f"same bits as bf16 {torch.equal(out, ref)}", flush=True)
    # the whole MoE (route, quantize, both GEMMs, swiglu, combine) on each path, and its fallbacks
    rw = torch.rand(T, TOPK, device="cuda", generator=g)
    w = (mod.w13, mod.w13_scale, mod.w2, mod.w2_scale)
    outs = {}
    for path in ("bf16", "f16"):
        call = lambda: tm.moe_experts(x, rw, ids, *w, (1, 128), ACT_BLOCK, 10.0, path=path)  # noqa: E731
        before = tm.f16_fallbacks
        outs[path] = call()
        us = time_eager(call, reps=5, warm=1)
        print(f"moe {path}: {us:9.1f} us, fallbacks {tm.f16_fallbacks - before}", flush=True)
    print(f"moe f16 same bits as bf16: {torch.equal(outs['f16'], outs['bf16'])}")


if __name__ == "__main__":
    main()
