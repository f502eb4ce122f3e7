"""The ``deepinfer-adapters`` command line.

Subcommands:
  init-tiny   write a tiny random checkpoint in the official format
  inspect     parse a checkpoint's config.json, validate its tensors, print layer roles
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from deepinfer_adapters.config import ARCHES
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
