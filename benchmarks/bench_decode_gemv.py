"""Decode-sized FP8 linears of one V4.1-Flash layer: tile and split-K sweep, next to the floor.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_decode_gemv.py [--out DIR]

Why: at batch 1 the 123 FP8 GEMM launches of a decode step take 1.6 ms of the 6.2 ms step
(benchmarks/PROFILE_real_width_decode_b1.txt) against ~0.5 ms for their bytes. Each call is
act_quant + GEMM (+ the split-K sum and cast), so tiles, split-K and launch count all matter.

Floor per call: bytes = N K (E4M3) + N K / 1024 (E8M0 scales) + M K 2 + M N 2 at the measured
copy bandwidth (decode rows are far below the FLOP side). Timing: CUDA-graph replays over
enough weight copies to exceed the L2 4x (timing.time_graph), median of 20.
Shapes: the layer's FP8 linears (wq_a, wkv, wq_b, index wq_b, wo_b, shared w1/w3/w2, Engram
wkv), the merged variants a model could use (wq_a + wkv, shared w1 + w3: one call on the
same input), and wo_a (8 groups, bf16 activations) as one grouped launch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import types

import torch

from benchmarks.bench_fp8_gemm import random_e8m0, random_fp8
from benchmarks.timing import L2_BYTES, ceilings, rel, run_info, time_graph
from deepinfer_adapters.kernels import reference_fp8
from deepinfer_adapters.kernels import triton_fp8_gemm as tg
from deepinfer_adapters.model_impl.quant import expert_matrix, from_e4m3_tiles

BLOCK = (32, 32)
LINEARS = {"wq_a": (1280, 5120), "wkv": (512, 5120), "wq_a+wkv": (1792, 5120), "wq_b": (32768, 1280),
           "idx_wq_b": (4096, 1280), "wo_b": (5120, 8192), "shared_w1": (2304, 5120), "shared_w13": (4608, 5120),
           "shared_w2": (5120, 2304), "engram_wkv": (25600, 6144)}
PER_LAYER = ("wq_a+wkv", "wq_b", "idx_wq_b", "wo_b", "shared_w13", "shared_w2")  # a CSA layer's calls today
ROWS = (1, 8, 32)


def configs(M: int, quick: bool = False) -> dict[str, dict]:
    """name -> fp8_linear's keywords: the GEMM's kernel (the swapped one for decode rows, or not),
    its products (FP8 per scale block, or bf16 128 deep), tiles and split-K."""
    bm = 16 if M <= 16 else 32
    c = {"default": {}}
    if M <= tg.SWAPPED_ROWS:
        c["rows_first"] = {"swapped": False}
        c["bf16_steps"] = {"swapped": True, "bf16_steps": True}
    if quick:
        return c
    if M <= tg.SWAPPED_ROWS:  # the swapped kernel's tiles: weight rows, scale steps, stages, split-K target
        for n, sub, stages, programs in ((64, 4, 4, 528), (64, 2, 6, 264), (128, 4, 4, 264), (128, 2, 4, 264)):
            c[f"sw_n{n}_s{sub}_p{stages}_t{programs}"] = {
                "swapped": True, "config": tg.GemmConfig(16, n, sub, 4, stages, programs=programs)}
        # bf16 steps (128 deep): weight rows, steps an iteration, warps, stages, split-K target
        for n, sub, warps, stages, programs in ((64, 1, 4, 4, 528), (64, 2, 4, 4, 264), (64, 1, 4, 6, 264),
                                                (128, 1, 4, 4, 264), (128, 1, 8, 4, 264), (32, 1, 4, 4, 528),
                                                (64, 1, 4, 3, 1056)):
            c[f"b16_n{n}_s{sub}_w{warps}_p{stages}_t{programs}"] = {
                "swapped": True, "bf16_steps": True, "config": tg.GemmConfig(16, n, sub, warps, stages, programs)}
        return c
    for n in (16, 32, 64, 128):
        for programs in (0, 132, 264, 528):
            c[f"n{n}_p{programs}"] = {"swapped": False, "config": tg.GemmConfig(bm, n, 4, 4, 4, programs=programs)}
    c["n64_sub8_p264"] = {"swapped": False, "config": tg.GemmConfig(bm, 64, 8, 4, 3)}
    c["n32_w2_p264"] = {"swapped": False, "config": tg.GemmConfig(bm, 32, 4, 2, 4)}
    c["n64_st6_p264"] = {"swapped": False, "config": tg.GemmConfig(bm, 64, 4, 4, 6)}
    return c


def log(*a):
    print(*a, flush=True)


def random_weight(N, K, g):
    return random_fp8((N, K), g, std=0.5), random_e8m0((N // BLOCK[0], K // BLOCK[1]), g)


def run_linear(name, N, K, M, c, g, quick):
    sets = max(1, min(32, math.ceil(4 * L2_BYTES / (N * K))))
    ws = [random_weight(N, K, g) for _ in range(sets)]
    xs = [torch.randn(M, K, device="cuda", generator=g).bfloat16() for _ in range(sets)]
    floor = (N * K * (1 + 1 / 1024) + M * K * 2 + M * N * 2) / c["copy_bw"] * 1e6
    ref = reference_fp8.fp8_linear(xs[0], *ws[0], BLOCK, 32)
    row = {"op": name, "M": M, "N": N, "K": K, "floor_us": floor, "us": {}}
    for cname, kw in configs(M, quick).items():
        kw = {"path": "triton", **kw}
        try:
            out = tg.fp8_linear(xs[0], *ws[0], BLOCK, 32, **kw)
            t = time_graph([lambda x=x, w=w, kw=kw: tg.fp8_linear(x, *w, BLOCK, 32, **kw) for x, w in zip(xs, ws)])
            row["us"][cname] = t
            row.setdefault("rel", {})[cname] = rel(out, ref)
        except Exception as e:  # a config that does not compile or fit: record, go on
            row["us"][cname] = float("nan")
            log(f"{name} M={M} {cname}: {type(e).__name__}: {str(e)[:160]}")
    best = min((v, k) for k, v in row["us"].items() if v == v)
    row["best"] = best[1]
    log(f"{name:11s} M={M:3d} floor {floor:6.1f} us | default {row['us']['default']:6.1f} | best {best[1]} "
        f"{best[0]:6.1f} | max rel {max(row['rel'].values()):.1e}")
    return row


def run_wo_a(M, c, g):
    G, R, Din = 8, 1024, 4096
    sets = max(1, min(32, math.ceil(4 * L2_BYTES / (G * R * Din))))
    ws = [random_weight(G * R, Din, g) for _ in range(sets)]
    xs = [torch.randn(M, G, Din, device="cuda", generator=g).bfloat16() for _ in range(sets)]
    floor = (G * R * Din * (1 + 1 / 1024) + M * G * (Din + R) * 2) / c["copy_bw"] * 1e6
    ref = reference_fp8.fp8_grouped_linear(xs[0], *ws[0], BLOCK)

    def per_group(x, w, s):  # the previous dispatch: one GEMM per group
        out = torch.empty(M, G, R, device="cuda", dtype=x.dtype)
        for gi in range(G):
            out[:, gi] = tg.gemm(x[:, gi], None, 0, w[gi * R:(gi + 1) * R], s[gi * R // 32:(gi + 1) * R // 32],
                                 BLOCK, x.dtype)
        return out

    def unsplit(x, w, s):
        tg.GROUPED_SPLIT_K = False
        try:
            return tg.fp8_grouped_linear(x, w, s, BLOCK)
        finally:
            tg.GROUPED_SPLIT_K = True

    row = {"op": "wo_a (8 groups)", "M": M, "floor_us": floor,
           "one_launch_us": time_graph([lambda x=x, w=w: tg.fp8_grouped_linear(x, *w, BLOCK) for x, w in zip(xs, ws)]),
           "one_launch_unsplit_us": time_graph([lambda x=x, w=w: unsplit(x, *w) for x, w in zip(xs, ws)]),
           "per_group_us": time_graph([lambda x=x, w=w: per_group(x, *w) for x, w in zip(xs, ws)]),
           "rel": rel(tg.fp8_grouped_linear(xs[0], *ws[0], BLOCK), ref)}
    log(f"wo_a        M={M:3d} floor {floor:6.1f} us | one launch {row['one_launch_us']:6.1f} "
        f"(K not split {row['one_launch_unsplit_us']:6.1f}) | "
        f"per group {row['per_group_us']:6.1f} | rel {row['rel']:.1e}")
    return row


# the routed experts' decode tiles by path: (path, GemmConfig(rows per expert, weight rows, steps, warps,
# stages) or None for the path's default, routing or None for the default). Session 6 also tried split-K
# for the fp8 path's grouped GEMMs: the same time at T = 8 and 32 (RESULTS_decode_gemv_sweep_s6.json).
# Session 7 made the bf16 path with 16-row tiles the decode default (triton_moe.DECODE_PATH): ~20% faster
# than the fp8 path at T = 1-32.
MOE_CONFIGS = {  # name: (expert storage, path, config, routing); "fp4": packed E2M1, the same values; "fp8u": the
    # E4M3 experts untiled (the held layout before session 9: quant.to_e4m3_tiles)
    "fp8": ("fp8", "fp8", None, None), "fp8_untiled": ("fp8u", "fp8", None, None),
    "bf16": ("fp8", "bf16", None, None), "bf16_sorted": ("fp8", "bf16", None, "sorted"),
    "bf16_untiled": ("fp8u", "bf16", None, None),
    # packed E2M1 on the bf16 path (sessions 7-8: 16 x 64 tiles, 4 stages and 2 or 4 spans per iteration
    # were no faster than the default, RESULTS_moe_storage_fp4_s8.log)
    "fp4_bf16": ("fp4", "bf16", None, None), "fp4_bf16_int": ("fp4", "bf16", None, None),
    # packed E2M1 on the fp8 path (fp4_gemm_rows_kernel): rows per tile x weight rows (128: the weights' row tile,
    # quant.to_fp4_tiles), warps, stages (session 8, before the tiles: 64 or 256 weight rows and two spans an
    # iteration were slower; BENCHMARKS.md)
    "fp4": ("fp4", "fp8", None, None),
    "fp4_st4": ("fp4", "fp8", tg.GemmConfig(16, 128, 1, 4, 4), None),
}
# triton_fp8_gemm.FP4_UNPACK on the bf16 path, else "ptx"
MOE_FP4_UNPACK = {"fp4_bf16_int": "int"}


def run_moe(T, c, stores, g):
    """The routed experts of one layer (384 x 2304, top-6, uniform routing) at a decode step, by
    storage (``stores``: "fp8" (1, 128) E4M3 and "fp4" packed, the same values), path and tile."""
    from deepinfer_adapters import kernels

    experts = stores["fp8"]
    E, k = experts.w13.shape[0], 6
    sets = 4
    xs = [torch.randn(T, expert_matrix(experts.w13)[1], device="cuda", generator=g).bfloat16() for _ in range(sets)]
    ids = [torch.rand(T, E, device="cuda", generator=g).topk(k, dim=1).indices for _ in range(sets)]
    ws = [torch.rand(T, k, device="cuda", generator=g) for _ in range(sets)]
    touched = sum(int(i.unique().numel()) for i in ids) / sets
    floor = {name: touched * (m.w13[0].nbytes + m.w2[0].nbytes) / c["copy_bw"] * 1e6 for name, m in stores.items()}
    row = {"op": "moe", "M": T, "floor_us": floor["fp8"], "floor_us_fp4": floor["fp4"], "experts_touched": touched,
           "us": {}}

    def args(i, store):
        m = stores[store]
        return xs[i], ws[i], ids[i], m.w13, m.w13_scale, m.w2, m.w2_scale, m.block, m.act_block, m.limit

    ref = kernels.moe_experts(*args(0, "fp8"), path="bf16")
    for name, (store, path, cfg, routing) in MOE_CONFIGS.items():
        if routing == "sorted" and T > 1:  # the default there
            continue
        tg.FP4_UNPACK = MOE_FP4_UNPACK.get(name, "ptx")
        try:
            out = kernels.moe_experts(*args(0, store), path=path, config=cfg, routing=routing)
            row["us"][name] = time_graph([lambda i=i, store=store, path=path, cfg=cfg, routing=routing:
                                          kernels.moe_experts(*args(i, store), path=path, config=cfg, routing=routing)
                                          for i in range(sets)])
            row.setdefault("rel", {})[name] = rel(out, ref)
        except Exception as e:
            row["us"][name] = float("nan")
            log(f"moe T={T} {name}: {type(e).__name__}: {str(e)[:160]}")
        finally:
            tg.FP4_UNPACK = "ptx"
    log(f"moe         T={T:3d} floor {floor['fp8']:6.1f} us, fp4 {floor['fp4']:6.1f} ({touched:.0f} experts) | "
        + " | ".join(f"{k} {v:6.1f}" for k, v in row["us"].items()) + " | rel vs bf16 "
        + " ".join(f"{k} {v:.0e}" for k, v in row.get("rel", {}).items()))
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    ap.add_argument("--quick", action="store_true", help="the default config only (no sweep)")
    ap.add_argument("--moe", type=int, nargs="*", default=[], metavar="T",
                    help="also the routed experts of a layer at these token counts, by path and tile")
    args = ap.parse_args()
    info = run_info()
    c = ceilings()
    info["copy_TBs"] = c["copy_bw"] / 1e12
    log(f"INFO {json.dumps(info)}")
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for M in args.rows:
        for name, (N, K) in LINEARS.items():
            rows.append(run_linear(name, N, K, M, c, g, args.quick))
        rows.append(run_wo_a(M, c, g))
        torch.cuda.empty_cache()
    if args.moe:
        from benchmarks.bench_moe_blocks import experts

        stores = {"fp8": experts(128), "fp4": experts(0)}
        e4m3 = stores["fp8"]
        stores["fp8u"] = types.SimpleNamespace(w13=from_e4m3_tiles(e4m3.w13), w13_scale=e4m3.w13_scale,
                                               w2=from_e4m3_tiles(e4m3.w2), w2_scale=e4m3.w2_scale, block=e4m3.block,
                                               act_block=e4m3.act_block, limit=e4m3.limit)
        for T in args.moe:
            rows.append(run_moe(T, c, stores, g))
        del stores
    with open(os.path.join(args.out, "bench_decode_gemv.json"), "w") as fh:
        json.dump({"info": info, "rows": rows}, fh, indent=1)
    log("\nSUMMARY decode GEMVs (us, CUDA-graph replays): per config, the layer's calls today "
        f"({' + '.join(PER_LAYER)})")
    for M in args.rows:
        lin = {r["op"]: r for r in rows if r["M"] == M and "us" in r and r["op"] != "moe"}
        names = next(iter(lin.values()))["us"].keys()
        totals = {n: sum(lin[op]["us"][n] for op in PER_LAYER) for n in names}
        best_each = sum(min(v for v in lin[op]["us"].values() if v == v) for op in PER_LAYER)
        floor = sum(lin[op]["floor_us"] for op in PER_LAYER)
        top = sorted((v, k) for k, v in totals.items() if v == v)[:5]
        log(f"M={M}: floor {floor:.1f} | default {totals['default']:.1f} | best single config "
            + ", ".join(f"{k} {v:.1f}" for v, k in top) + f" | best per shape {best_each:.1f}")


if __name__ == "__main__":
    main()
