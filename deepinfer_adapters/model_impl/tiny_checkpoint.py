"""Deterministic random checkpoints in the official format, for tests and the default model.

``write_tiny_checkpoint`` writes config.json in the release's own format, the
tokenizer files, and safetensors shards holding exactly the tensor contract of
``checkpoint_spec`` with the release's dtypes and quantization (FP8 E4M3 +
E8M0 block scales, packed FP4 experts, E8M0 per-32 scales).

Each tensor is drawn from its own generator seeded by (seed, name), so a value
depends only on the seed and the tensor's name, never on write order.

Scales keep activations well conditioned through a deep stack of random
layers: projections ~ N(0, 1/fan_in), norm weights ~ 1, the LM head a little
wider so logits have a real spread.
"""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path
from typing import Any

import torch

from deepinfer_adapters.config import ModelConfig, parse_config
from deepinfer_adapters.model_impl.checkpoint_spec import F32, I64, TensorSpec, expected_tensors
from deepinfer_adapters.model_impl.quant import quant_fp4_blocks, quant_fp8_blocks
from deepinfer_adapters.model_impl.safetensors_io import write_shards
from deepinfer_adapters.model_impl.tokenizer import write_tokenizer_files
from deepinfer_adapters.presets import tiny_config

# Spread of the head rows relative to 1/sqrt(D): logits then have std ~ this.
HEAD_GAIN = 3.0


def write_tiny_checkpoint(
    out_dir: str | Path,
    arch: str,
    *,
    seed: int = 0,
    num_shards: int = 2,
    config: dict[str, Any] | None = None,
    tid2eid_dtype: str = I64,
) -> ModelConfig:
    """Write a random checkpoint for the tiny preset of ``arch`` (or ``config``)."""
    raw = config if config is not None else tiny_config(arch)
    cfg = parse_config(raw)
    tensors = random_tensors(cfg, seed=seed, tid2eid_dtype=tid2eid_dtype)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_shards(tensors, out, num_shards=num_shards)
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    write_tokenizer_files(out, cfg.arch)
    return cfg


def random_tensors(cfg: ModelConfig, *, seed: int = 0, tid2eid_dtype: str = I64) -> dict[str, torch.Tensor]:
    specs = expected_tensors(cfg)
    out: dict[str, torch.Tensor] = {}
    for name, spec in specs.items():
        if spec.kind in ("fp8_scale", "fp4_scale"):
            continue  # written with its weight
        gen = torch.Generator().manual_seed(zlib.crc32(f"{seed}:{name}".encode()))
        if spec.kind in ("fp8_weight", "fp8_table", "fp4_weight"):
            out.update(_quantized(cfg, spec, gen))
        else:
            out[name] = _plain(cfg, spec, gen, tid2eid_dtype)
    assert out.keys() == specs.keys()
    return out


def _quantized(cfg: ModelConfig, spec: TensorSpec, gen: torch.Generator) -> dict[str, torch.Tensor]:
    prefix = spec.name.removesuffix(".weight")
    if spec.kind == "fp4_weight":
        out_f, in_f = spec.shape[0], spec.shape[1] * 2
        w, s = quant_fp4_blocks(_normal((out_f, in_f), 1 / math.sqrt(in_f), gen))
        return {spec.name: w, f"{prefix}.scale": s}
    if spec.kind == "fp8_table":  # Engram table rows: embeddings, unit scale
        w, s = quant_fp8_blocks(_normal(spec.shape, 1.0, gen), (1, cfg.quant.fp8_block[1]))
        return {spec.name: w, f"{prefix}.scale": s}
    w, s = quant_fp8_blocks(_normal(spec.shape, 1 / math.sqrt(spec.shape[1]), gen), cfg.quant.fp8_block)
    if cfg.quant.expert_dtype == "fp8" and ".experts." in spec.name:
        s = s.float()  # V4-Flash-Base stores expert scales as F32
    return {spec.name: w, f"{prefix}.scale": s}


def _plain(cfg: ModelConfig, spec: TensorSpec, gen: torch.Generator, tid2eid_dtype: str) -> torch.Tensor:
    name, shape = spec.name, spec.shape
    dtype = torch.float32 if spec.dtype == F32 else torch.bfloat16
    if name.endswith("tid2eid"):
        return _tid2eid(shape, cfg.n_routed_experts, gen, torch.int64 if tid2eid_dtype == I64 else torch.int32)
    if name.endswith("attn_sink"):
        return _normal(shape, 0.5, gen)
    if name.endswith(("_fn",)):  # hyper-connection mix projections read 4*D inputs
        return _normal(shape, 1 / math.sqrt(shape[1]), gen)
    if name.endswith("_base"):
        return _normal(shape, 0.5, gen)
    if name.endswith("_scale"):  # hyper-connection logit scales: positive, order 1
        return 0.5 + torch.rand(shape, generator=gen)
    if name.endswith(("gate.bias", "gate.bias_vl")):
        return _normal(shape, 0.1, gen)
    if name.endswith("ape"):
        return _normal(shape, 0.5, gen)
    if name == "embed.weight" or name.startswith("image_"):
        return _normal(shape, 1.0, gen).to(dtype)
    if name == "head.weight":
        return _normal(shape, HEAD_GAIN / math.sqrt(shape[1]), gen).to(dtype)
    if len(shape) == 1 and "norm" in name:
        return (1 + _normal(shape, 0.1, gen)).to(dtype)
    if len(shape) == 1:  # biases
        return _normal(shape, 0.02, gen).to(dtype)
    return _normal(shape, 1 / math.sqrt(shape[-1]), gen).to(dtype)


def _normal(shape: tuple[int, ...], std: float, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=gen) * std


def _tid2eid(shape: tuple[int, ...], n_experts: int, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """Each token's k distinct experts, like the release's frozen hash table."""
    vocab, k = shape
    return torch.rand(vocab, n_experts, generator=gen).argsort(dim=1)[:, :k].to(dtype)
