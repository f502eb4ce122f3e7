"""The routed experts of one V4-Flash (or V4.1-Flash) layer, packed FP4 (E2M1) against E4M3: variants
of ``fp4_gemm_rows_kernel`` side by side in one run, at decode (default) or prefill-sized token counts.

Run on the GPU machine:
    PYTHONPATH=. python benchmarks/bench_fp4_experts.py [--out DIR] [--tokens 8 32] [--widths v4 v41]
        [--variants NAME ...]

Workload (``WIDTHS``): V4-Flash 256 experts, D 4096, I 2048, activation scales per 128; V4.1-Flash 384
experts, D 5120, I 2304, activation scales per 32; top-6 uniform routing, T tokens; the experts drawn once
as FP4 and held both ways (bench_real_width.fill_experts): packed E2M1 with the checkpoint's E8M0 scale per
32 (weights="fp4") and E4M3 with a scale per 128 (the default load's conversion). Floor: the experts the
routing touches x their bytes (scales included) / measured copy bandwidth, or, where larger (prefill-sized
T), the FLOPs (2 T 6 3 D I) over the measured FP8 rate. Timing: ``kernels.moe_experts`` (routing, both
GEMMs, SwiGLU, combine) replayed from one CUDA graph over four input sets, median (benchmarks/timing.py).
rel: against the bf16 path on the E4M3 experts (the same values).

Variants (``VARIANTS``): the module settings and call arguments each one applies.
"""

from __future__ import annotations

import argparse
import json
import os
from contextlib import contextmanager

import torch

from benchmarks.bench_real_width import fill_experts
from benchmarks.timing import ceilings, rel, run_info, time_graph
from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import triton_fp8_gemm as tg
from deepinfer_adapters.model_impl.layers.experts_fp8 import Fp8Experts

TOPK, LIMIT = 6, 10.0
WIDTHS = {"v4": (256, 4096, 2048, 128), "v41": (384, 5120, 2304, 32)}  # experts, D, I, activation block
# name: (storage, {triton_fp8_gemm attribute: value} set for its calls, moe_experts keyword arguments)
# Session 13 (H200) also timed other configs of fp4_blocks at decode (triton_fp8_gemm.FP4_ROWS_CONFIG's comment).
VARIANTS = {
    "e4m3": ("e4m3", {}, {}),  # the default path (decode: fp8 at V4's scales, bf16 at V4.1's; prefill: bf16)
    # prefill-sized, prepared in session 13 (untimed): the E4M3 experts on the FP8 path. With V4's activation
    # scales per 128 a 64 x 128 tile at 8 warps compiles to 181 registers and ~280 instructions a 128-deep step
    # (offline, Triton 3.6); the default fp8 tile there takes 233 registers, 128 x 128 spills
    "e4m3_fp8": ("e4m3", {}, {"path": "fp8"}),
    "e4m3_fp8_w8": ("e4m3", {}, {"path": "fp8", "config": tg.GemmConfig(64, 128, 1, 8, 3)}),
    "fp4_spans": ("fp4", {"FP4_BLOCK_ACCUMULATE": False}, {}),  # one 64-input span an iteration (before session 13)
    "fp4_blocks": ("fp4", {}, {}),  # the default (prefill: the bf16 path)
    # prefill-sized: fp4_gemm_rows_kernel (the FP8 path) with row tiles of 64 tokens, 8 warps. Session 13, 8192
    # tokens: 1.48x (V4) / 2.35x (V4.1) the E4M3 experts' bf16 path; 128-row tiles 3.6x / 14x (the two fp32
    # accumulators spill): the bf16 path stays the prefill one (RESULTS_fp4_experts_prefill_s13.log)
    "fp4_rows_t64": ("fp4", {"FP4_ROWS_CONFIG": tg.GemmConfig(64, 128, 1, 8, 3)}, {"path": "fp8"}),
}
DECODE_VARIANTS = ["e4m3", "fp4_spans", "fp4_blocks"]


def log(*a):
    print(*a, flush=True)


