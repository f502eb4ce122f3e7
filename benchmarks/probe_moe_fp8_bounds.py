"""Where the FP8 MoE kernel's time goes (``gluon_moe.grouped_gemm_fp8``, V4.1's w13 and w2 at 8192 tokens): the
same launch (uniform routing, or ``--skew``) with parts of its work taken away through its tile table or the
kernel's probe-only ``DROP``, timed side by side.

- ``full``: the model's call (the experts as native_format converts them: one scale per 128 x 128 tile, the
  kernel's UNIFORM promotion); ``column scales``: the same experts promoted per column (``FP8_UNIFORM_TILES`` off:
  two multiplies a value, and the scales' layout pass), checked for ``full``'s bits;
- ``stages 3``: one ring slot fewer (is the weights' stream latency-bound?);
- ``data only``: every active tile with no rows (row1 = row0): the loader streams the same weight and activation
  tiles, the warpgroups take no products and store nothing -- the kernel's memory side alone;
- ``weights in L2``: every active tile on expert 0 (w13's 23.6 MB fit the H200's L2): the products with their
  weights from L2 -- the compute side with the activations' traffic;
- ``resident data`` (``FP8_PROBE_DROP`` bit 0): the loader fills the ring once and then only hands the slots back,
  so the warpgroups take the same products and promotions on data already in shared memory -- the compute side
  alone; ``unscaled`` (bit 1): a step's sum added without its scales -- the promotion's cost; both bits;
- ``N warpgroups a tile``: every active tile with 64 N rows (its row1 moved), on resident data -- the products'
  rate by the number of warpgroups sharing the tensor cores (TFLOP/s of the work each computes);
- ``no tiles``: every tile idle -- the launch, the scale layout pass and the idle programs.
Values past ``full`` are not checked: the probe's variants compute other rows or wrong sums on purpose.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/probe_moe_fp8_bounds.py [--tokens 8192] [--rounds 3] [--skew 0]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skew", type=float, default=0.0, help="experts' popularity spread (bench_gluon_moe.py's)")
    args = ap.parse_args()
    from benchmarks.bench_gluon_moe import routed_ids
    from benchmarks.bench_moe_blocks import ACT_BLOCK, E, TOPK, experts
    from benchmarks.timing import run_info, time_eager
    from deepinfer_adapters.kernels import gluon_moe
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg
    from deepinfer_adapters.kernels import triton_moe as tm
    from deepinfer_adapters.model_impl.quant import expert_matrix

    print(f"INFO {json.dumps(run_info())}", flush=True)
    mod = experts(128)
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = routed_ids(args.tokens, args.skew, g)
    per_expert = torch.bincount(ids.flatten(), minlength=E)
    print(f"routing: skew {args.skew}, rows an expert min {int(per_expert.min())} median "
          f"{int(per_expert.median())} max {int(per_expert.max())}", flush=True)
    _, tiles, _ = tm.route(ids, E, 128)
    joined = gluon_moe.absorb_tails(tiles, gluon_moe.FP8_TAIL)
    active = joined.expert >= 0
    rows = args.tokens * TOPK
    idle = torch.full_like(joined.expert, -1)
    l2 = tg.Groups(torch.where(active, 0, -1).to(joined.expert.dtype), joined.row0, joined.row1)

    def with_rows(n):  # every active tile with 64 n rows (three: a tail on the third warpgroup)
        return tg.Groups(joined.expert, joined.row0, torch.clamp(joined.row0 + 64 * n, max=rows))

    # label: (tile table, FP8_STAGES, FP8_PROBE_DROP, FP8_UNIFORM_TILES, rows a tile computes or None: the table's)
    variants = {
        "full": (joined, 4, 0, True, None),
        "column scales": (joined, 4, 0, False, None),
        "stages 3": (joined, 3, 0, True, None),
        "data only": (tg.Groups(joined.expert, joined.row0, joined.row0), 4, 0, True, None),
        "weights in L2": (l2, 4, 0, True, None),
        "resident data": (joined, 4, 1, True, None),
        "resident data, unscaled": (joined, 4, 3, True, None),
        **{f"{n} warpgroups a tile, resident data": (with_rows(n), 4, 1, True, 64 * n) for n in (2, 3)},
        "no tiles": (tg.Groups(idle, joined.row0, joined.row1), 4, 0, True, None),
    }
    names = "FP8_STAGES", "FP8_PROBE_DROP", "FP8_UNIFORM_TILES"
    defaults = [getattr(gluon_moe, n) for n in names]

    def use(label):
        for n, v in zip(names, variants[label][1:4]):
            setattr(gluon_moe, n, v)

    print(f"tiles: {joined.expert.numel()} in the grid's route dimension, {int(active.sum())} active", flush=True)
    for name, weight, scale in (("w13", mod.w13, mod.w13_scale), ("w2", mod.w2, mod.w2_scale)):
        N, K = expert_matrix(weight)
        x = torch.randn(rows, K, device="cuda", generator=g).bfloat16()
        q, qs = tg.act_quant(x, ACT_BLOCK, scale_block=128)
        flops = 2 * rows * N * K
        times = {label: [] for label in variants}
        call = lambda table: gluon_moe.grouped_gemm_fp8(q, qs, weight, scale, table)  # noqa: E731
        try:
            outs = {}
            for label in ("full", "column scales"):
                use(label)
                outs[label] = call(variants[label][0])
            print(f"{name}: tile scales {gluon_moe.tile_scales(scale) is not None}; the same bits with column "
                  f"scales {torch.equal(outs['column scales'], outs['full'])}", flush=True)
            for _ in range(args.rounds):
                for label in variants:
                    use(label)
                    times[label].append(time_eager(lambda: call(variants[label][0]), reps=5, warm=1))
        finally:
            for n, v in zip(names, defaults):
                setattr(gluon_moe, n, v)
        for label, us in times.items():
            med = statistics.median(us)
            tile_rows = variants[label][-1]
            work = flops if tile_rows is None else 2 * int(active.sum()) * tile_rows * N * K
            print(f"{name} {label:38s}: {med:8.1f} us (rounds {' '.join(f'{u:.0f}' for u in us)}) "
                  f"{work / med / 1e6:6.0f} TFLOP/s of {'the full call' if tile_rows is None else 'its'} work",
                  flush=True)


if __name__ == "__main__":
    main()
