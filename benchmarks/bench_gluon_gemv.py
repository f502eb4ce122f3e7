"""The decode GEMV on FP8 products in Gluon (``kernels/gluon_gemv.py``) against the Triton decode GEMV
(``triton_fp8_gemm.fp8_linear``, as dispatched), same inputs: time and bits, V4.1's dense linears at 1 and 8
rows, with the ring depth and the lanes (warpgroups an SM) swept.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_gluon_gemv.py
``--compile-only`` compiles the kernel for sm_90 with no GPU (Triton 3.6, the GPU machine's, in a scratch
venv) and prints its shared memory, registers and wgmma count.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os

import torch

ROWS = (1, 8)


def _offline_pdl() -> dict:
    """The PDL constexprs a GPU launch takes at the module's settings (``gluon_gemv.pdl_options`` with a GPU)."""
    from deepinfer_adapters.kernels import gluon_gemv

    return {"PDL": gluon_gemv.GLUON_PDL, "NEXT_LAUNCH": gluon_gemv.NEXT_LAUNCH_POINTS.index(gluon_gemv.NEXT_LAUNCH)}


def compile_offline(stages: int, pairs: bool = False, w_bk: int = 32, lanes: int = 1) -> None:
    """The dense GEMV (weight scales per [32, 32]) or, ``pairs``, one token's experts (per (1, ``w_bk``))."""
    from triton.experimental.gluon import language as gl

    from benchmarks.gluon_offline import compile_sm90
    from deepinfer_adapters.kernels import gluon_gemv
    from deepinfer_adapters.kernels.gluon_gemv_jit import fp8_gemv_kernel

    R, T = gluon_gemv.ROWS, gluon_gemv.TOKENS
    w_layout = gl.NVMMASharedLayout.get_default_for([R, 128], gl.float8e4nv)
    a_layout = gl.NVMMASharedLayout.get_default_for([T, 128], gl.float8e4nv)
    sig = {"w_desc": f"tensordesc<fp8e4nv[{R},128],{w_layout!r}>",
           "a_desc": f"tensordesc<fp8e4nv[{T},128],{a_layout!r}>", "WS": "*u8" if w_bk == 128 else "*i32",
           "AS": "*fp32", "OUT": "*bf16" if pairs else "*fp32", "EXPERT": "*i32", "AROW": "*i32",
           "N": "i32", "M": "i32", "K": "i32", "k_per_split": "i32", "n_splits": "i32", "n_items": "i32",
           "tiles_per_pair": "i32", "NT": "i32", "KT": "i32", "stride_wsn": "i32", "stride_asm": "i32",
           "stride_om": "i32", "stride_os": "i32", "STAGES": "constexpr", "W_BN": "constexpr", "W_BK": "constexpr",
           "PAIRS": "constexpr", "LANES": "constexpr", "PDL": "constexpr", "NEXT_LAUNCH": "constexpr"}
    divisible = ("WS", "AS", "OUT", "K", "k_per_split", "stride_asm", "stride_om", "stride_os")
    compile_sm90(fp8_gemv_kernel, sig, {"STAGES": stages, "W_BN": 1 if pairs else 32, "W_BK": w_bk, "PAIRS": pairs,
                                        "LANES": lanes, **_offline_pdl()},
                 divisible, f"fp8_gemv_kernel (STAGES={stages}, PAIRS={pairs}, W_BK={w_bk}, LANES={lanes})")


