"""Which kernel op moves the batch-invariant forward's logits off the torch reference.

Session 28's `engine` part: the reduced V4.1 model at real widths (bench_real_width), one token at context 4096,
batch-invariant numerics: rel(fast, ref) 0.290 against a noise floor of 0.073 (the reference with fp32 instead of bf16
attention probabilities), where the same run without batch invariance gives 0.072. This script builds the same model
and inputs and, in each mode, compares the logits of: every op on its automatic backend (fast); every op with a torch
reference pinned to it (ref); each op alone pinned (the rest fast: how much of the gap that op closes); each op alone
left fast (the rest pinned: how much that op opens). Ops pinned: bench_real_width.OPS, every op with a "torch"
backend (``kernels.reference.OPS`` and ``kernels.reference_fp8.OPS``).

Diagnostic only (prints a table); CPU: ``--tiny --device cpu`` runs it on tiny widths (every op's fast backend is then
its reference but the ops with a "composed" backend).

    python benchmarks/probe_invariant_parity.py --out DIR [--modes invariant default]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_real_width import OPS, build_model, fill_state, reduced_config  # noqa: E402
from benchmarks.timing import rel  # noqa: E402
from deepinfer_adapters import kernels  # noqa: E402
from deepinfer_adapters.config import parse_config  # noqa: E402
from deepinfer_adapters.model_impl import native_format  # noqa: E402
from deepinfer_adapters.model_impl.batch import ForwardBatch  # noqa: E402
from deepinfer_adapters.model_impl.numerics import Numerics  # noqa: E402


def pinned(ops) -> None:
    for op in OPS:
        kernels.use_backend(op, "torch" if op in ops else None)


@torch.no_grad()
def probe(model, cfg, device: str, context: int) -> list[dict]:
    state = model.new_state(2, context + 8)
    fill_state(state, cfg, torch.Generator(device=device).manual_seed(1001))  # bench_real_width's B=1 cache
    saved = {k: t.clone() for k, t in state._tensors.items()}
    ids = torch.randint(3, cfg.vocab_size, (1,), generator=torch.Generator().manual_seed(1)).tolist()

    def logits(ops=()) -> torch.Tensor:
        pinned(ops)
        try:
            for k, t in saved.items():
                state._tensors[k].copy_(t)
            return model(ForwardBatch.build([(0, context, ids)], device=device), state).logits.float()
        finally:
            pinned(())

    fast, ref = logits(), logits(OPS)
    rows = [{"op": "(all fast)", "rel": rel(fast, ref)}]
    num = model.numerics
    model.numerics = dataclasses.replace(num, attn_probs_bf16=False)
    try:
        rows.append({"op": "(noise floor: ref, fp32 probs)", "rel": rel(logits(OPS), ref)})
    finally:
        model.numerics = num
    for op in OPS:
        alone_pinned = logits((op,))
        alone_fast = logits(tuple(o for o in OPS if o != op))
        rows.append({"op": op, "rel_pinned_alone": rel(alone_pinned, ref), "rel_fast_alone": rel(alone_fast, ref)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--modes", nargs="+", choices=["invariant", "default"], default=["invariant", "default"])
    args = ap.parse_args()
    cfg = parse_config(reduced_config(args.tiny))
    results = {}
    for mode in args.modes:
        num = Numerics.reference().invariant() if mode == "invariant" else Numerics.reference()
        model, _ = build_model(cfg, num, args.device, native_format.EXPERT_BLOCK)
        rows = probe(model, cfg, args.device, args.context)
        results[mode] = rows
        print(f"== {mode}: rel to the all-reference logits")
        for r in rows:
            if "rel" in r:
                print(f"{r['op']:34s} {r['rel']:.3e}")
            else:
                print(f"{r['op']:34s} pinned alone {r['rel_pinned_alone']:.3e}   fast alone {r['rel_fast_alone']:.3e}")
        del model
    with open(os.path.join(args.out, "invariant_parity.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
