"""FP8 linears and the MoE grouped GEMM at V4.1-Flash widths, next to the floor.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_fp8_gemm.py [--out DIR] [--quick]

Workloads (real widths; E4M3 weights, one E8M0 scale per 32x32 tile, per 1x32 for experts):
  wq_a 5120->1280, wq_b 1280->32768, wkv 5120->512, wo_b 8192->5120, index wq_b 1280->4096,
  shared w1 5120->2304, shared w2 2304->5120, wo_a 8 groups of 4096->1024 (bf16 activations);
  rows M = 1, 8, 32, 128 (decode batches) and 8192 (prefill).
  MoE: 384 experts, D 5120, I 2304, top-6, uniform random routing, T = 1 .. 8192 tokens.

Floor (written down before measuring), per linear:
  bytes = N*K (E4M3) + N*K/1024 (scales) + M*K*2 (bf16 in) + M*N*2 (bf16 out)
  FLOPs = 2*M*N*K;  floor = max(bytes / copy bandwidth, FLOPs / FP8 rate)
  e.g. wq_b at M=1: 41.9 MB -> 10.0 us at 4.18 TB/s; at M=8192: 687 GFLOP -> 469 us at 1466 TFLOP/s.
MoE: bytes = (experts touched) * 3*D*I*(1 + 1/32) + T*D*2*2; FLOPs = 2*T*6*3*D*I.
  T=1: 6 experts, 218 MB -> 52 us; T=8192: all 384 (14.0 GB -> 3.3 ms) and 3.5 PFLOP -> 2.4 ms,
  so the prefill floor is the bytes (3.3 ms), not the FLOPs.
Timing: CUDA-graph replays over enough weight copies to exceed the L2 4x (decode; one copy
for prefill), median of 20 replays; "eager" = per call with the Python launches.
"""

from __future__ import annotations

import argparse
import json
import math
import os

import torch

from benchmarks.timing import L2_BYTES, ceilings, rel, run_info, time_eager, time_graph
from deepinfer_adapters.kernels import reference_fp8
from deepinfer_adapters.kernels import triton_fp8_gemm as tg
from deepinfer_adapters.kernels import triton_moe as tm

LINEARS = {"wq_a": (1280, 5120), "wq_b": (32768, 1280), "wkv": (512, 5120), "wo_b": (5120, 8192),
           "idx_wq_b": (4096, 1280), "shared_w1": (2304, 5120), "shared_w2": (5120, 2304)}
ROWS = (1, 8, 32, 128, 8192)
SWEEP = {  # GemmConfig(block_m, block_n, sub, warps, stages)
    "m16n64s4w4p4": tg.GemmConfig(16, 64, 4, 4, 4),
    "m16n32s4w4p4": tg.GemmConfig(16, 32, 4, 4, 4),
    "m16n64s2w4p6": tg.GemmConfig(16, 64, 2, 4, 6),
    "m16n128s4w4p3": tg.GemmConfig(16, 128, 4, 4, 3),
    "m64n64s4w4p3": tg.GemmConfig(64, 64, 4, 4, 3),
    "m64n128s4w4p3": tg.GemmConfig(64, 128, 4, 4, 3),
    "m128n128s4w8p3": tg.GemmConfig(128, 128, 4, 8, 3),
    "m128n128s2w8p4": tg.GemmConfig(128, 128, 2, 8, 4),
    "m128n256s4w8p3": tg.GemmConfig(128, 256, 4, 8, 3),
    "m64n256s4w4p3": tg.GemmConfig(64, 256, 4, 4, 3),
}
E, D, I, TOPK = 384, 5120, 2304, 6


def log(*a):
    print(*a, flush=True)


def random_fp8(shape, g, std=1.0):
    return (torch.randn(shape, device="cuda", generator=g) * std).to(torch.float8_e4m3fn)


def random_e8m0(shape, g, lo=118, hi=124):
    return torch.randint(lo, hi, shape, device="cuda", generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu)


def linear_floor(M, N, K, c):
    b = N * K * (1 + 1 / 1024) + M * K * 2 + M * N * 2
    f = 2 * M * N * K
    return max(b / c["copy_bw"], f / c["fp8_flops"]) * 1e6, b, f


