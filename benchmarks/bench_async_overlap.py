"""How much engine-thread CPU time async scheduling hides per step (standalone engine).

Runs the same workload twice on one loaded model, async scheduling off and on,
and reports per step:

  cpu      engine-thread work: schedule + batch building + postprocess
  hidden   the part of ``cpu`` that ran while the model thread was busy
           (intervals recorded around those calls, intersected with the
           model thread's forward intervals)
  forward  model thread: forward + sampling
  wall     wall-clock time per step

Synchronously nothing is hidden; with async scheduling the engine plans step
N+1 and postprocesses step N while the model runs step N+1, so ``hidden``
approaches ``cpu`` (all but the first plan and the last postprocess). On the CPU both threads share the cores
and the GIL, so the tiny model's Python-heavy forward can stretch when the
engine thread works; the report shows forward time per step for both runs so
that is visible. Outputs of the two runs are compared too (they must match).

    python benchmarks/bench_async_overlap.py [--model DIR|tiny-v41] [--num-prompts 32] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import time

import torch

from deepinfer_adapters.decoding.sampling_params import SamplingParams
from deepinfer_adapters.standalone.config import EngineConfig
from deepinfer_adapters.standalone.engine import LLMEngine
from deepinfer_adapters.standalone.llm import LLM, resolve_model
from deepinfer_adapters.standalone.runner import load_model


class Intervals:
    """Wall-clock intervals of calls to wrapped methods."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    def wrap(self, obj, name: str) -> None:
        fn = getattr(obj, name)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spans.append((t0, time.perf_counter()))

        setattr(obj, name, timed)

    def total(self) -> float:
        return sum(b - a for a, b in self.spans)

    def overlap(self, other: "Intervals") -> float:
        return sum(max(0.0, min(b, d) - max(a, c)) for a, b in self.spans for c, d in other.spans)


def run(model_dir, model, cfg: EngineConfig, prompts, params) -> dict:
    engine = LLMEngine(model_dir, cfg, model=model)
    cpu, fwd = Intervals(), Intervals()
    cpu.wrap(engine.scheduler, "schedule")
    cpu.wrap(engine.runner, "prepare")
    cpu.wrap(engine, "_postprocess")
    fwd.wrap(engine.runner, "execute")
    llm = LLM.from_engine(engine)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - t0
    engine.close()
    return dict(outputs=[o.token_ids for o in outs], steps=engine.stats.steps, wall=wall, forward=fwd.total(),
                cpu=cpu.total(), hidden=cpu.overlap(fwd), overlapped=engine.stats.overlapped_steps,
                tokens=engine.stats.generation_tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-v41")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--numerics", default="float32", choices=("reference", "float32", "float32-quant"))
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model_dir, _ = resolve_model(args.model)
    base = EngineConfig(numerics=args.numerics, max_num_seqs=args.num_prompts, max_num_batched_tokens=512)
    model = load_model(model_dir, base.make_numerics(), base.resolved_device(), progress=False)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 128000, (int(n),), generator=gen).tolist()
               for n in torch.randint(4, 64, (args.num_prompts,), generator=gen)]
    params = [SamplingParams(temperature=0.8, seed=i, max_tokens=args.max_tokens, ignore_eos=True)
              for i in range(args.num_prompts)]
    run(model_dir, model, base, prompts[:2], params[:2])  # warm-up

    print(f"model {model_dir} ({args.numerics}), {args.num_prompts} prompts x {args.max_tokens} tokens, "
          f"{args.threads} torch thread(s)")
    print(f"{'async':>5} {'steps':>5} {'wall/step':>10} {'forward/step':>12} {'cpu/step':>9} "
          f"{'hidden/step':>11} {'hidden':>6} {'overlapped':>10} {'tok/s':>7}")
    results = {}
    for _ in range(args.repeats):
        for async_on in (False, True):
            r = run(model_dir, model, base.replace(async_scheduling=async_on), prompts, params)
            results.setdefault(async_on, []).append(r)
            n = max(r["steps"], 1)
            print(f"{'on' if async_on else 'off':>5} {r['steps']:>5} {1e3 * r['wall'] / n:>8.2f}ms "
                  f"{1e3 * r['forward'] / n:>10.2f}ms {1e3 * r['cpu'] / n:>7.3f}ms {1e3 * r['hidden'] / n:>9.3f}ms "
                  f"{100 * r['hidden'] / max(r['cpu'], 1e-12):>5.0f}% {r['overlapped']:>10} "
                  f"{r['tokens'] / r['wall']:>7.1f}")
    same = all(r["outputs"] == results[False][0]["outputs"] for rs in results.values() for r in rs)
    print(f"outputs identical across runs: {same}")


if __name__ == "__main__":
    main()
