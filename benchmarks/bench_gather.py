"""Decode-step row gathers by method: the window ring read and the selected compressed rows.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_gather.py

Why: at 32 sequences (V4-Flash widths, H200 profile, session 6) the decode step's advanced-
indexing gathers (``ring[slots[:, None], read]``, ``pool[addresses]``) ran at ~0.3-1.1 TB/s,
~15 us each. Every method below copies the same rows (the results are checked equal), so a
faster one changes no value. Timing: CUDA-graph replays (timing.time_graph), median.
"""

from __future__ import annotations

import torch

from benchmarks.timing import ceilings, time_graph

D, W, K, POOL_ROWS, SLOTS = 512, 128, 512, 200_000, 160


def methods_ring(ring, slots, read):
    flat = ring.flatten(0, 1)
    addr = (slots[:, None] * ring.shape[1] + read).flatten()
    return {
        "advanced index": lambda: ring[slots[:, None], read],
        "index_select (flat)": lambda: flat.index_select(0, addr).view(*read.shape, ring.shape[-1]),
        "embedding (flat)": lambda: torch.nn.functional.embedding(addr, flat).view(*read.shape, ring.shape[-1]),
    }


def methods_pool(pool, addr):
    return {
        "advanced index": lambda: pool[addr],
        "index_select": lambda: pool.index_select(0, addr.flatten()).view(*addr.shape, pool.shape[-1]),
        "embedding": lambda: torch.nn.functional.embedding(addr, pool),
    }


def main():
    c = ceilings()
    g = torch.Generator(device="cuda").manual_seed(0)
    ring = torch.randn(SLOTS, W, D, device="cuda", generator=g).bfloat16()
    pool = torch.randn(POOL_ROWS, D, device="cuda", generator=g).bfloat16()
    print(f"copy {c['copy_bw'] / 1e12:.2f} TB/s")
    for B in (1, 8, 32, 128):
        slots = torch.randperm(SLOTS, device="cuda", generator=g)[:B]
        read = (torch.arange(W, device="cuda") + torch.randint(0, W, (B, 1), device="cuda", generator=g)) % W
        addr = torch.randint(0, POOL_ROWS, (B, K), device="cuda", generator=g)
        for what, ms, nbytes in (("ring", methods_ring(ring, slots, read), B * W * D * 2),
                                 ("pool", methods_pool(pool, addr), B * K * D * 2)):
            want = next(iter(ms.values()))()
            row = []
            for name, fn in ms.items():
                assert torch.equal(fn(), want), (what, name)
                us = time_graph([fn])
                row.append(f"{name} {us:6.1f} us ({2 * nbytes / us / 1e6:.2f} TB/s)")
            print(f"B={B:3d} {what}: " + " | ".join(row))


if __name__ == "__main__":
    main()
