"""The batch-invariant bf16-weight linear (kernels/triton_linear.py) at the LM head's and the MoE
gate's shapes, by tile config, next to cuBLAS (the default path's "cublas_split") and the floor.

    PYTHONPATH=. python benchmarks/bench_invariant_linear.py [--out DIR]

Why: in the engine's batch-invariant decode at batch 1 this kernel took 0.69 ms for the head and
7 gates (profile, BENCHMARKS.md session 5) against ~0.32 ms for the head's 1.3 GB.
Timing: CUDA-graph replays (timing.time_graph), median of 20; rows 1 and 8.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from benchmarks.timing import ceilings, run_info, time_graph
from deepinfer_adapters.kernels import cublas_linear, invariance
from deepinfer_adapters.kernels import triton_linear as tl_

SHAPES = {"head": (129280, 5120), "gate": (384, 5120)}
CONFIGS = {f"n{n}_k{k}_w{w}_s{s}_p{p}_m{m}": tl_.LinearConfig(n, k, w, s, p, m)
           for n, k, w, s, p, m in ((128, 128, 4, 3, 264, 4), (128, 128, 4, 3, 0, 4), (128, 64, 4, 3, 264, 4),
                                    (64, 128, 4, 4, 264, 4), (128, 128, 4, 3, 528, 4),
                                    # the gate's K split (session 10): shorter splits, narrower column tiles
                                    (128, 128, 4, 3, 528, 2), (128, 128, 4, 3, 528, 1), (64, 128, 4, 3, 528, 2),
                                    (64, 128, 4, 3, 528, 1), (32, 128, 4, 3, 528, 2))}
DEFAULT = "n128_k128_w4_s3_p264_m4"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    info = run_info()
    copy_bw = ceilings()["copy_bw"]
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for name, (N, K) in SHAPES.items():
        sets = max(1, min(16, int(4 * 60e6 // (N * K * 2)) + 1))
        ws = [torch.randn(N, K, device="cuda", generator=g).bfloat16() for _ in range(sets)]
        for M in (1, 8, 32):
            xs = [torch.randn(M, K, device="cuda", generator=g).bfloat16().float() for _ in range(sets)]
            row = {"op": name, "M": M, "N": N, "K": K, "floor_us": (N * K * 2 + M * (K + N) * 4) / copy_bw * 1e6,
                   "us": {"cublas_split": time_graph([lambda x=x, w=w: cublas_linear.linear(x, w) for x, w in zip(xs, ws)])}}
            ref = xs[0].double() @ ws[0].double().T
            with invariance.batch_invariant(True):
                for cname, cfg in CONFIGS.items():
                    if name == "head" and cfg.min_steps < 4:  # the head never splits K
                        continue
                    out = tl_.linear(xs[0], ws[0], config=cfg)
                    assert float((out.double() - ref).abs().max() / ref.abs().max()) < 1e-5, cname
                    row["us"][cname] = time_graph([lambda x=x, w=w, cfg=cfg: tl_.linear(x, w, config=cfg)
                                                   for x, w in zip(xs, ws)])
            rows.append(row)
            best = min((v, k) for k, v in row["us"].items() if k != "cublas_split")
            print(f"{name:5s} M={M}: floor {row['floor_us']:7.1f} us | cublas {row['us']['cublas_split']:7.1f} | "
                  f"default {row['us'][DEFAULT]:7.1f} | best {best[1]} {best[0]:7.1f} | "
                  + " ".join(f"{k} {v:.1f}" for k, v in row["us"].items()), flush=True)
    with open(os.path.join(args.out, "bench_invariant_linear.json"), "w") as fh:
        json.dump({"info": info, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
