"""The indexer's ``index_scores`` (Triton) alone at prefill and decode shapes: V4.1's 32 index heads x 128.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_index_scores.py [--sweep]
Prefill: 8192 queries against 2048 or 8192 shared keys (FLOPs 2 n m H d: 137 / 550 GFLOP), and 8192 x 8192
with each query's visible count (a ratio-1 layer's causal mask: about half the products); decode: 1 and
8 queries, each with its own 2048 keys. Timing: eager calls between CUDA events, median of 10 (decode
figures include the launch, so they are upper bounds; the model's decode runs them in CUDA graphs).
--sweep: the causal prefill case under other tiles (keys a product, query-head rows a product, warps,
stages), each checked against the default's bits and against the reference on 512 of its queries.
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.timing import run_info, time_eager
from deepinfer_adapters.kernels import reference, triton_index

H, D = 32, 128


SWEEP = [  # (BLOCK_K, ROWS, NUM_WARPS, NUM_STAGES)
    (64, 128, 4, None), (32, 128, 4, None), (128, 128, 4, None), (64, 128, 8, None), (128, 128, 8, None),
    (64, 64, 4, None), (128, 64, 4, None), (64, 128, 4, 3), (64, 128, 4, 4), (128, 128, 8, 3), (64, 256, 8, None),
]


def sweep(g: torch.Generator) -> None:
    n = m = 8192
    q = torch.randn(n, H, D, device="cuda", generator=g).bfloat16()
    keys = torch.randn(m, D, device="cuda", generator=g).bfloat16()
    w = (torch.rand(n, H, device="cuda", generator=g) * H**-0.5 * D**-0.5).bfloat16()
    visible = torch.arange(1, n + 1, device="cuda")
    rows = slice(7000, 7512)
    ref = reference.index_scores(q[rows], keys, w[rows], visible[rows]).float()
    seen = torch.isfinite(ref)
    default, base = (triton_index.BLOCK_K, triton_index.ROWS, triton_index.NUM_WARPS, triton_index.NUM_STAGES), None
    for cfg in SWEEP:
        triton_index.BLOCK_K, triton_index.ROWS, triton_index.NUM_WARPS, triton_index.NUM_STAGES = cfg
        try:
            us = time_eager(lambda: triton_index.index_scores(q, keys, w, visible), reps=10, warm=1)
            out = triton_index.index_scores(q, keys, w, visible)
            base = out if base is None else base
            got = out[rows].float()
            err = float(((got - ref).abs()[seen] / (2**-7 * (ref.abs()[seen] + ref[seen].abs().max()))).max())
            print(f"sweep block_k={cfg[0]} rows={cfg[1]} warps={cfg[2]} stages={cfg[3]}: {us:8.1f} us, "
                  f"{n * m * H * D / us / 1e6:.0f} TFLOP/s (causal half), same bits as the first "
                  f"{torch.equal(out, base)}, -inf where unseen {torch.equal(torch.isinf(got), ~seen)}, "
                  f"max err / tolerance {err:.3f}", flush=True)
        except Exception as e:  # a tile that does not compile or fit: record, go on
            print(f"sweep {cfg}: failed {type(e).__name__}: {str(e)[:200]}", flush=True)
        finally:
            triton_index.BLOCK_K, triton_index.ROWS, triton_index.NUM_WARPS, triton_index.NUM_STAGES = default


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", action="store_true")
    args = ap.parse_args()
    print(f"INFO {json.dumps(run_info())}", flush=True)
    g = torch.Generator(device="cuda").manual_seed(5)
    if args.sweep:
        sweep(g)
        return
    for n, m, causal in ((8192, 2048, False), (8192, 8192, False), (8192, 8192, True), (1, 2048, False),
                         (8, 2048, False)):
        own = n <= 8
        q = torch.randn(n, H, D, device="cuda", generator=g).bfloat16()
        keys = torch.randn(*((n,) if own else ()), m, D, device="cuda", generator=g).bfloat16()
        w = torch.rand(n, H, device="cuda", generator=g).bfloat16()
        visible = torch.arange(1, n + 1, device="cuda") * m // n if causal else None
        us = time_eager(lambda: triton_index.index_scores(q, keys, w, visible), reps=10, warm=1)
        print(f"index_scores n={n} m={m} own keys={own} causal={causal}: {us:.1f} us, "
              f"{2 * n * m * H * D / us / 1e6:.0f} TFLOP/s (of all products)", flush=True)


if __name__ == "__main__":
    main()
