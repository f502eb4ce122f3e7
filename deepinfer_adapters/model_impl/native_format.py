"""The native weight format: checkpoint weights kept as stored, for the GPU kernels.

``weights="dense"`` (the default, the reference path) holds every weight float64
dequantized. ``weights="fp8"`` keeps what the kernels can read directly:

- FP8 linears (model_spec.md 4: wq_a, wq_b, wkv, wo_a, wo_b, indexer.wq_b, shared
  experts, draft projections, engram.wkv): E4M3 + their block scales, as stored;
- routed experts: FP4 E2M1 converted to E4M3 at load (exact: every E2M1 value is an
  E4M3 value; the E8M0 scale per 32 inputs becomes a (1, 32) block scale) and stacked
  per layer (layers/experts_fp8.py); V4-Flash-Base FP8 experts stay as stored;
- bf16 tensors (embeddings, head, gate, compressor, ...) bf16; the Engram table bf16
  (E4M3 x E8M0 is exact in bf16);
- everything else (norms, hyper-connections, sinks) as in the dense model.

With the torch reference ops (kernels/reference_fp8.py) a native model computes
exactly what the dense one does (tests/test_native_format.py). The model is built on
the meta device and allocated once in its native dtypes, so a model whose float64
weights would not fit in memory can still be built (benchmarks/bench_real_width.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from deepinfer_adapters.config import ModelConfig
from deepinfer_adapters.model_impl.checkpoint_spec import BF16, F32, FP4_GROUP, TensorSpec, expected_tensors
from deepinfer_adapters.model_impl.layers.engram import EngramEmbed
from deepinfer_adapters.model_impl.layers.linear import Linear
from deepinfer_adapters.model_impl.layers.moe import Gate, MoE
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.quant import dequant_fp8_blocks, unpack_fp4

WEIGHT_FORMATS = ("dense", "fp8")
_EXPERT = re.compile(r"^(?P<ffn>.+\.ffn)\.experts\.(?P<e>\d+)\.(?P<w>w[123])\.(?P<part>weight|scale)$")


def check_format(weights: str) -> None:
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"unknown weight format {weights!r}; valid: {list(WEIGHT_FORMATS)}")


def _torch_dtype(spec: TensorSpec) -> torch.dtype:
    return {BF16: torch.bfloat16, F32: torch.float32, "F8_E8M0": torch.float8_e8m0fnu}[spec.dtype]


def build(cls: type, cfg: ModelConfig, numerics: Numerics, *, device: str | torch.device,
          model_dir: Path | None = None, **kwargs: Any) -> nn.Module:
    """``cls`` in the native format on ``device``, uninitialised (load or fill next)."""
    if cfg.engram is not None and model_dir is not None and "hasher" not in kwargs:
        from deepinfer_adapters.model_impl.engram_hash import make_engram_hasher

        kwargs["hasher"] = make_engram_hasher(cfg, model_dir)  # real tensors: not under meta
    if cfg.engram is None and model_dir is not None:
        kwargs["model_dir"] = model_dir
    with torch.device("meta"):
        model = cls(cfg, numerics, **kwargs)
    to_native_storage(model, cfg)
    return model.to_empty(device=device)


def to_native_storage(model: nn.Module, cfg: ModelConfig) -> None:
    """Swap every checkpoint-backed weight's storage for its native one (shapes kept)."""
    specs = expected_tensors(cfg)
    for name, module in list(model.named_modules()):
        if isinstance(module, MoE) and len(module.experts):
            weight, scale = specs[f"{name}.experts.0.w1.weight"], specs[f"{name}.experts.0.w1.scale"]
            if weight.kind == "fp4_weight":
                module.use_fp8_experts((1, FP4_GROUP), torch.float8_e8m0fnu)
            else:
                module.use_fp8_experts(cfg.quant.fp8_block, _torch_dtype(scale))
    for name, module in model.named_modules():
        spec = specs.get(f"{name}.weight")
        if spec is None:
            continue
        if isinstance(module, Linear):
            if spec.kind == "fp8_weight":
                module.store_fp8(cfg.quant.fp8_block, _torch_dtype(specs[f"{name}.scale"]))
            else:
                module.store_dtype(_torch_dtype(spec))
        elif isinstance(module, (Gate, EngramEmbed, nn.Embedding)):
            dtype = torch.bfloat16 if spec.kind == "fp8_table" else _torch_dtype(spec)
            module.weight = nn.Parameter(torch.empty_like(module.weight, dtype=dtype), requires_grad=False)


def native_tensors(raw: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Checkpoint tensors as stored (``load_checkpoint(dequantize=None)``) -> the native
    model's tensors by name: experts converted and stacked, Engram tables dequantized,
    the rest unchanged."""
    specs = expected_tensors(cfg)
    out: dict[str, torch.Tensor] = {}
    experts: dict[str, dict[tuple[int, str, str], torch.Tensor]] = {}
    for name, tensor in raw.items():
        match = _EXPERT.match(name)
        if match:
            experts.setdefault(match["ffn"], {})[(int(match["e"]), match["w"], match["part"])] = tensor
        elif specs[name].kind == "fp8_table":
            scale = raw[name.removesuffix(".weight") + ".scale"]
            out[name] = dequant_fp8_blocks(tensor, scale, (1, cfg.quant.fp8_block[1]), torch.bfloat16)
        elif not (specs[name].kind == "fp8_scale" and specs[specs[name].scale_for].kind == "fp8_table"):
            out[name] = tensor
    for ffn, parts in experts.items():
        n = 1 + max(e for e, _, _ in parts)
        for part, suffix in (("weight", ""), ("scale", "_scale")):
            def get(e: int, w: str) -> torch.Tensor:
                t = parts[(e, w, part)]
                if part == "weight" and t.dtype in (torch.int8, torch.uint8):  # packed FP4
                    return unpack_fp4(t).to(torch.float8_e4m3fn)
                return t

            out[f"{ffn}.routed.w13{suffix}"] = torch.stack([torch.cat([get(e, "w1"), get(e, "w3")]) for e in range(n)])
            out[f"{ffn}.routed.w2{suffix}"] = torch.stack([get(e, "w2") for e in range(n)])
    return out