@contextmanager
def settings(values: dict):
    saved = {k: getattr(tg, k) for k in values}
    for k, v in values.items():
        setattr(tg, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(tg, k, v)


def experts(widths: str, block: int) -> Fp8Experts:
    E, D, I, act_block = WIDTHS[widths]
    mod = Fp8Experts(E, D, I, block=(1, block or 32), scale_dtype=torch.float8_e8m0fnu, act_block=act_block,
                     limit=LIMIT, packed_fp4=block == 0, device="cuda")
    fill_experts(mod, torch.Generator(device="cuda").manual_seed(0))
    return mod


def run_widths(widths: str, args, c) -> list[dict]:
    """Every variant at each token count, at one model's widths."""
    E, D, I, _ = WIDTHS[widths]
    stores = {"e4m3": experts(widths, 128), "fp4": experts(widths, 0)}
    g = torch.Generator(device="cuda").manual_seed(1)
    rows = []
    for T in args.tokens:
        sets = 4
        xs = [torch.randn(T, D, device="cuda", generator=g).bfloat16() for _ in range(sets)]
        ids = [torch.rand(T, E, device="cuda", generator=g).topk(TOPK, dim=1).indices for _ in range(sets)]
        ws = [torch.rand(T, TOPK, device="cuda", generator=g) for _ in range(sets)]
        touched = sum(int(i.unique().numel()) for i in ids) / sets

        def call(i, store, **kw):
            m = stores[store]
            return kernels.moe_experts(xs[i], ws[i], ids[i], m.w13, m.w13_scale, m.w2, m.w2_scale, m.block,
                                       m.act_block, m.limit, **kw)

        ref = call(0, "e4m3", path="bf16")
        row = {"widths": widths, "T": T, "experts_touched": touched, "floor_us": {}, "us": {}, "rel": {}}
        flops = 2 * T * TOPK * 3 * D * I  # prefill-sized T: compute-bound at the FP8 rate
        for store, m in stores.items():
            per_expert = sum(t[0].nbytes for t in (m.w13, m.w13_scale, m.w2, m.w2_scale))
            row["floor_us"][store] = max(touched * per_expert / c["copy_bw"], flops / c["fp8_flops"]) * 1e6
        for name in args.variants:
            store, values, kw = VARIANTS[name]
            with settings(values):
                row["rel"][name] = rel(call(0, store, **kw), ref)
                row["us"][name] = time_graph([lambda i=i, store=store, kw=kw: call(i, store, **kw)
                                              for i in range(sets)])
        rows.append(row)
        log(f"{widths} T={T:3d} ({touched:.0f} experts) floor e4m3 {row['floor_us']['e4m3']:.1f} us, fp4 "
            f"{row['floor_us']['fp4']:.1f} | " + " | ".join(
                f"{n} {us:.1f} ({us / row['floor_us'][VARIANTS[n][0]]:.2f}x, rel {row['rel'][n]:.0e})"
                for n, us in row["us"].items()))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--tokens", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--variants", nargs="+", default=DECODE_VARIANTS, choices=list(VARIANTS))
    ap.add_argument("--widths", nargs="+", default=["v4"], choices=list(WIDTHS))
    args = ap.parse_args()
    info = run_info()
    c = ceilings()
    log(f"INFO {json.dumps(info)}")
    rows = []
    for widths in args.widths:
        rows += run_widths(widths, args, c)
    with open(os.path.join(args.out, "bench_fp4_experts.json"), "w") as fh:
        json.dump({"info": info, "copy_TBs": c["copy_bw"] / 1e12, "rows": rows}, fh, indent=1)
    log("\nSUMMARY routed experts of one layer (us, CUDA-graph replays)")
    for row in rows:
        base = row["us"].get("fp4_spans")
        log(f"  {row['widths']} T={row['T']:3d}: " + ", ".join(
            f"{n} {us:.1f}" + (f" ({us / base:.3f} of spans)" if base and n.startswith("fp4_blocks") else "")
            for n, us in row["us"].items()))


if __name__ == "__main__":
    main()
