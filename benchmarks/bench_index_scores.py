"""The indexer's ``index_scores`` (Triton) alone at prefill and decode shapes: V4.1's 32 index heads x 128.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_index_scores.py
Prefill: 8192 queries against 2048 or 8192 shared keys (FLOPs 2 n m H d: 137 / 550 GFLOP); decode: 1 and
8 queries, each with its own 2048 keys. Timing: eager calls between CUDA events, median of 10 (decode
figures include the launch, so they are upper bounds; the model's decode runs them in CUDA graphs).
"""

from __future__ import annotations

import json

import torch

from benchmarks.timing import run_info
from deepinfer_adapters.kernels import triton_index

H, D = 32, 128


def main():
    print(f"INFO {json.dumps(run_info())}", flush=True)
    g = torch.Generator(device="cuda").manual_seed(5)
    for n, m in ((8192, 2048), (8192, 8192), (1, 2048), (8, 2048)):
        own = n <= 8
        q = torch.randn(n, H, D, device="cuda", generator=g).bfloat16()
        keys = torch.randn(*((n,) if own else ()), m, D, device="cuda", generator=g).bfloat16()
        w = torch.rand(n, H, device="cuda", generator=g).bfloat16()
        triton_index.index_scores(q, keys, w)
        times = []
        for _ in range(10):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            triton_index.index_scores(q, keys, w)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3)
        us = sorted(times)[len(times) // 2]
        print(f"index_scores n={n} m={m} own keys={own}: {us:.1f} us, {2 * n * m * H * D / us / 1e6:.0f} TFLOP/s",
              flush=True)


if __name__ == "__main__":
    main()
