"""Hyper-connection, RMSNorm and RoPE ops on the GPU: Triton backends vs the torch references.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_hc_norm_rope.py [--out DIR]

Widths of V4.1-Flash: hidden 5120, hc 4 (hc*D = 20480, 24 mixes), 64 heads x 512 with
a 64-dim rope, kv latent 512. Token counts: decode T = 1, 8, 32, 128; prefill T = 8192.

Columns: median µs per call, eager (what Python-driven code sees: launches included,
so the torch chains pay one launch per small op) and replayed from a CUDA graph (no
launch gaps: the device time), for the torch reference and the Triton kernel; the
speedups; the bytes floor (the op's compulsory reads + writes at the measured copy
bandwidth); the Triton result's relative error against the reference. Graph timings
rotate enough input sets (weights included: each layer has its own) that they do not
sit in the 60 MB L2. Results also go to DIR/RESULTS_hc_norm_rope.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os

import torch

from benchmarks.timing import L2_BYTES, ceilings, rel, run_info, time_eager, time_graph
from deepinfer_adapters.kernels import reference
from deepinfer_adapters.kernels import triton_hc as th
from deepinfer_adapters.kernels import triton_norm_rope as tn

D, HC, H, HEAD, RD = 5120, 4, 64, 512, 64
MIX = (2 + HC) * HC
ITERS, EPS = 20, 1e-6
TOKENS = (1, 8, 32, 128, 8192)


def log(*a):
    print(*a, flush=True)


def cases(T: int, g: torch.Generator) -> dict:
    """op name -> (make one input set, torch fn, triton fn, bytes moved per call)."""
    bf = torch.bfloat16

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, device="cuda", generator=g).to(dtype)

    def freqs():
        a = torch.rand(T, RD // 2, device="cuda", generator=g) * 100
        return torch.polar(torch.ones_like(a), a)

    def mixes():
        return randn(T, MIX), 0.5 + torch.rand(3, device="cuda", generator=g), randn(MIX)

    def comb():
        return torch.softmax(randn(T, HC, HC), -1)

    x_bytes = T * HC * D * 2
    return {
        "hc_mix_logits": (lambda: (randn(T, HC, D, dtype=bf), randn(MIX, HC * D) / 143, EPS),
                          reference.hc_mix_logits, th.hc_mix_logits, x_bytes + MIX * HC * D * 4 + T * MIX * 4),
        "hc_split_sinkhorn": (lambda: (*mixes(), HC, ITERS, EPS), reference.hc_split_sinkhorn, th.hc_split_sinkhorn,
                              T * MIX * 4 * 2),
        "hc_pre": (lambda: (randn(T, HC, D, dtype=bf), torch.rand(T, HC, device="cuda", generator=g)),
                   reference.hc_pre, th.hc_pre, x_bytes + T * D * 2),
        "hc_post": (lambda: (randn(T, D, dtype=bf), randn(T, HC, D, dtype=bf),
                             2 * torch.rand(T, HC, device="cuda", generator=g), comb()),
                    reference.hc_post, th.hc_post, 2 * x_bytes + T * D * 2),
        "rms_norm hidden": (lambda: (randn(T, D, dtype=bf), 0.5 + torch.rand(D, device="cuda", generator=g), EPS),
                            reference.rms_norm, tn.rms_norm, 2 * T * D * 2),
        "rms_norm q heads": (lambda: (randn(T, H, HEAD, dtype=bf), None, EPS), reference.rms_norm, tn.rms_norm,
                             2 * T * H * HEAD * 2),
        "rms_norm kv": (lambda: (randn(T, HEAD, dtype=bf), torch.ones(HEAD, device="cuda"), EPS),
                        reference.rms_norm, tn.rms_norm, 2 * T * HEAD * 2),
        "apply_rope q": (lambda: (randn(T, H, HEAD, dtype=bf), freqs()), reference.apply_rope, tn.apply_rope,
                         2 * T * H * HEAD * 2 + T * RD * 4),
        "apply_rope kv": (lambda: (randn(T, HEAD, dtype=bf), freqs()), reference.apply_rope, tn.apply_rope,
                          2 * T * HEAD * 2 + T * RD * 4),
        "apply_rope o inverse": (lambda: (randn(T, H, HEAD, dtype=bf), freqs(), True), reference.apply_rope,
                                 tn.apply_rope, 2 * T * H * HEAD * 2 + T * RD * 4),
    }


def _mix_cfg(block_t, block_k, warps, stages, per_sm):
    def cfg(T, K, bf16, sms):
        n_k, tiles = -(-K // block_k), -(-T // block_t)
        steps = -(-n_k // max(1, min(n_k, -(-per_sm * sms // tiles))))
        return th.MixConfig(block_t, block_k, steps, -(-n_k // steps), warps, stages)
    return cfg


MIX_VARIANTS = {  # hc_mix_logits tilings other than mix_config's (None: its own), timed for the record (bf16 x);
    # "pieces": the weight's bf16 pieces loaded (triton_hc.PRESPLIT_FN), not split in the kernel
    "16x128 w4, 2/SM": (_mix_cfg(16, 128, 4, 2, 2), False),
    "16x128 w4, 8/SM": (_mix_cfg(16, 128, 4, 2, 8), False),
    "64x64 w8 s3, 8/SM": (_mix_cfg(64, 64, 8, 3, 8), False),
    "64x128 w8 s2, 4/SM": (_mix_cfg(64, 128, 8, 2, 4), False),
    "32x128 w4 s2, 4/SM": (_mix_cfg(32, 128, 4, 2, 4), False),
    "default, pieces": (None, True),
    "64x64 w4 s4, 2/SM": (_mix_cfg(64, 64, 4, 4, 2), False),
    "64x64 w4 s4, 2/SM, pieces": (_mix_cfg(64, 64, 4, 4, 2), True),
    "64x128 w4 s3, 2/SM, pieces": (_mix_cfg(64, 128, 4, 3, 2), True),
    "64x128 w8 s3, 2/SM, pieces": (_mix_cfg(64, 128, 8, 3, 2), True),
    "128x64 w8 s3, 2/SM, pieces": (_mix_cfg(128, 64, 8, 3, 2), True),
    "128x128 w8 s2, 1/SM, pieces": (_mix_cfg(128, 128, 8, 2, 1), True),
    "32x128 w4 s4, 2/SM, pieces": (_mix_cfg(32, 128, 4, 4, 2), True),
}


def first(out) -> torch.Tensor:
    return out[-1] if isinstance(out, tuple) else out  # sinkhorn: comb


def safe(fn):
    try:
        return fn()
    except Exception as e:  # e.g. a torch path that cannot be captured: record, go on
        log(f"  failed: {type(e).__name__}: {str(e)[:160]}")
        return float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    args = ap.parse_args()
    info = run_info()
    info.update({k: v for k, v in ceilings().items()})
    bw = info["copy_bw"]
    log(f"INFO {info}")
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    header = (f"{'op':22s} {'T':>5s} {'torch eager':>11s} {'triton eager':>12s} {'x':>5s} "
              f"{'torch graph':>11s} {'triton graph':>12s} {'x':>5s} {'floor':>7s} {'rel err':>8s}")
    log(header)
    with torch.no_grad():
        for T in map(int, args.tokens.split(",")):
            for name, (make, ref_fn, tri_fn, nbytes) in cases(T, g).items():
                sets = [make() for _ in range(max(1, min(64, math.ceil(2 * L2_BYTES / nbytes))))]
                err = rel(first(tri_fn(*sets[0])), first(ref_fn(*sets[0])))
                r = {"op": name, "T": T, "bytes": nbytes, "floor_us": nbytes / bw * 1e6, "rel_err": err,
                     "sets": len(sets)}
                r["torch_eager_us"] = safe(lambda: time_eager(lambda: ref_fn(*sets[0])))
                r["triton_eager_us"] = safe(lambda: time_eager(lambda: tri_fn(*sets[0])))
                r["torch_graph_us"] = safe(lambda: time_graph([lambda s=s: ref_fn(*s) for s in sets]))
                r["triton_graph_us"] = safe(lambda: time_graph([lambda s=s: tri_fn(*s) for s in sets]))
                rows.append(r)
                log(f"{name:22s} {T:5d} {r['torch_eager_us']:11.1f} {r['triton_eager_us']:12.1f} "
                    f"{r['torch_eager_us'] / r['triton_eager_us']:5.1f} {r['torch_graph_us']:11.1f} "
                    f"{r['triton_graph_us']:12.1f} {r['torch_graph_us'] / r['triton_graph_us']:5.1f} "
                    f"{r['floor_us']:7.2f} {err:8.1e}")
                if name == "hc_mix_logits" and T >= 32:
                    default = th.mix_config
                    for vname, (variant, pieces) in MIX_VARIANTS.items():
                        th.mix_config, th.PRESPLIT_FN = variant or default, pieces
                        try:
                            t = safe(lambda: time_graph([lambda s=s: tri_fn(*s) for s in sets]))
                            e = safe(lambda: rel(tri_fn(*sets[0]), ref_fn(*sets[0])))
                        finally:
                            th.mix_config, th.PRESPLIT_FN = default, False
                        r.setdefault("variants", {})[vname] = {"graph_us": t, "rel_err": e}
                        log(f"  variant {vname:20s} graph {t:8.1f} us  rel err {e:.1e}")
                del sets
                torch.cuda.empty_cache()
    path = os.path.join(args.out, "RESULTS_hc_norm_rope.json")
    with open(path, "w") as f:
        json.dump({"info": info, "rows": rows}, f, indent=1)
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
