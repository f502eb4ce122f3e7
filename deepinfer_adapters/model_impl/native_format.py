"""The native weight format: checkpoint weights kept as stored, for the GPU kernels.

``weights="dense"`` (the default, the reference path) holds every weight float64
dequantized. ``weights="fp8"`` keeps what the kernels can read directly:

- FP8 linears (model_spec.md 4: wq_a, wq_b, wkv, wo_a, wo_b, indexer.wq_b, shared
  experts, draft projections, engram.wkv): E4M3 + their block scales, as stored;
- routed experts: FP4 E2M1 converted to E4M3 at load and stacked per layer
  (layers/experts_fp8.py), with one E8M0 scale per 128 inputs (``EXPERT_BLOCK``) where
  that is exact for every value of the layer (quant.fp4_to_fp8_blocks; the GEMMs then
  rescale once per 128-deep step instead of per 32), else the checkpoint's scale per 32
  as a (1, 32) block scale (always exact: every E2M1 value is an E4M3 value). Where also
  exact, a matrix's per-128 scales are one per 128 rows too (quant.fp4_to_fp8_tiles; each
  row still holds its copy): the prefill's FP8 MoE kernel then scales a step's sums with one
  multiply a value (kernels/gluon_moe.py ``tile_scales``). The choice of block is per layer, made from the data in
  ``native_tensors``; the layer's storage follows the tensors' shapes
  (``build(..., expert_blocks=...)``). V4-Flash-Base FP8 experts stay as stored.
  ``weights="fp4"``: the same, but FP4 experts kept packed (E2M1, the checkpoint's scale per
  32, nibbles reordered per span of 64 inputs and 128-row tiles: quant.to_fp4_tiles; expert block
  ``PACKED_FP4``):
  half the expert bytes, read by the GPU kernels directly. V4.1's E4M3 experts whose widths 128
  divides are held in 128 x 128 tiles (quant.to_e4m3_tiles: each tile's bytes contiguous;
  layers/experts_fp8.py ``holds_e4m3_tiles``);
- bf16 tensors (embeddings, head, gate, compressor, ...) bf16; the Engram table bf16
  (E4M3 x E8M0 is exact in bf16);
- everything else (norms, hyper-connections, sinks) as in the dense model;
- linears that read the same input (wq_a + wkv, a shared expert's w1 + w3, a compressor's
  wkv + wgate) share one weight, run as one GEMM (layers/linear.py ``merge_same_input``).

With the torch reference ops (kernels/reference_fp8.py) a native model computes
exactly what the dense one does (tests/test_native_format.py). The model is built on
the meta device and allocated once in its native dtypes, so a model whose float64
weights would not fit in memory can still be built (benchmarks/bench_real_width.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from deepinfer_adapters.config import WEIGHT_FORMATS, ModelConfig
from deepinfer_adapters.model_impl.checkpoint_spec import BF16, F32, FP4_GROUP, TensorSpec, expected_tensors
from deepinfer_adapters.model_impl.layers.engram import EngramEmbed
from deepinfer_adapters.model_impl.layers.experts_fp8 import holds_e4m3_tiles
from deepinfer_adapters.model_impl.layers.linear import Linear, merge_same_input
from deepinfer_adapters.model_impl.layers.moe import Gate, MoE
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.quant import (dequant_fp8_blocks, expert_matrix, fp4_to_fp8_tiles, is_span_packed,
                                                 to_e4m3_tiles, to_fp4_tiles, unpack_fp4)
from deepinfer_adapters.model_impl.weights import load_checkpoint

EXPERT_BLOCK = 128  # FP4 experts: inputs per E8M0 scale after conversion, where exact (FP4_GROUP: as stored)
PACKED_FP4 = 0  # expert "block" of FP4 experts kept packed, with the checkpoint's scale per FP4_GROUP
_EXPERT = re.compile(r"^(?P<ffn>.+\.ffn)\.experts\.(?P<e>\d+)\.(?P<w>w[123])\.(?P<part>weight|scale)$")


def check_format(weights: str) -> None:
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"unknown weight format {weights!r}; valid: {list(WEIGHT_FORMATS)}")


def _torch_dtype(spec: TensorSpec) -> torch.dtype:
    return {BF16: torch.bfloat16, F32: torch.float32, "F8_E8M0": torch.float8_e8m0fnu}[spec.dtype]


def load(cls: type, cfg: ModelConfig, model_dir: Path, numerics: Numerics, *, device: str | torch.device,
         progress: bool = True, expert_block: int = EXPERT_BLOCK, **kwargs: Any) -> nn.Module:
    """``cls`` in the native format on ``device`` with the checkpoint's weights: the tensors are
    converted first, so each layer's storage is allocated once in the form its data took."""
    raw = load_checkpoint(model_dir, cfg, dequantize=None, progress=progress)
    tensors = native_tensors(raw, cfg, expert_block=expert_block)
    del raw
    model = build(cls, cfg, numerics, device=device, model_dir=model_dir, expert_blocks=expert_blocks(tensors),
                  **kwargs)
    model.load_weights(tensors)
    return model


