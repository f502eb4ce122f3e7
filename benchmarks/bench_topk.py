"""The index top-k alone at a decode step's shapes: rows of the indexer's scores (1 or 8 of them; 1026, 2052 and
4104 scores; k = 512), the Triton kernel (``kernels/triton_topk.py``) over the scores a thread holds
(``ROW_PER_THREAD``, which sets the program's warps up to ``MAX_WARPS``) and the Gluon one (``gluon_topk.py``) over
its own ``ROW_PER_THREAD``, each against the Triton default's picks.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_topk.py [--per-thread 4 8 16 32] [--widths ...]
[--dtypes bf16 fp32] [--rows 1 8] [--max-warps 16 32] [--gluon-per-thread 4 8 16] [--gluon-split]. Each setting
compiles the kernel anew for each width and dtype: ~100 s covered 8 of the 48 cases of session 21's defaults (a
decode step's scores are bf16 in the model).
"""

from __future__ import annotations

import argparse
import functools

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
    ap.add_argument("--gluon-per-thread", type=int, nargs="*", default=[],
                    help="gluon_topk.ROW_PER_THREAD settings (the Gluon kernel; none: not timed)")
    ap.add_argument("--gluon-split", action="store_true",
                    help="each Gluon setting also with the row in two parts (gluon_topk.SPLIT_ROW)")
    args = ap.parse_args()
    from benchmarks.timing import run_info, time_graph
    from deepinfer_adapters.kernels import gluon_topk, triton_topk

    print(f"INFO {run_info()}", flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    default = ("triton", triton_topk.ROW_PER_THREAD, triton_topk.MAX_WARPS)
    settings = [("triton", per, warps) for per in args.per_thread for warps in (args.max_warps or [default[2]])]
    settings += [(kernel, per, gluon_topk.MAX_WARPS) for per in args.gluon_per_thread
                 for kernel in (("gluon", "gluon_split") if args.gluon_split else ("gluon",))]
    gluon_default = (gluon_topk.ROW_PER_THREAD, gluon_topk.SPLIT_ROW)

    def use(setting):
        kernel, per, warps = setting
        if kernel == "triton":
            triton_topk.ROW_PER_THREAD, triton_topk.MAX_WARPS = per, warps
            return triton_topk.topk_torch_order
        gluon_topk.ROW_PER_THREAD, gluon_topk.SPLIT_ROW = per, kernel == "gluon_split"
        return functools.partial(gluon_topk.topk, torch_order=True)

    for dtype in (DTYPES[d] for d in args.dtypes):
        for n in args.rows:
            for m in args.widths:
                sets = [torch.randn(n, m, device="cuda", generator=g).to(dtype) for _ in range(4)]
                want = use(default)(sets[0], K)
                row = {}
                for setting in settings:
                    topk = use(setting)
                    got = topk(sets[0], K)
                    same = torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
                    row[setting] = (time_graph([lambda s=s, topk=topk: topk(s, K) for s in sets]), same)
                use(default)
                gluon_topk.ROW_PER_THREAD, gluon_topk.SPLIT_ROW = gluon_default
                print(f"topk {str(dtype)[6:]:8s} rows {n} x {m:5d}: "
                      + " ".join(f"{kernel} {per}/thread <={warps} warps {us:5.1f} us{'' if same else ' (OTHER PICKS)'}"
                                 for (kernel, per, warps), (us, same) in row.items()), flush=True)


if __name__ == "__main__":
    main()
