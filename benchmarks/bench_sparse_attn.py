"""sparse_attn on the GPU: Triton kernel vs the torch paths, next to the floor.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_sparse_attn.py [--out DIR]

Workloads (V4.1-Flash attention widths: H = 64 heads, d = 512 latent, K = V):
- decode: S = 1, 8, 32, 128 queries (one per sequence), each over its own 128
  window rows + 512 rows selected from its 2048 compressed rows (context 4k,
  ratio 2), K = 640 indices, all valid.
- prefill: S = 8192 queries of one sequence, kv 12288 rows, 640 valid indices each.

Floor per query (bytes at the measured copy bandwidth, FLOPs at the measured bf16 rate):
  bytes = K*d*2 (gathered kv rows, bf16; decode rows are distinct per query)
        + 2*H*d*2 (q read, o written) + K*4 (int32 indices)  = 788,992 B at K=640
  FLOPs = 2 * H*K*d (q.k) + 2 * H*K*d (p@v)                 = 83.9 MFLOP at K=640
  prefill: kv is shared, so bytes = S*(2*H*d*2 + K*4) + N*d*2 and the FLOPs dominate.
Timing: CUDA-graph replays (no launch gaps) over enough input sets that they do
not fit in the 60 MB L2 (decode); median of repeats, device events. Also the
eager per-call time (launch included), which is what the model sees today.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch

from benchmarks.timing import L2_BYTES, ceilings, rel, run_info, time_eager, time_graph
from deepinfer_adapters.kernels import reference
from deepinfer_adapters.kernels import flashmla_sparse
from deepinfer_adapters.kernels import triton_sparse_attn as tsa

H, D, WINDOW, SELECTED, COMPRESSED = 64, 512, 128, 512, 2048
K = WINDOW + SELECTED
SCALE = D**-0.5

CONFIGS = {  # name: Config(block_h, num_warps, num_stages, split_blocks=...) of the bf16 kernel
    "h16_w4": tsa.Config(16, 4, 2),
    "h32_w4": tsa.Config(32, 4, 2),
    "h64_w8": tsa.Config(64, 8, 2),
    "h16_w4_sp1": tsa.Config(16, 4, 2, split_blocks=1),
    "h16_w4_sp2": tsa.Config(16, 4, 2, split_blocks=2),
    "h16_w4_sp5": tsa.Config(16, 4, 2, split_blocks=5),
    "h64_w8_sp5": tsa.Config(64, 8, 2, split_blocks=5),
    "h32_w4_sp1": tsa.Config(32, 4, 2, split_blocks=1),
    "h64_w8_sp1": tsa.Config(64, 8, 2, split_blocks=1),
    "h16_w2_sp1": tsa.Config(16, 2, 2, split_blocks=1),
}


def log(*a):
    print(*a, flush=True)


def torch_eager_bf16(q, kv, sink, idx, scale):
    """A plain torch GPU path (gather, bf16 bmm, fp32 softmax with the sink): the naive peer."""
    valid = idx >= 0
    rows = kv[idx.clamp_min(0).long()]  # [S, K, d]
    s = torch.bmm(q, rows.transpose(1, 2)).float() * scale  # [S, H, K]
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    m = torch.maximum(s.amax(-1), sink[None, :])
    p = torch.exp(s - m[..., None])
    den = p.sum(-1) + torch.exp(sink[None, :] - m)
    return (torch.bmm(p.to(q.dtype), rows).float() / den[..., None]).to(q.dtype)


def safe(fn):
    try:
        return fn()
    except Exception as e:
        log(f"default config failed: {type(e).__name__}: {str(e)[:200]}")
        return None


def flashmla_row(sets, ref, eager):
    """FlashMLA's SM90 sparse kernel (kernels/flashmla_sparse.py) on the same inputs, when it loads."""
    if flashmla_sparse._flash_mla() is None:
        return {"flashmla_us": float("nan")}
    fn = lambda s: flashmla_sparse.sparse_attn(*s, SCALE)  # noqa: E731
    try:
        out = fn(sets[0])
        t = (time_eager(lambda: fn(sets[0]), reps=10, warm=2) if eager
             else time_graph([lambda s=s: fn(s) for s in sets], reps=25))
    except Exception as e:
        log(f"flashmla failed: {type(e).__name__}: {str(e)[:200]}")
        return {"flashmla_us": float("nan")}
    log(f"flashmla S={sets[0][0].shape[0]}: {t:.1f} us, rel {rel(out, ref):.2e}")
    return {"flashmla_us": t, "flashmla_rel": rel(out, ref)}