def bench_linear(name, N, K, M, c, g, quick):
    sets_n = 1 if M > 128 else max(1, min(32, math.ceil(4 * L2_BYTES / (N * K))))
    ws = [(random_fp8((N, K), g), random_e8m0((N // 32, K // 32), g)) for _ in range(sets_n)]
    xs = [torch.randn(M, K, device="cuda", generator=g).bfloat16() for _ in range(sets_n)]
    fl, b, f = linear_floor(M, N, K, c)
    row = {"op": name, "M": M, "N": N, "K": K, "floor_us": fl, "bytes": b, "flops": f, "sets": sets_n}
    ref = reference_fp8.fp8_linear(xs[0], *ws[0], (32, 32), 32)
    row["rel_triton"] = rel(tg.fp8_linear(xs[0], *ws[0], (32, 32), 32, path="triton"), ref)
    calls = lambda path, cfg=None: [lambda x=x, w=w: tg.fp8_linear(x, *w, (32, 32), 32, path=path, config=cfg)
                                    for x, w in zip(xs, ws)]
    row["triton_us"] = time_graph(calls("triton"))
    row["triton_eager_us"] = time_eager(calls("triton")[0])
    if M >= 128:
        row["rel_bf16_cublas"] = rel(tg.fp8_linear(xs[0], *ws[0], (32, 32), 32, path="bf16_cublas"), ref)
        row["bf16_cublas_us"] = time_graph(calls("bf16_cublas"))
    wb = [tg.dequant_bf16(w, s, (32, 32)) for w, s in ws]  # bf16 weights: the 2x-bytes baseline
    row["bf16_weights_us"] = time_graph([lambda x=x, w=w: torch.nn.functional.linear(x, w) for x, w in zip(xs, wb)])
    if not quick and name in ("wq_b", "wo_b") and M in (1, 128, 8192):
        row["sweep"] = {}
        for cname, cfg in SWEEP.items():
            try:
                out = tg.fp8_linear(xs[0], *ws[0], (32, 32), 32, path="triton", config=cfg)
                row["sweep"][cname] = {"us": time_graph(calls("triton", cfg), reps=10), "rel": rel(out, ref)}
            except Exception as e:  # a config that does not compile or fit: record, go on
                row["sweep"][cname] = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
    log(f"linear {json.dumps(row)}")
    return row


def bench_wo_a(M, c, g):
    G, R, Din = 8, 1024, 4096
    w, s = random_fp8((G * R, Din), g, 0.1), random_e8m0((G * R // 32, Din // 32), g)
    x = torch.randn(M, G, Din, device="cuda", generator=g).bfloat16()
    ref = reference_fp8.fp8_grouped_linear(x, w, s, (32, 32))
    fl, b, f = linear_floor(M, G * R, Din, c)
    row = {"op": "wo_a (8 groups, bf16 act)", "M": M, "floor_us": fl, "bytes": b, "flops": f,
           "rel_triton": rel(tg.fp8_grouped_linear(x, w, s, (32, 32)), ref),
           "triton_us": time_graph([lambda: tg.fp8_grouped_linear(x, w, s, (32, 32))]),
           "triton_eager_us": time_eager(lambda: tg.fp8_grouped_linear(x, w, s, (32, 32)))}
    log(f"linear {json.dumps(row)}")
    return row


def bench_moe(T, c, g, experts, quick):
    w13, s13, w2, s2 = experts
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    ids = torch.rand(T, E, device="cuda", generator=g).topk(TOPK, dim=-1).indices
    rw = torch.rand(T, TOPK, device="cuda", generator=g)
    touched = int(torch.unique(ids).numel())
    b = touched * 3 * D * I * (1 + 1 / 32) + T * D * 4
    f = 2 * T * TOPK * 3 * D * I
    fl = max(b / c["copy_bw"], f / c["fp8_flops"]) * 1e6
    args = (x, rw, ids, w13, s13, w2, s2, (1, 32), 32, 10.0)
    row = {"op": "moe_experts", "T": T, "experts_touched": touched, "floor_us": fl, "bytes": b, "flops": f}
    out = tm.moe_experts(*args)
    if T <= 128:
        ref = reference_fp8.moe_experts(*args)
        row["rel_triton"] = rel(out, ref)
        if T <= 8:
            row["torch_ref_us"] = time_eager(lambda: reference_fp8.moe_experts(*args), reps=3, warm=1)
    row["triton_us"] = time_graph([lambda: tm.moe_experts(*args)], reps=10)
    row["triton_eager_us"] = time_eager(lambda: tm.moe_experts(*args), reps=10)
    if not quick and T in (1, 8192):
        row["sweep"] = {}
        for cname in ("m16n64s4w4p4", "m16n128s4w4p3", "m64n128s4w4p3", "m128n128s4w8p3", "m64n256s4w4p3"):
            try:
                row["sweep"][cname] = time_graph([lambda: tm.moe_experts(*args, config=SWEEP[cname])], reps=5)
            except Exception as e:
                row["sweep"][cname] = f"{type(e).__name__}: {str(e)[:160]}"
    log(f"moe {json.dumps(row)}")
    return row


def probe_scaled_mm_blockwise():
    """Does torch._scaled_mm take 1x128 / 128x128 block scales here? (V4's 128 blocks could use it.)"""
    M = N = K = 4096
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
    sa = torch.rand(M, K // 128, device="cuda") + 0.5
    sb = torch.rand(N // 128, K // 128, device="cuda") + 0.5
    tries = {"sa[M,K/128] sb[K/128,N/128]": (sa, sb.t()),
             "sa outer-major": (sa.t().contiguous().t(), sb.t()),
             "sa outer-major sb contiguous": (sa.t().contiguous().t(), sb.t().contiguous())}
    out = {}
    for name, (x, y) in tries.items():
        try:
            r = torch._scaled_mm(a, b.t(), x, y, out_dtype=torch.bfloat16)
            ref = ((a.float().view(M, K // 128, 128) * sa[..., None]).view(M, K)
                   @ (b.float().view(N // 128, 128, K // 128, 128) * sb[:, None, :, None]).view(N, K).t())
            out[name] = {"rel": rel(r, ref),
                         "us": time_eager(lambda: torch._scaled_mm(a, b.t(), x, y, out_dtype=torch.bfloat16))}
        except Exception as e:
            out[name] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="no config sweeps")
    args = ap.parse_args()
    info = run_info()
    c = ceilings()
    info.update({k: v / 1e12 for k, v in c.items()})
    log(f"INFO {json.dumps(info)}")
    info["scaled_mm_blockwise"] = probe_scaled_mm_blockwise()
    log(f"scaled_mm blockwise probe: {info['scaled_mm_blockwise']}")
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for name, (N, K) in LINEARS.items():
        for M in ROWS:
            try:
                rows.append(bench_linear(name, N, K, M, c, g, args.quick))
            except Exception as e:
                log(f"linear {name} M={M} failed: {type(e).__name__}: {str(e)[:300]}")
            torch.cuda.empty_cache()
    for M in ROWS:
        rows.append(bench_wo_a(M, c, g))
    experts = (random_fp8((E, 2 * I, D), g, 1.0), random_e8m0((E, 2 * I, D // 32), g),
               random_fp8((E, D, I), g, 1.0), random_e8m0((E, D, I // 32), g))
    for T in ROWS:
        try:
            rows.append(bench_moe(T, c, g, experts, args.quick))
        except Exception as e:
            log(f"moe T={T} failed: {type(e).__name__}: {str(e)[:300]}")
    with open(os.path.join(args.out, "bench_fp8_gemm.json"), "w") as fh:
        json.dump({"info": info, "rows": rows}, fh, indent=1)
    log("\nSUMMARY (us; ratio = measured / floor)")
    log(f"copy {c['copy_bw'] / 1e12:.2f} TB/s  bf16 {c['bf16_flops'] / 1e12:.0f} TFLOP/s  fp8 {c['fp8_flops'] / 1e12:.0f} TFLOP/s")
    log(f"{'op':26s} {'M/T':>5s} {'floor':>8s} {'triton':>8s} {'x floor':>7s} {'eager':>8s} {'bf16 W':>8s} "
        f"{'bf16cub':>8s} {'rel':>8s} best-sweep")
    for r in rows:
        m = r.get("M", r.get("T"))
        best = ""
        if isinstance(r.get("sweep"), dict):
            ok = {k: (v["us"] if isinstance(v, dict) else v) for k, v in r["sweep"].items()
                  if (isinstance(v, dict) and "us" in v) or isinstance(v, float)}
            if ok:
                k = min(ok, key=ok.get)
                best = f"{k} {ok[k]:.1f}"
        log(f"{r['op']:26s} {m:5d} {r['floor_us']:8.1f} {r['triton_us']:8.1f} {r['triton_us'] / r['floor_us']:7.2f} "
            f"{r['triton_eager_us']:8.1f} {r.get('bf16_weights_us', float('nan')):8.1f} "
            f"{r.get('bf16_cublas_us', float('nan')):8.1f} {r.get('rel_triton', float('nan')):8.1e} {best}")


if __name__ == "__main__":
    main()