def compile_offline_bf16(stages: int, group_rows: int = 1024, lanes: int = 2) -> None:
    """``bf16_gemv_kernel``: a decode step's wo_a (bf16 products, weight scales per [32, 32], rows grouped)."""
    from triton.experimental.gluon import language as gl

    from benchmarks.gluon_offline import compile_sm90
    from deepinfer_adapters.kernels import gluon_gemv
    from deepinfer_adapters.kernels.gluon_gemv_jit import bf16_gemv_kernel

    R, T = gluon_gemv.ROWS, gluon_gemv.TOKENS
    w_layout = gl.NVMMASharedLayout.get_default_for([R, 128], gl.float8e4nv)
    a_layout = gl.NVMMASharedLayout.get_default_for([T, 128], gl.bfloat16)
    sig = {"w_desc": f"tensordesc<fp8e4nv[{R},128],{w_layout!r}>", "a_desc": f"tensordesc<bf16[{T},128],{a_layout!r}>",
           "WS": "*i32", "OUT": "*fp32", "N": "i32", "M": "i32", "K": "i32", "k_per_split": "i32", "n_splits": "i32",
           "n_items": "i32", "stride_wsn": "i32", "stride_om": "i32", "stride_os": "i32", "STAGES": "constexpr",
           "W_BN": "constexpr", "GROUP_ROWS": "constexpr", "LANES": "constexpr", "PDL": "constexpr",
           "NEXT_LAUNCH": "constexpr"}
    divisible = ("WS", "OUT", "N", "K", "k_per_split", "stride_om", "stride_os")
    compile_sm90(bf16_gemv_kernel, sig, {"STAGES": stages, "W_BN": 32, "GROUP_ROWS": group_rows, "LANES": lanes,
                                         **_offline_pdl()},
                 divisible, f"bf16_gemv_kernel (STAGES={stages}, GROUP_ROWS={group_rows}, LANES={lanes})")


