"""The index selection's top-k at decode shapes: the Triton kernel by radix width and warps, and torch.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_topk.py

Why: the reduced V4.1 decode step runs four top-ks (index rows of ratio 2 and 1 at context 4k, the
candidate pool's blocks). In session 11's H200 profile at 8 sequences the kernel finding the k-th
largest key one bit a pass (32 serial reductions) took 13-27 us a call, a 256-bin histogram per
8 bits 22-42 us. Every variant returns the same picks (checked against torch.topk's set below), so
the fastest changes no value. Timing: CUDA-graph replays (timing.time_graph), median us.
"""

from __future__ import annotations

import torch

from benchmarks.timing import time_graph
from deepinfer_adapters.kernels import reference, triton_topk

# (rows, row length, k): index scores of ratio 2 / 1 at context 4096 for 1, 8, 32 sequences, a pool
SHAPES = [(1, 4096, 512), (8, 2048, 512), (8, 4096, 512), (32, 4096, 512), (8, 64, 16)]
VARIANTS = [(bits, scale) for bits in (1, 2, 4) for scale in (1, 2, 4)]


def scores(n: int, m: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(m + n)
    s = torch.randn(n, m, device="cuda", generator=g).bfloat16()
    s[:, m // 2:] = float("-inf")  # half the rows not yet visible, as early in a sequence
    s[:, 1::13] = 0.25
    return s


def main():
    default_warps = triton_topk.warps
    print(f"{'rows x len, k':>18} {'torch':>8} " + " ".join(f"{f'b{b} w{s}x':>8}" for b, s in VARIANTS))
    for n, m, k in SHAPES:
        s = scores(n, m)
        want = reference.topk_torch_order(s, k)[0]
        row = [time_graph([lambda: reference.topk_torch_order(s, k)])]
        for bits, scale in VARIANTS:
            triton_topk.RADIX_BITS = bits
            triton_topk.warps = lambda block, scale=scale: min(16, scale * default_warps(block))
            assert torch.equal(triton_topk.topk_torch_order(s, k)[0], want), (n, m, k, bits, scale)
            row.append(time_graph([lambda: triton_topk.topk_torch_order(s, k)]))
        print(f"{f'{n} x {m}, {k}':>18} " + " ".join(f"{t:8.1f}" for t in row))
    triton_topk.warps = default_warps


if __name__ == "__main__":
    main()
