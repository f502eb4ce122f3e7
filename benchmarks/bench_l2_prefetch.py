"""Would a decode GEMV's weights prefetched into L2 on a side stream, while the critical path runs its latency-bound
small kernels, make the GEMV faster? A feasibility measurement (session 23), not a product path.

At V4.1 B=1 the dense GEMVs run at ~2x their bytes (wq_b 20 us against a 10-us floor) and between them the critical
path is ~60-70 us a layer of small kernels that leave DRAM idle. The H200's L2 is 50 MB; wq_b and wo_b are 42 MB
each. For each weight (CUDA-graph replays, several weight sets so that each GEMV starts L2-cold):
- ``gemv``: the Gluon GEMV alone (M = 1);
- ``prefetch``: a Triton kernel of a few programs issuing ``prefetch.global.L2`` (or ``::evict_last``) for each
  128-byte line of the first FRACTION of the weight;
- ``prefetch+gemv``: both in one stream (their difference from ``prefetch`` is the GEMV's time from a warm L2);
- ``chain+gemv``: a chain of small kernels (CHAIN x a 5120-wide add, latency-bound) then the GEMV, against
  ``chain||prefetch+gemv``: the prefetch forked onto a side stream next to the chain, joined before the GEMV --
  the case a model step would have.
Usage (H200): ``python benchmarks/bench_l2_prefetch.py [--fractions 0.5 1.0] [--chain 20]``."""

from __future__ import annotations

import argparse
import functools
import math

import torch

from benchmarks.bench_decode_gemv import BLOCK, LINEARS, random_weight
from benchmarks.timing import L2_BYTES, run_info, time_graph

LINE = 128  # bytes an L2 line


@functools.cache  # one JIT function: each new one would look its compiled kernel up again
def _prefetch_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def l2_prefetch_kernel(P, n_lines, EVICT_LAST: tl.constexpr, BLOCK_LINES: tl.constexpr):
        """Each program issues L2 prefetches for lines pid * BLOCK_LINES + ..., grid-strided."""
        lanes = tl.arange(0, BLOCK_LINES)
        for start in range(tl.program_id(0) * BLOCK_LINES, n_lines, tl.num_programs(0) * BLOCK_LINES):
            line = tl.minimum(start + lanes, n_lines - 1).to(tl.int64)
            ptrs = P + line * 128
            if EVICT_LAST:
                tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1]; // dummy $0", "=r,l", [ptrs],
                                          dtype=tl.int32, is_pure=False, pack=1)
            else:
                tl.inline_asm_elementwise("prefetch.global.L2 [$1]; // dummy $0", "=r,l", [ptrs],
                                          dtype=tl.int32, is_pure=False, pack=1)

    return l2_prefetch_kernel


def prefetch(t: torch.Tensor, fraction: float, evict_last: bool, programs: int = 16) -> None:
    kernel = _prefetch_kernel()
    n_lines = max(1, int(t.numel() * t.element_size() * fraction) // LINE)
    kernel[(programs,)](t.view(torch.uint8).view(-1), n_lines, EVICT_LAST=evict_last, BLOCK_LINES=1024, num_warps=8)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--linears", nargs="*", default=["wq_a+wkv", "wq_b", "wo_b", "shared_w13"])
    ap.add_argument("--fractions", type=float, nargs="*", default=[0.5, 1.0])
    ap.add_argument("--chain", type=int, default=20, help="small kernels in the latency-bound chain")
    args = ap.parse_args()
    from deepinfer_adapters.kernels import gluon_gemv

    print(f"INFO {run_info()}", flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    side = torch.cuda.Stream()
    h = torch.zeros(5120, device="cuda", dtype=torch.bfloat16)

    def chain():
        for _ in range(args.chain):
            h.add_(1)

    for name in args.linears:
        N, K = LINEARS[name]
        sets = max(2, min(16, math.ceil(3 * L2_BYTES / (N * K))))
        ws = [random_weight(N, K, g) for _ in range(sets)]
        x = torch.randn(1, K, device="cuda", generator=g).bfloat16()

        def gemv(w):
            return gluon_gemv.fp8_linear(x, *w, BLOCK, 32)

        base = time_graph([lambda w=w: gemv(w) for w in ws])
        chained = time_graph([lambda w=w: (chain(), gemv(w)) for w in ws])
        print(f"{name:11s} {N * K / 1e6:5.1f} MB: gemv {base:6.1f} us | chain+gemv {chained:6.1f}", flush=True)
        for fraction in args.fractions:
            for evict_last in (False, True):
                alone = time_graph([lambda w=w: prefetch(w[0], fraction, evict_last) for w in ws])
                both = time_graph([lambda w=w: (prefetch(w[0], fraction, evict_last), gemv(w)) for w in ws])

                def forked(w):
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        prefetch(w[0], fraction, evict_last)
                    chain()
                    torch.cuda.current_stream().wait_stream(side)
                    return gemv(w)

                overlapped = time_graph([lambda w=w: forked(w) for w in ws])
                print(f"  fraction {fraction:.2f} evict_last {evict_last!s:5}: prefetch {alone:6.1f} | "
                      f"prefetch+gemv {both:6.1f} (gemv from L2 ~{both - alone:5.1f}) | "
                      f"chain||prefetch+gemv {overlapped:6.1f} (against chain+gemv {chained:6.1f})", flush=True)


if __name__ == "__main__":
    main()
