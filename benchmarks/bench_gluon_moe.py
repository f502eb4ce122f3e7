"""The MoE's bf16-path grouped GEMM: the Gluon kernel (``kernels/gluon_moe.py``) against the Triton kernel
(``triton_fp8_gemm.gemm``, 128 x 128 tiles), same inputs: bits and time, V4.1's w13 and w2 at 8192 tokens
(one layer's 384 experts of width 2304, hidden 5120, top-6, random routing, ``--skew`` for uneven); and the Gluon
kernel on FP8 products (``grouped_gemm_fp8``) against the bf16 one, the same activations quantized per 32 and
re-expressed per 128 (``act_quant``'s ``scale_block``).

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_gluon_moe.py [--tokens 8192]
``--compile-only`` compiles the kernel for sm_90 with no GPU (run it with Triton 3.6, the GPU machine's) and
prints its shared memory, registers and any ptxas note that it serializes the wgmma products.
"""

from __future__ import annotations

import argparse
import json

import torch


def compile_offline() -> None:
    from triton.experimental.gluon import language as gl

    from benchmarks.gluon_offline import compile_sm90
    from deepinfer_adapters.kernels import gluon_moe
    from deepinfer_adapters.kernels.gluon_moe import TAIL, TILE
    from deepinfer_adapters.kernels.gluon_moe_jit import moe_bf16_kernel

    a_layout = gl.NVMMASharedLayout.get_default_for([TILE, 128], gl.bfloat16)
    t_layout = gl.NVMMASharedLayout.get_default_for([TAIL, 128], gl.bfloat16)
    w_layout = gl.NVMMASharedLayout.get_default_for([TILE, 128], gl.float8e4nv)
    sig = {"a_desc": f"tensordesc<bf16[{TILE},128],{a_layout!r}>",
           "t_desc": f"tensordesc<bf16[{TAIL},128],{t_layout!r}>",
           "w_desc": f"tensordesc<fp8e4nv[{TILE},128],{w_layout!r}>", "WS": "*u8", "OUT": "*bf16",
           "TILE_EXPERT": "*i32", "TILE_ROW0": "*i32", "TILE_ROW1": "*i32", "N": "i32",
           "K": "i32", "stride_wse": "i32", "stride_wsn": "i32", "stride_om": "i32", "STAGES": "constexpr"}
    divisible = ("WS", "OUT", "TILE_EXPERT", "TILE_ROW0", "TILE_ROW1", "K", "stride_wse", "stride_wsn", "stride_om")
    compile_sm90(moe_bf16_kernel, sig, {"STAGES": gluon_moe.STAGES}, divisible, "moe_bf16_kernel")

    from deepinfer_adapters.kernels.gluon_moe_fp8_jit import moe_fp8_kernel

    h_layout = gl.NVMMASharedLayout.get_default_for([TILE // 2, 128], gl.float8e4nv)
    s_layout = gl.NVMMASharedLayout.get_default_for([1, TILE], gl.float32)
    sig = {"a_desc": f"tensordesc<fp8e4nv[{TILE // 2},128],{h_layout!r}>",
           "w_desc": f"tensordesc<fp8e4nv[{TILE},128],{w_layout!r}>",
           "s_desc": f"tensordesc<fp32[1,{TILE}],{s_layout!r}>", "AS": "*fp32", "WT": "*fp32", "OUT": "*bf16",
           "TILE_EXPERT": "*i32", "TILE_ROW0": "*i32", "TILE_ROW1": "*i32", "N": "i32", "K": "i32",
           "stride_asm": "i32", "stride_om": "i32", "STAGES": "constexpr", "DROP": "constexpr",
           "UNIFORM": "constexpr"}
    divisible = ("AS", "WT", "OUT", "TILE_EXPERT", "TILE_ROW0", "TILE_ROW1", "N", "K", "stride_asm", "stride_om")
    # the model's (column scales, tile scales); the probe's
    for drop, uniform in ((0, False), (0, True), (1, True), (2, True)):
        compile_sm90(moe_fp8_kernel, sig, {"STAGES": gluon_moe.FP8_STAGES, "DROP": drop, "UNIFORM": uniform}, divisible,
                     f"moe_fp8_kernel drop={drop} uniform={uniform}")


def routed_ids(tokens: int, skew: float, g: torch.Generator) -> torch.Tensor:
    """Each token's top-6 of 384 experts: log-normal(0, skew) popularities plus Gumbel noise (``--skew``)."""
    from benchmarks.bench_moe_blocks import E, TOPK

    popularity = torch.randn(E, device="cuda", generator=g) * skew
    gumbel = -torch.log(-torch.log(torch.rand(tokens, E, device="cuda", generator=g).clamp(1e-9, 1 - 1e-9)))
    return (popularity + gumbel).topk(TOPK, dim=-1).indices


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--compile-only", action="store_true", help="compile for sm_90 offline, no GPU")
    ap.add_argument("--skew", type=float, default=0.0,
                    help="experts' popularity spread: each token's top-6 of log-normal(0, SKEW) popularities plus "
                         "Gumbel noise (0: uniform routing, nearly every 128-row tile full; the model's random-weight "
                         "gate routes unevenly, session 29)")
    args = ap.parse_args()
    if args.compile_only:
        compile_offline()
        return
    from benchmarks.bench_moe_blocks import ACT_BLOCK, D, E, TOPK, experts
    from benchmarks.timing import rel, run_info, time_eager
    from deepinfer_adapters.kernels import gluon_moe
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg
    from deepinfer_adapters.kernels import triton_moe as tm
    from deepinfer_adapters.model_impl.quant import expert_matrix

    print(f"INFO {json.dumps(run_info())}", flush=True)
    mod = experts(128)
    T = args.tokens
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    ids = routed_ids(T, args.skew, g)
    per_expert = torch.bincount(ids.flatten(), minlength=E)
    print(f"routing: skew {args.skew}, rows an expert min {int(per_expert.min())} median "
          f"{int(per_expert.median())} max {int(per_expert.max())}", flush=True)
    rows = T * TOPK
    _, tiles, _ = tm.route(ids, E, 128)
    plain_rows = tg.Groups(tiles.expert, tiles.row0, tiles.row1)
    xa = tg.act_quant(x, ACT_BLOCK, dequant_to=torch.bfloat16)[0]
    ha = (torch.randn(rows, expert_matrix(mod.w2)[1], device="cuda", generator=g) * 0.1).bfloat16()
    cases = {  # name: (the Triton path's A and groups, the Gluon kernel's A in sorted rows, weight, scale)
        "w13": (xa, tiles, lambda: xa.index_select(0, tiles.row_idx), mod.w13, mod.w13_scale),
        "w2": (ha, plain_rows, lambda: ha, mod.w2, mod.w2_scale),
    }
    for name, (a, groups, sorted_a, weight, scale) in cases.items():
        N, K = expert_matrix(weight)
        assert gluon_moe.fits(a, weight, scale, (1, 128), 128), "the Gluon kernel does not take these experts"
        a_sorted = sorted_a()
        triton_path = lambda: tg.gemm(a, None, 0, weight, scale, (1, 128), torch.bfloat16, rows=rows,  # noqa: E731
                                      groups=groups, config=tg.BF16_LARGE_CONFIG, kstep=128)
        joined = gluon_moe.absorb_tails(tiles)
        no_tails = tg.Groups(tiles.expert, tiles.row0, torch.minimum(tiles.row1, tiles.row0 + 128))  # 128 rows a tile
        gluon_only = lambda: gluon_moe.grouped_gemm(a_sorted, weight, scale, no_tails)  # noqa: E731
        gluon_joined = lambda: gluon_moe.grouped_gemm(a_sorted, weight, scale, joined)  # noqa: E731
        with_gather = lambda: gluon_moe.grouped_gemm(sorted_a(), weight, scale, joined)  # noqa: E731
        ref = triton_path()
        for label, fn in (("128-row tiles", gluon_only), ("tails joined", gluon_joined)):
            got = fn()
            print(f"gluon {name} {label}: same bits as the Triton bf16 path {torch.equal(got, ref)}, max abs diff "
                  f"{(got.float() - ref.float()).abs().max().item():.3e}", flush=True)
        flops = 2 * rows * N * K
        for label, fn in (("triton bf16", triton_path), ("gluon 128-row tiles", gluon_only),
                          ("gluon tails joined", gluon_joined), ("gluon tails joined + gather", with_gather),
                          ("triton bf16", triton_path)):
            us = time_eager(fn, reps=10, warm=1)
            print(f"{name} {label}: {us:9.1f} us {flops / us / 1e6:6.0f} TFLOP/s", flush=True)
        # FP8 products (grouped_gemm_fp8): the same activations quantized per 32 and re-expressed per 128 (the
        # model's), against the bf16 kernel on their per-32 values; each expert's last <= 64 rows on the tile before
        q, qs = tg.act_quant(a_sorted, ACT_BLOCK, scale_block=128)
        a_round = tg.act_quant(a_sorted, ACT_BLOCK, dequant_to=torch.bfloat16)[0]
        fp8_joined = gluon_moe.absorb_tails(tiles, gluon_moe.FP8_TAIL)
        fp8_only = lambda: gluon_moe.grouped_gemm_fp8(q, qs, weight, scale, fp8_joined)  # noqa: E731
        bf16_same = gluon_moe.grouped_gemm(a_round, weight, scale, joined)
        print(f"gluon {name} fp8 products: rel to the bf16 kernel {rel(fp8_only(), bf16_same):.2e}", flush=True)
        for label, fn in (("gluon tails joined", gluon_joined), ("gluon fp8 products", fp8_only),
                          ("gluon tails joined", gluon_joined), ("gluon fp8 products", fp8_only)):
            us = time_eager(fn, reps=10, warm=1)
            print(f"{name} {label}: {us:9.1f} us {flops / us / 1e6:6.0f} TFLOP/s", flush=True)
        active = int((joined.expert >= 0).sum()), int((tiles.expert >= 0).sum())
        print(f"{name}: {active[1]} tiles, {active[0]} with the tails joined", flush=True)


if __name__ == "__main__":
    main()