def build(cls: type, cfg: ModelConfig, numerics: Numerics, *, device: str | torch.device,
          model_dir: Path | None = None, expert_blocks: int | Mapping[str, int] = FP4_GROUP,
          **kwargs: Any) -> nn.Module:
    """``cls`` in the native format on ``device``, uninitialised (load or fill next).
    ``expert_blocks``: inputs per scale of the FP4-converted experts, for every layer or by
    MoE module name (``expert_blocks(tensors)``)."""
    if cfg.engram is not None and model_dir is not None and "hasher" not in kwargs:
        from deepinfer_adapters.model_impl.engram_hash import make_engram_hasher

        kwargs["hasher"] = make_engram_hasher(cfg, model_dir)  # real tensors: not under meta
    if cfg.engram is None and model_dir is not None:
        kwargs["model_dir"] = model_dir
    with torch.device("meta"):
        model = cls(cfg, numerics, **kwargs)
    to_native_storage(model, cfg, expert_blocks)
    model = model.to_empty(device=device)
    merge_same_input(model)  # after allocation: the members' parameters become views of one weight
    return model


def to_native_storage(model: nn.Module, cfg: ModelConfig, expert_blocks: int | Mapping[str, int] = FP4_GROUP) -> None:
    """Swap every checkpoint-backed weight's storage for its native one (shapes kept);
    ``expert_blocks`` as in ``build``."""
    specs = expected_tensors(cfg)
    for name, module in list(model.named_modules()):
        if isinstance(module, MoE) and len(module.experts):
            weight, scale = specs[f"{name}.experts.0.w1.weight"], specs[f"{name}.experts.0.w1.scale"]
            if weight.kind == "fp4_weight":
                k_block = expert_blocks if isinstance(expert_blocks, int) else expert_blocks.get(name, FP4_GROUP)
                packed = k_block == PACKED_FP4
                module.use_fp8_experts((1, FP4_GROUP if packed else k_block), torch.float8_e8m0fnu, packed_fp4=packed)
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


def native_tensors(raw: dict[str, torch.Tensor], cfg: ModelConfig, *,
                   expert_block: int = EXPERT_BLOCK) -> dict[str, torch.Tensor]:
    """Checkpoint tensors as stored (``load_checkpoint(dequantize=None)``) -> the native
    model's tensors by name: experts converted and stacked (FP4: one scale per
    ``expert_block`` inputs where exact for the whole layer, else per 32; ``PACKED_FP4``:
    kept packed, uint8), Engram tables
    dequantized, the rest unchanged."""
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
        out.update(_stacked_experts(ffn, parts, expert_block, cfg.quant.fp8_block[1]))
    return out


def _stacked_experts(ffn: str, parts: dict[tuple[int, str, str], torch.Tensor],
                     expert_block: int, act_block: int) -> dict[str, torch.Tensor]:
    """One MoE layer's experts as ``{ffn}.routed.{w13, w13_scale, w2, w2_scale}``."""
    n = 1 + max(e for e, _, _ in parts)
    names = [(e, w) for e in range(n) for w in ("w1", "w2", "w3")]
    fp4 = parts[(0, "w1", "weight")].dtype in (torch.int8, torch.uint8)
    pairs: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
    if fp4 and expert_block not in (FP4_GROUP, PACKED_FP4):
        for e, w in names:
            converted = fp4_to_fp8_tiles(parts[(e, w, "weight")], parts[(e, w, "scale")], expert_block, FP4_GROUP)
            if converted is None:  # not exact for this layer: keep the checkpoint's scales
                pairs = {}
                break
            pairs[(e, w)] = converted
    if fp4 and expert_block == PACKED_FP4:
        pairs = {(e, w): (parts[(e, w, "weight")].view(torch.uint8), parts[(e, w, "scale")]) for e, w in names}
    if not pairs:
        for e, w in names:
            weight = parts[(e, w, "weight")]
            pairs[(e, w)] = (unpack_fp4(weight).to(torch.float8_e4m3fn) if fp4 else weight, parts[(e, w, "scale")])
    out: dict[str, torch.Tensor] = {}
    for i, suffix in enumerate(("", "_scale")):
        out[f"{ffn}.routed.w13{suffix}"] = torch.stack([torch.cat([pairs[(e, "w1")][i], pairs[(e, "w3")][i]])
                                                        for e in range(n)])
        out[f"{ffn}.routed.w2{suffix}"] = torch.stack([pairs[(e, "w2")][i] for e in range(n)])
    # the GPU kernels' layouts, per expert matrix (w1 and w3 joined), as Fp8Experts holds them
    w13, w2 = out[f"{ffn}.routed.w13"], out[f"{ffn}.routed.w2"]
    if fp4 and expert_block == PACKED_FP4:
        out[f"{ffn}.routed.w13"], out[f"{ffn}.routed.w2"] = to_fp4_tiles(w13), to_fp4_tiles(w2)
    elif w13.dtype == torch.float8_e4m3fn and holds_e4m3_tiles(w13.shape[-1], w2.shape[-1], act_block):
        out[f"{ffn}.routed.w13"], out[f"{ffn}.routed.w2"] = to_e4m3_tiles(w13), to_e4m3_tiles(w2)
    return out


def expert_blocks(tensors: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """Inputs per scale of each layer's stacked experts, by MoE module name (``build``);
    ``PACKED_FP4`` where they are packed E2M1."""
    def block(weight: torch.Tensor, scale: torch.Tensor) -> int:
        return PACKED_FP4 if is_span_packed(weight) else expert_matrix(weight)[1] // scale.shape[-1]

    return {name.removesuffix(".routed.w13_scale"): block(tensors[name.removesuffix("_scale")], t)
            for name, t in tensors.items() if name.endswith(".routed.w13_scale")}
