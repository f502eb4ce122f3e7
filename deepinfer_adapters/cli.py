"""The ``deepinfer-adapters`` command line.

Subcommands:
  init-tiny   write a tiny random checkpoint in the official format
  inspect     parse a checkpoint's config.json, validate its tensors, print layer roles
  generate    generate text with the standalone engine (default model: the tiny
              V4.1 preset, RANDOM weights)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from deepinfer_adapters.config import ARCHES, WEIGHT_FORMATS
from deepinfer_adapters.errors import DeepInferAdaptersError


def _init_tiny(args: argparse.Namespace) -> int:
    from deepinfer_adapters.model_impl.tiny_checkpoint import write_tiny_checkpoint

    cfg = write_tiny_checkpoint(args.out, args.arch, seed=args.seed, num_shards=args.shards)
    print(f"wrote tiny {cfg.arch} checkpoint (random weights, seed {args.seed}, "
          f"{cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}) to {args.out}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from deepinfer_adapters.config import load_config
    from deepinfer_adapters.model_impl.weights import validate_checkpoint

    cfg = load_config(args.model)
    print(f"architecture {cfg.arch}: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
          f"{cfg.n_routed_experts} experts top-{cfg.num_experts_per_tok}, FP8 block {list(cfg.quant.fp8_block)}")
    for layer in cfg.layers:
        extra = []
        if layer.kv_source is not None and not layer.is_kv_source:
            extra.append(f"kv from {layer.kv_source}")
        if layer.index_source is not None and layer.index_source != layer.index:
            extra.append(f"selections from {layer.index_source}")
        if layer.engram:
            extra.append("engram")
        kind = "draft" if layer.is_draft else "layer"
        print(f"  {kind} {layer.index:3d}: ratio {layer.compress_ratio:3d} {layer.attn.value:17s} "
              f"{layer.routing.value:5s} {', '.join(extra)}")
    if not args.config_only:
        found = validate_checkpoint(args.model, cfg)
        print(f"checkpoint OK: {len(found)} tensors match the contract")
    return 0


def _structured(args: argparse.Namespace):
    """--regex / --json-schema / --grammar (a value, or @FILE) as a StructuredOutput, or None."""
    from deepinfer_adapters.decoding.structured import StructuredOutput

    def text(value: str | None) -> str | None:
        if value is None or not value.startswith("@"):
            return value
        with open(value[1:], encoding="utf-8") as f:
            return f.read()

    given = {k: text(v) for k, v in (("regex", args.regex), ("json_schema", args.json_schema),
                                     ("grammar", args.grammar)) if v is not None}
    return StructuredOutput(**given) if given else None


def _generate(args: argparse.Namespace) -> int:
    import json

    from deepinfer_adapters.decoding.sampling_params import SamplingParams
    from deepinfer_adapters.standalone.llm import DEFAULT_MODEL, LLM, random_weights_notice

    prompts = list(args.prompts) + list(args.prompt_flags)
    if args.prompts_file:
        with open(args.prompts_file, encoding="utf-8") as f:
            prompts += [line.rstrip("\n") for line in f if line.strip()]
    if not prompts:
        print("error: give a prompt (generate \"Hello\", --prompt TEXT or --prompts-file FILE)", file=sys.stderr)
        return 2
    sampling = {k: v for k, v in dict(
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, max_tokens=args.max_tokens,
        stop=args.stop or None, stop_token_ids=args.stop_token_id or None, seed=args.seed,
        logprobs=args.logprobs, ignore_eos=args.ignore_eos or None,
        structured=_structured(args)).items() if v is not None}
    params = SamplingParams(**sampling)
    engine_args = {k: v for k, v in dict(
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len, block_size=args.block_size, state_memory_bytes=args.state_memory,
        gpu_memory_utilization=args.gpu_memory_utilization, async_scheduling=args.async_scheduling,
        numerics=args.numerics, device=args.device, seed=args.engine_seed, replay=args.replay,
        replay_keep=args.replay_keep, decode=args.decode, weights=args.weights,
        batch_invariant=args.batch_invariant, speculative_tokens=args.speculative_tokens,
        speculative_min_confidence=args.speculative_min_confidence).items() if v is not None}
    llm = LLM(args.model or DEFAULT_MODEL, config=args.config, progress=not args.no_progress, **engine_args)
    try:
        if args.chat:
            outputs = llm.chat([[{"role": "user", "content": p}] for p in prompts], params, thinking=args.thinking,
                               use_tqdm=not args.no_progress)
        else:
            outputs = llm.generate(prompts, params, use_tqdm=not args.no_progress)
    finally:
        llm.close()
    for i, (prompt, out) in enumerate(zip(prompts, outputs)):
        if args.json:
            print(json.dumps({"prompt": prompt, "text": out.text, "token_ids": out.token_ids,
                              "finish_reason": out.finish_reason, "logprobs": out.logprobs}, ensure_ascii=False))
        else:
            print(f"[{i}] prompt: {prompt!r}\n    output: {out.text!r}\n"
                  f"    ({len(out.token_ids)} tokens, finish_reason={out.finish_reason})")
    if llm.preset is not None:
        print(f"note: {random_weights_notice(llm.preset)}")
    return 0


def _add_generate_parser(sub) -> None:
    p = sub.add_parser("generate", help="generate text with the standalone engine",
                       description="Generate with the standalone engine. Without --model it uses the embedded "
                                   "tiny V4.1 preset, built once into ~/.cache/deepinfer-adapters/tiny-v41 from "
                                   "a fixed seed: RANDOM weights, nonsense text.")
    p.add_argument("prompts", nargs="*", metavar="PROMPT", help="prompt text (several allowed)")
    p.add_argument("--prompt", action="append", default=[], dest="prompt_flags", metavar="TEXT",
                   help="a prompt (repeatable)")
    p.add_argument("--prompts-file", help="file with one prompt per line (blank lines skipped)")
    p.add_argument("--model", help="checkpoint directory or preset name (tiny-v41, tiny-v4, tiny-v4-0731); "
                                   "default: tiny-v41")
    p.add_argument("--config", help="engine YAML file (EngineConfig fields); flags win over it")
    p.add_argument("--chat", action="store_true", help="send each prompt as a user message through the chat template")
    p.add_argument("--thinking", action="store_true", help="with --chat: thinking mode")
    p.add_argument("--json", action="store_true", help="print one JSON object per output")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    g = p.add_argument_group("sampling (SamplingParams)")
    g.add_argument("--max-tokens", type=int, help="tokens to generate per prompt (default 16)")
    g.add_argument("--temperature", type=float, help="0 = greedy (default 1.0)")
    g.add_argument("--top-p", type=float, help="nucleus mass in (0, 1] (default 1)")
    g.add_argument("--top-k", type=int, help="keep the k most likely tokens; 0 = off (default)")
    g.add_argument("--seed", type=int, help="sampling seed of every prompt (default: derived from --engine-seed)")
    g.add_argument("--stop", action="append", help="stop string (repeatable)")
    g.add_argument("--stop-token-id", action="append", type=int, help="stop token id (repeatable)")
    g.add_argument("--ignore-eos", action="store_true", help="keep generating after EOS")
    g.add_argument("--logprobs", type=int, help="top logprobs per token to report (0-20)")
    g.add_argument("--regex", help="structured output: the text must match this regular expression (or @FILE)")
    g.add_argument("--json-schema", help="structured output: compact JSON following this JSON Schema (or @FILE)")
    g.add_argument("--grammar", help="structured output: an EBNF (xgrammar GBNF, rule root) grammar (or @FILE)")
    g = p.add_argument_group("engine (EngineConfig)")
    g.add_argument("--max-num-seqs", type=int)
    g.add_argument("--max-num-batched-tokens", type=int)
    g.add_argument("--max-model-len", type=int)
    g.add_argument("--block-size", type=int, help="tokens per state page")
    g.add_argument("--state-memory", help="CPU state budget, e.g. 2GiB")
    g.add_argument("--gpu-memory-utilization", type=float)
    g.add_argument("--numerics", choices=("reference", "float32", "float32-quant"))
    g.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when available)")
    g.add_argument("--engine-seed", type=int, help="seed for requests without --seed (default 0)")
    g.add_argument("--async-scheduling", dest="async_scheduling", action="store_true", default=None,
                   help="overlap scheduling with the model (default on)")
    g.add_argument("--no-async-scheduling", dest="async_scheduling", action="store_false")
    g.add_argument("--replay", choices=("off", "mask", "compact"),
                   help="V4.1 SWA bounded replay of prompt prefills (default off = exact)")
    g.add_argument("--replay-keep", type=int, help="positions the consumer layers keep (default 140)")
    g.add_argument("--decode", choices=("auto", "graphs", "eager", "forward"),
                   help="decode steps: CUDA graphs of the batched decode (auto on CUDA), eager, or forward")
    g.add_argument("--weights", choices=("auto", *WEIGHT_FORMATS),
                   help="weight storage: fp8 as stored (auto on CUDA, batch-invariant), fp4 (fp8, and FP4 experts "
                        "kept packed: auto on CUDA with --no-batch-invariant) or dense float64 (auto on the CPU)")
    g.add_argument("--speculative-tokens", type=int,
                   help="draft tokens verified per step with the model's DSpark stages (0 = off, up to 5)")
    g.add_argument("--speculative-min-confidence", type=float,
                   help="verify only leading drafts with predicted acceptance >= this (default 0: all)")
    g.add_argument("--no-batch-invariant", dest="batch_invariant", action="store_false", default=None,
                   help="let kernels depend on the batch (faster on the GPU; seeded sampling then may too)")
    p.set_defaults(func=_generate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="deepinfer-adapters", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("init-tiny", help="write a tiny random checkpoint in the official format")
    p.add_argument("--arch", choices=ARCHES, required=True, help="release format to imitate")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--shards", type=int, default=2, help="number of safetensors shards (default 2)")
    p.set_defaults(func=_init_tiny)

    p = sub.add_parser("inspect", help="parse config.json, validate tensors, print layer roles")
    p.add_argument("model", help="checkpoint directory")
    p.add_argument("--config-only", action="store_true", help="skip tensor validation")
    p.set_defaults(func=_inspect)

    _add_generate_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except DeepInferAdaptersError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
