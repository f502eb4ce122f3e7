"""The index top-k (``kernels/triton_topk.py``) alone at a decode step's shapes: rows of the indexer's scores
(1 or 8 of them; 1026, 2052 and 4104 scores; k = 512) over the scores a thread holds
(``ROW_PER_THREAD``, which sets the program's warps up to ``MAX_WARPS``), each against the default's picks.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_topk.py [--per-thread 4 8 16 32] [--widths ...]
[--dtypes bf16 fp32] [--rows 1 8] [--max-warps 16 32]. Each setting compiles the kernel anew for each width and
dtype: ~100 s covered 8 of the 48 cases of session 21's defaults (a decode step's scores are bf16 in the model).
"""

from __future__ import annotations

import argparse

import torch

ROWS = (1, 8)
WIDTHS = (1026, 2052, 4104)
K = 512
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-thread", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS))
    ap.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["bf16"])
    ap.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    ap.add_argument("--max-warps", type=int, nargs="+", default=None,
                    help="triton_topk.MAX_WARPS settings to sweep with each --per-thread (default: the module's)")
    args = ap.parse_args()
    from benchmarks.timing import run_info, time_graph
    from deepinfer_adapters.kernels import triton_topk

    print(f"INFO {run_info()}", flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    default = (triton_topk.ROW_PER_THREAD, triton_topk.MAX_WARPS)
    settings = [(per, warps) for per in args.per_thread for warps in (args.max_warps or [default[1]])]

    def use(setting):
        triton_topk.ROW_PER_THREAD, triton_topk.MAX_WARPS = setting

    for dtype in (DTYPES[d] for d in args.dtypes):
        for n in args.rows:
            for m in args.widths:
                sets = [torch.randn(n, m, device="cuda", generator=g).to(dtype) for _ in range(4)]
                use(default)
                want = triton_topk.topk_torch_order(sets[0], K)
                row = {}
                for setting in settings:
                    use(setting)
                    got = triton_topk.topk_torch_order(sets[0], K)
                    same = torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
                    row[setting] = (time_graph([lambda s=s: triton_topk.topk_torch_order(s, K) for s in sets]), same)
                use(default)
                print(f"topk {str(dtype)[6:]:8s} rows {n} x {m:5d}: "
                      + " ".join(f"{per}/thread <={warps} warps {us:5.1f} us{'' if same else ' (OTHER PICKS)'}"
                                 for (per, warps), (us, same) in row.items()), flush=True)


if __name__ == "__main__":
    main()