def decode_set(S, g):
    N = S * (WINDOW + COMPRESSED)
    q = torch.randn(S, H, D, device="cuda", generator=g).bfloat16()
    kv = torch.randn(N, D, device="cuda", generator=g).bfloat16()
    sink = torch.randn(H, device="cuda", generator=g)
    base = torch.arange(S, device="cuda")[:, None] * (WINDOW + COMPRESSED)
    win = base + torch.arange(WINDOW, device="cuda")
    sel = torch.rand(S, COMPRESSED, device="cuda", generator=g).argsort(-1)[:, :SELECTED]
    idx = torch.cat([win, base + WINDOW + sel], 1).to(torch.int32).contiguous()
    return q, kv, sink, idx


def floor_us(bytes_, flops, bw, rate):
    return max(bytes_ / bw, flops / rate) * 1e6, bytes_ / bw * 1e6, flops / rate * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--configs", default="all", help="'all' or comma-separated names of CONFIGS")
    args = ap.parse_args()
    configs = CONFIGS if args.configs == "all" else {k: CONFIGS[k] for k in args.configs.split(",")}
    info = run_info()
    c = ceilings()
    bw, rate = c["copy_bw"], c["bf16_flops"]
    info.update(copy_bw_TBs=bw / 1e12, bf16_mm_TFLOPs=rate / 1e12)
    log(f"INFO {info}")
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []

    # ---------------------------------------------------------------- decode ----
    per_q_bytes = K * D * 2 + 2 * H * D * 2 + K * 4
    per_q_flops = 4 * H * K * D
    for S in (1, 8, 32, 128):
        R = max(1, min(256, math.ceil(4 * L2_BYTES / (S * per_q_bytes))))
        sets = [decode_set(S, g) for _ in range(R)]
        fl, fl_b, fl_f = floor_us(S * per_q_bytes, S * per_q_flops, bw, rate)
        row = {"case": f"decode S={S}", "S": S, "K": K, "sets": R, "floor_us": fl, "floor_bytes_us": fl_b,
               "floor_flops_us": fl_f, "bytes": S * per_q_bytes, "flops": S * per_q_flops, "configs": {}}
        q0, kv0, sink0, idx0 = sets[0]
        ref = reference.sparse_attn(q0, kv0, sink0, idx0, SCALE)
        dflt = tsa.default_config(H, D)
        row["default"] = str(dflt)
        out_d = safe(lambda: tsa.sparse_attn(q0, kv0, sink0, idx0, SCALE, config=dflt))
        row["default_rel"] = rel(out_d, ref) if out_d is not None else float("nan")
        for name, cfg in {"default": dflt, **configs}.items():
            try:
                out = tsa.sparse_attn(q0, kv0, sink0, idx0, SCALE, config=cfg)
                t = time_graph([lambda s=s, c=cfg: tsa.sparse_attn(*s, SCALE, config=c) for s in sets], reps=25)
                row["configs"][name] = {"us": t, "rel": rel(out, ref), "bitwise_eq_default": out_d is not None and bool(torch.equal(out, out_d))}
            except Exception as e:  # a config that does not compile or fit: record, go on
                row["configs"][name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            log(f"decode S={S} {name}: {row['configs'][name]}")
        row.update(flashmla_row(sets, ref, eager=False))
        row["triton_eager_us"] = float("nan") if out_d is None else time_eager(lambda: tsa.sparse_attn(q0, kv0, sink0, idx0, SCALE, config=dflt), reps=25)
        row["torch_ref_us"] = time_eager(lambda: reference.sparse_attn(q0, kv0, sink0, idx0, SCALE), reps=5, warm=1)
        row["torch_bf16_us"] = time_graph([lambda s=s: torch_eager_bf16(*s, SCALE) for s in sets[: max(1, R // 4)]], reps=25)
        row["torch_bf16_rel"] = rel(torch_eager_bf16(q0, kv0, sink0, idx0, SCALE), ref)
        log(f"ROW {json.dumps(row)}")
        rows.append(row)
        del sets, ref
        torch.cuda.empty_cache()

    # --------------------------------------------------------------- prefill ----
    S, N = 8192, 12288
    q = torch.randn(S, H, D, device="cuda", generator=g).bfloat16()
    kv = torch.randn(N, D, device="cuda", generator=g).bfloat16()
    sink = torch.randn(H, device="cuda", generator=g)
    idx = torch.randint(0, N, (S, K), device="cuda", generator=g, dtype=torch.int32)
    b = S * (2 * H * D * 2 + K * 4) + N * D * 2
    f = S * per_q_flops
    fl, fl_b, fl_f = floor_us(b, f, bw, rate)
    row = {"case": f"prefill S={S}", "S": S, "K": K, "floor_us": fl, "floor_bytes_us": fl_b, "floor_flops_us": fl_f,
           "bytes": b, "flops": f, "configs": {}}
    t0 = time.time()
    ref = reference.sparse_attn(q, kv, sink, idx, SCALE)
    torch.cuda.synchronize()
    row["torch_ref_us"] = (time.time() - t0) * 1e6  # one call; it takes long enough
    dflt = tsa.default_config(H, D)
    row["default"] = str(dflt)
    out_d = safe(lambda: tsa.sparse_attn(q, kv, sink, idx, SCALE, config=dflt))
    row["default_rel"] = rel(out_d, ref) if out_d is not None else float("nan")
    for name, cfg in {"default": dflt, **configs}.items():
        try:
            out = tsa.sparse_attn(q, kv, sink, idx, SCALE, config=cfg)
            t = time_eager(lambda c=cfg: tsa.sparse_attn(q, kv, sink, idx, SCALE, config=c), reps=10, warm=2)
            row["configs"][name] = {"us": t, "rel": rel(out, ref), "bitwise_eq_default": out_d is not None and bool(torch.equal(out, out_d))}
        except Exception as e:
            row["configs"][name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        log(f"prefill {name}: {row['configs'][name]}")
    row.update(flashmla_row([(q, kv, sink, idx)], ref, eager=True))
    del ref
    torch.cuda.empty_cache()
    try:
        row["torch_bf16_us"] = time_eager(lambda: torch_eager_bf16(q, kv, sink, idx, SCALE), reps=5, warm=1)
    except torch.OutOfMemoryError:
        row["torch_bf16_us"] = float("nan")
    log(f"ROW {json.dumps(row)}")
    rows.append(row)

    with open(os.path.join(args.out, "bench_sparse_attn.json"), "w") as fh:
        json.dump({"info": info, "rows": rows}, fh, indent=1)

    # ----------------------------------------------------------------- summary ----
    log("\n## sparse_attn, H=64 d=512 K=640 bf16  " + f"({info['device']}, {info['date']}, torch {info['torch']}, "
        f"triton {info['triton']}; measured copy {bw / 1e12:.2f} TB/s, bf16 mm {rate / 1e12:.0f} TFLOP/s)")
    log("| case | floor us (bytes / flops) | triton default us | % of floor | GB/s | TFLOP/s | best config (us) "
        "| triton eager us | torch bf16 us | torch ref (fp64) us | rel err | flashmla us |")
    log("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ok = {k: v for k, v in r["configs"].items() if "us" in v}
        td = ok.get("default", {}).get("us", float("nan"))
        best = min(ok.items(), key=lambda kv_: kv_[1]["us"]) if ok else ("-", {"us": float("nan")})
        log(f"| {r['case']} | {r['floor_us']:.1f} ({r['floor_bytes_us']:.1f} / {r['floor_flops_us']:.1f}) | {td:.1f} "
            f"| {100 * r['floor_us'] / td:.0f}% | {r['bytes'] / td / 1e3:.0f} | {r['flops'] / td / 1e6:.0f} "
            f"| {best[0]} ({best[1]['us']:.1f}) | {r.get('triton_eager_us', float('nan')):.1f} "
            f"| {r['torch_bf16_us']:.1f} | {r['torch_ref_us']:.0f} | {r['default_rel']:.1e} | {r['flashmla_us']:.1f} |")
    log("\nconfig sweep (us; * = not bitwise equal to default):")
    names = ["default", *configs]
    log("| case | " + " | ".join(names) + " |")
    for r in rows:
        cells = []
        for n in names:
            c = r["configs"].get(n, {})
            cells.append("err" if "error" in c else f"{c['us']:.1f}{'' if c['bitwise_eq_default'] else '*'}")
        log(f"| {r['case']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