def gluon_gemv_stages(lanes: int = 1) -> int:
    from deepinfer_adapters.kernels import gluon_gemv

    return gluon_gemv.TWO_LANE_STAGES if lanes == 2 else gluon_gemv.STAGES


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--compile-only", action="store_true", help="compile for sm_90 offline, no GPU")
    ap.add_argument("--stages", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--grouped", action="store_true",
                    help="time wo_a instead: the Triton grouped kernel against bf16_gemv_kernel")
    ap.add_argument("--lanes", type=int, nargs="+", default=[1, 2], help="the kernels' warpgroups an SM")
    ap.add_argument("--shares", type=float, nargs="+", default=[1.0, 0.875],
                    help="bf16_gemv_kernel's share of the SMs (--grouped)")
    args = ap.parse_args()
    if args.compile_only:
        from deepinfer_adapters.kernels import gluon_gemv

        for stages, lanes in itertools.product(args.stages, args.lanes):
            compile_offline(stages, lanes=lanes)
        for w_bk, lanes in itertools.product((128, 32), args.lanes):
            compile_offline(gluon_gemv_stages(lanes), pairs=True, w_bk=w_bk, lanes=lanes)
        compile_offline_bf16(gluon_gemv.GROUPED_STAGES, lanes=gluon_gemv.GROUPED_LANES)
        return

    from benchmarks.bench_decode_gemv import BLOCK, LINEARS, PER_LAYER, random_weight
    from benchmarks.timing import L2_BYTES, ceilings, rel, run_info, time_graph
    from deepinfer_adapters.kernels import gluon_gemv, reference_fp8
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg

    info = run_info()
    bw = ceilings()["copy_bw"]
    print(f"INFO {info} copy {bw / 1e12:.2f} TB/s", flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    if args.grouped:
        return time_grouped(args, bw, g)
    totals: dict[tuple[int, str], float] = {}
    for M in ROWS:
        for name in (*PER_LAYER, "engram_wkv"):
            N, K = LINEARS[name]
            sets = max(1, min(32, math.ceil(4 * L2_BYTES / (N * K))))
            ws = [random_weight(N, K, g) for _ in range(sets)]
            xs = [torch.randn(M, K, device="cuda", generator=g).bfloat16() for _ in range(sets)]
            ref = reference_fp8.fp8_linear(xs[0], *ws[0], BLOCK, 32)
            floor = (N * K * (1 + 1 / 1024) + M * K * 2 + M * N * 2) / bw * 1e6
            row = {"triton": time_graph([lambda x=x, w=w: tg.fp8_linear(x, *w, BLOCK, 32)
                                         for x, w in zip(xs, ws)])}
            rels = {}
            for stages, lanes in itertools.product(args.stages, args.lanes):
                gluon_gemv.STAGES = gluon_gemv.TWO_LANE_STAGES = stages
                gluon_gemv.TWO_LANE_ROWS = gluon_gemv.TOKENS if lanes == 2 else 0
                key = f"gluon_s{stages}_l{lanes}"
                try:
                    out = gluon_gemv.fp8_linear(xs[0], *ws[0], BLOCK, 32)
                    rels[key] = rel(out, ref)
                    row[key] = time_graph([lambda x=x, w=w: gluon_gemv.fp8_linear(x, *w, BLOCK, 32)
                                           for x, w in zip(xs, ws)])
                except Exception as e:  # a variant that does not compile or run: say so, go on
                    row[key] = float("nan")
                    print(f"{name} M={M} {key}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            for key, us in row.items():
                if name in PER_LAYER:
                    totals[M, key] = totals.get((M, key), 0.0) + us
            best = min((v, k) for k, v in row.items() if v == v)
            print(f"{name:11s} M={M:2d} floor {floor:6.1f} us | triton {row['triton']:6.1f} | "
                  + " ".join(f"{k[6:]} {v:6.1f}" for k, v in row.items() if k != "triton")
                  + f" | best {best[1]} | rel vs ref {max(rels.values(), default=float('nan')):.1e}", flush=True)
    print("\nSUMMARY a CSA layer's dense GEMVs (us, CUDA-graph replays): " + ", ".join(PER_LAYER))
    for M in ROWS:
        print(f"M={M}: " + ", ".join(f"{k} {v:.1f}" for (m, k), v in sorted(totals.items()) if m == M))


def time_grouped(args, bw: float, g: torch.Generator) -> None:
    """wo_a (8 groups of 1024 rows over 4096 inputs, bf16 activations): the Triton grouped kernel against
    ``bf16_gemv_kernel`` over the ring depths, warpgroups and SM shares, at 1 and 8 rows."""
    from benchmarks.bench_decode_gemv import BLOCK, random_weight
    from benchmarks.timing import L2_BYTES, rel, time_graph
    from deepinfer_adapters.kernels import gluon_gemv, reference_fp8
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg

    G, R, K = 8, 1024, 4096
    sets = max(1, min(32, math.ceil(4 * L2_BYTES / (G * R * K))))
    ws = [random_weight(G * R, K, g) for _ in range(sets)]
    for M in ROWS:
        xs = [torch.randn(M, G, K, device="cuda", generator=g).bfloat16() for _ in range(sets)]
        ref = reference_fp8.fp8_grouped_linear(xs[0], *ws[0], BLOCK)
        floor = (G * R * K * (1 + 1 / 1024) + M * G * (K + R) * 2) / bw * 1e6
        row = {"triton": time_graph([lambda x=x, w=w: tg.fp8_grouped_linear(x, *w, BLOCK) for x, w in zip(xs, ws)])}
        rels = {"triton": rel(tg.fp8_grouped_linear(xs[0], *ws[0], BLOCK), ref)}
        for stages, lanes, share in itertools.product(args.stages, args.lanes, args.shares):
            gluon_gemv.GROUPED_STAGES = stages
            gluon_gemv.GROUPED_LANES, gluon_gemv.GROUPED_SM_SHARE = lanes, share
            key = f"s{stages}_l{lanes}_sh{share:g}"
            try:
                rels[key] = rel(gluon_gemv.grouped_linear(xs[0], *ws[0], BLOCK), ref)
                row[key] = time_graph([lambda x=x, w=w: gluon_gemv.grouped_linear(x, *w, BLOCK)
                                       for x, w in zip(xs, ws)])
            except Exception as e:  # a variant that does not compile or run: say so, go on
                row[key] = float("nan")
                print(f"wo_a M={M} {key}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        print(f"wo_a M={M:2d} floor {floor:6.1f} us | " + " ".join(f"{k} {v:6.1f}" for k, v in row.items())
              + f" | rel vs ref max {max(rels.values()):.1e}", flush=True)


if __name__ == "__main__":
    main()
