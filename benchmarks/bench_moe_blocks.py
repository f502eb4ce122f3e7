"""The routed-expert MoE of one V4.1-Flash layer at real widths, with the experts stored
as (1, 32) blocks (the checkpoint's FP4 scales) and as (1, 128) blocks (re-encoded at load,
model_impl/native_format.py), on both Triton paths and a few tile configs.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_moe_blocks.py [--out DIR] [--quick]

Workload: 384 experts, D 5120, I 2304, top-6, uniform random routing, V4.1's activation
quantization per 32; the two storages hold the same values (drawn once as FP4 and converted
both ways, benchmarks/bench_real_width.py fill_experts). T = 8192 tokens (prefill, 49k
token-expert pairs) over the config sweep; T = 1, 8, 128 with the default configs.
Floor: max(bytes / copy bandwidth, FLOPs / FP8 rate) with FLOPs = 2 T 6 3 D I and bytes =
experts touched x 3 D I (+ scales) + activations: T = 8192 is 3.5 PFLOP -> ~2.4 ms.
Timing: eager calls (the routing's torch ops included), median; the prefill rows also
report rel against the torch reference at T = 8192 (the same for both storages, bitwise).

Reading it: V4.1 quantizes activations per 32, so the "fp8" path's products stay 32 deep
with either storage; (1, 128) weights save its per-product weight-scale loads and multiplies
(the weight scale multiplies once per 128). The "bf16" path's 128-deep products read one
weight scale per column instead of a [128, BLOCK_N] tile of them.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from benchmarks.bench_real_width import fill_experts
from benchmarks.timing import ceilings, rel, run_info, time_eager
from deepinfer_adapters.kernels import reference_fp8
from deepinfer_adapters.kernels import triton_fp8_gemm as tg
from deepinfer_adapters.kernels import triton_moe as tm
from deepinfer_adapters.model_impl.layers.experts_fp8 import Fp8Experts

E, D, I, TOPK, ACT_BLOCK, LIMIT = 384, 5120, 2304, 6, 32, 10.0
CONFIGS = {  # path -> name -> GemmConfig(block_m, block_n, sub, warps, stages); None: the path's default
    "fp8": {"default": None,
            "m64n128s4w4p4": tg.GemmConfig(64, 128, 4, 4, 4),
            "m128n128s4w8p3": tg.GemmConfig(128, 128, 4, 8, 3),
            "m128n128s4w8p4": tg.GemmConfig(128, 128, 4, 8, 4),
            "m64n256s4w8p3": tg.GemmConfig(64, 256, 4, 8, 3),
            "m128n64s4w4p4": tg.GemmConfig(128, 64, 4, 4, 4)},
    "bf16": {"default": None,
             "m128n128s1w8p4": tg.GemmConfig(128, 128, 1, 8, 4),
             "m64n128s1w4p3": tg.GemmConfig(64, 128, 1, 4, 3),
             "m128n256s1w8p3": tg.GemmConfig(128, 256, 1, 8, 3),
             "m128n128s2w8p3": tg.GemmConfig(128, 128, 2, 8, 3),
             # one warpgroup, two stages: small enough in shared memory for two programs an SM (session 14:
             # 17.6 ms against the default's 15.0 at 8192 tokens)
             "m64n128s1w4p2": tg.GemmConfig(64, 128, 1, 4, 2)},
}


def log(*a):
    print(*a, flush=True)


def experts(block: int) -> Fp8Experts:
    """One layer's experts, (1, block) E4M3, or block 0: packed FP4 (scale per 32); the same values."""
    mod = Fp8Experts(E, D, I, block=(1, block or 32), scale_dtype=torch.float8_e8m0fnu, act_block=ACT_BLOCK,
                     limit=LIMIT, packed_fp4=block == 0, device="cuda")
    fill_experts(mod, torch.Generator(device="cuda").manual_seed(0))  # same seed: the same values
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="default configs only")
    ap.add_argument("--prefill", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--paths", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = ap.parse_args()
    info = run_info()
    c = ceilings()
    log(f"INFO {json.dumps(info)}")
    stores = {32: experts(32), 128: experts(128)}
    w = {b: (m.w13, m.w13_scale, m.w2, m.w2_scale) for b, m in stores.items()}
    g = torch.Generator(device="cuda").manual_seed(1)
    rows = []
    for T in (args.prefill, 1, 8, 128):
        x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
        ids = torch.rand(T, E, device="cuda", generator=g).topk(TOPK, dim=-1).indices
        rw = torch.rand(T, TOPK, device="cuda", generator=g)
        touched = int(torch.unique(ids).numel())
        flops = 2 * T * TOPK * 3 * D * I
        floor_us = max(touched * 3 * D * I / c["copy_bw"], flops / c["fp8_flops"]) * 1e6
        ref = reference_fp8.moe_experts(x, rw, ids, *w[128], (1, 128), ACT_BLOCK, LIMIT) if T == args.prefill else None
        configs = {p: (cs if T == args.prefill and not args.quick else {"default": None}) for p, cs in CONFIGS.items()
                   if p in args.paths}
        for path, cs in configs.items():
            for cname, cfg in cs.items():
                for block in (32, 128):
                    row = {"T": T, "path": path, "config": cname, "block": f"1x{block}", "floor_us": floor_us}
                    call = lambda: tm.moe_experts(x, rw, ids, *w[block], (1, block), ACT_BLOCK, LIMIT, path=path,
                                                  config=cfg)
                    try:
                        out = call()
                        if ref is not None:
                            row["rel"] = rel(out, ref)
                        row["us"] = time_eager(call, reps=args.reps if T == args.prefill else 20, warm=1)
                        row["tflops"] = flops / row["us"] / 1e6
                    except Exception as e:  # a config that does not compile or fit: record, go on
                        row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                    log(f"moe {json.dumps(row)}")
                    rows.append(row)
        del ref
        torch.cuda.empty_cache()
    with open(os.path.join(args.out, "bench_moe_blocks.json"), "w") as fh:
        json.dump({"info": info, "ceilings": c, "rows": rows}, fh, indent=1)
    log("\nSUMMARY moe_blocks (us, median; x floor; rel vs the torch reference at the prefill size)")
    log(f"{'T':>5s} {'path':5s} {'config':16s} {'1x32 us':>10s} {'1x128 us':>10s} {'speedup':>8s} "
        f"{'TFLOP/s 128':>11s} {'x floor':>8s} {'rel 1x128':>10s}")
    by = {(r["T"], r["path"], r["config"], r["block"]): r for r in rows}
    for (T, path, cname, block), r in by.items():
        if block != "1x128":
            continue
        r32 = by.get((T, path, cname, "1x32"), {})
        a, b = r32.get("us", float("nan")), r.get("us", float("nan"))
        log(f"{T:5d} {path:5s} {cname:16s} {a:10.1f} {b:10.1f} {a / b:8.2f} {r.get('tflops', float('nan')):11.0f} "
            f"{b / r['floor_us']:8.2f} {r.get('rel', float('nan')):10.2e} {r.get('error', '')[:60]}")


if __name__ == "__main__":
    main()
