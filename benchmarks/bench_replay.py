"""SWA bounded replay on the tiny V4.1 model (CPU): how far mask/compact are from off,
and how much prefill work they save.

    python benchmarks/bench_replay.py [--lengths 300 600] [--keep 140] [--decode 16]

For each prompt length: prefill in chunks of 256 under each mode, then greedy-decode
--decode tokens. Reports the last-prompt-token logit error vs off, greedy agreement
with off, the rows the consumer layers processed, and prefill wall time (median of 3).
The tiny model has random weights and amplifies small differences; real weights
are expected to be far less sensitive, which this script cannot show.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.replay import Replay, consumer_boundary
from deepinfer_adapters.model_impl.tiny_checkpoint import write_tiny_checkpoint

CHUNK = 256


def run(model, ids, mode, keep, decode):
    state = model.new_state(1, len(ids) + decode + 8)
    rows = []
    consumer = model.layers[consumer_boundary(model.cfg) + 1].ffn
    hook = consumer.register_forward_pre_hook(lambda mod, args: rows.append(args[0].shape[0]))
    start = time.perf_counter()
    for s in range(0, len(ids), CHUNK):
        batch = ForwardBatch.build([(0, s, ids[s : s + CHUNK])])
        batch.prompt_len = [len(ids)]
        last = model(batch, state, Replay(mode, keep)).logits
    elapsed = time.perf_counter() - start
    hook.remove()
    tokens, p, tok = [], len(ids), int(last.argmax())
    for _ in range(decode):
        tokens.append(tok)
        tok = int(model(ForwardBatch.build([(0, p, [tok])]), state).logits.argmax())
        p += 1
    return last[-1], tokens, sum(rows), elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[300, 600])
    ap.add_argument("--keep", type=int, default=140)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--numerics", choices=["reference", "float32"], default="reference")
    args = ap.parse_args()
    torch.set_num_threads(1)
    numerics = Numerics.reference() if args.numerics == "reference" else Numerics.float32(quant=True)
    with tempfile.TemporaryDirectory() as tmp:
        write_tiny_checkpoint(Path(tmp), "v41")
        model = DeepseekV41ForCausalLM.from_pretrained(tmp, numerics, progress=False)
    n_consumers = model.cfg.num_hidden_layers - consumer_boundary(model.cfg) - 1
    print(f"tiny V4.1, {args.numerics} numerics, keep {args.keep}, {n_consumers} consumer layers after the boundary")
    print("len  mode     max|dlogit| top1-same  greedy-agree  consumer-rows  prefill-s(median of 3)")
    for n in args.lengths:
        ids = torch.randint(3, 128000, (n,), generator=torch.Generator().manual_seed(n)).tolist()
        results = {}
        for mode in ("off", "mask", "compact"):
            runs = [run(model, ids, mode, args.keep, args.decode) for _ in range(3)]
            results[mode] = runs[0][:3] + (statistics.median(r[3] for r in runs),)
        off_logit, off_tokens = results["off"][0], results["off"][1]
        for mode, (logit, tokens, rows, secs) in results.items():
            agree = sum(a == b for a, b in zip(tokens, off_tokens)) / len(tokens)
            same = int(logit.argmax()) == int(off_logit.argmax())
            err = float((logit - off_logit).abs().max())
            print(f"{n:4d} {mode:8s} {err:11.3f} {str(same):9s} {agree:12.2f} {rows:14d} {secs:10.2f}")


if __name__ == "__main__":
    main()
