"""transformers' DeepseekV4ForCausalLM as an independent V4-Flash reference and peer.

Two ways to fill it, both through the explicit name table below:
- ``build_hf_model(model_dir)`` reads a checkpoint in DeepSeek's official format
  (config.json + sharded safetensors, FP8/FP4 weights) with our own reader,
  dequantizes every weight and loads it (the parity tests);
- ``hf_model_from_ours(model, raw_config)`` copies the weights of one of our V4 models
  (dense or native FP8, model_impl/native_format.py) into a new transformers model on
  the same device, dequantized exactly (E4M3 x power-of-two scale fits bf16), one
  tensor at a time (benchmarks/bench_v4_width.py: the same random weights in both).
Either way every transformers parameter and persistent buffer is filled exactly once.
``hf_logits(model, ids)`` runs one full forward without a cache.

What transformers does differently from the official reference (no FP8/FP4
round trips, no Hadamard, ...) is listed in docs/notes/transformers_v4.md.

Name mapping (official -> transformers, ``model.`` prefix omitted except where
shown; N = layer index):

    embed.weight                              -> model.embed_tokens.weight
    head.weight                               -> lm_head.weight
    norm.weight                               -> model.norm.weight
    hc_head_{fn,base,scale}                   -> model.hc_head.hc_{fn,base,scale}
    layers.N.attn_norm.weight                 -> layers.N.input_layernorm.weight
    layers.N.ffn_norm.weight                  -> layers.N.post_attention_layernorm.weight
    layers.N.hc_attn_{fn,base,scale}          -> layers.N.attn_hc.{fn,base,scale}
    layers.N.hc_ffn_{fn,base,scale}           -> layers.N.ffn_hc.{fn,base,scale}
    layers.N.attn.wq_a.weight                 -> layers.N.self_attn.q_a_proj.weight
    layers.N.attn.q_norm.weight               -> layers.N.self_attn.q_a_norm.weight
    layers.N.attn.wq_b.weight                 -> layers.N.self_attn.q_b_proj.weight
    layers.N.attn.wkv.weight                  -> layers.N.self_attn.kv_proj.weight
    layers.N.attn.kv_norm.weight              -> layers.N.self_attn.kv_norm.weight
    layers.N.attn.wo_a.weight                 -> layers.N.self_attn.o_a_proj.weight
    layers.N.attn.wo_b.weight                 -> layers.N.self_attn.o_b_proj.weight
    layers.N.attn.attn_sink                   -> layers.N.self_attn.sinks
    layers.N.attn.compressor.wkv.weight       -> layers.N.self_attn.compressor.kv_proj.weight
    layers.N.attn.compressor.wgate.weight     -> layers.N.self_attn.compressor.gate_proj.weight
    layers.N.attn.compressor.ape              -> layers.N.self_attn.compressor.position_bias
    layers.N.attn.compressor.norm.weight      -> layers.N.self_attn.compressor.kv_norm.weight
    layers.N.attn.indexer.compressor.wkv.weight   -> ...self_attn.compressor.indexer.kv_proj.weight
    layers.N.attn.indexer.compressor.wgate.weight -> ...self_attn.compressor.indexer.gate_proj.weight
    layers.N.attn.indexer.compressor.ape          -> ...self_attn.compressor.indexer.position_bias
    layers.N.attn.indexer.compressor.norm.weight  -> ...self_attn.compressor.indexer.kv_norm.weight
    layers.N.attn.indexer.wq_b.weight             -> ...self_attn.compressor.indexer.q_b_proj.weight
    layers.N.attn.indexer.weights_proj.weight     -> ...self_attn.compressor.indexer.scorer.weights_proj.weight
    layers.N.ffn.gate.weight                  -> layers.N.mlp.gate.weight
    layers.N.ffn.gate.bias                    -> layers.N.mlp.gate.e_score_correction_bias  (score layers)
    layers.N.ffn.gate.tid2eid                 -> layers.N.mlp.gate.tid2eid                  (hash layers, as int64)
    layers.N.ffn.experts.E.w1 / w3 .weight    -> layers.N.mlp.experts.gate_up_proj[E] = cat([w1, w3], 0)
    layers.N.ffn.experts.E.w2.weight          -> layers.N.mlp.experts.down_proj[E]
    layers.N.ffn.shared_experts.w1.weight     -> layers.N.mlp.shared_experts.gate_proj.weight
    layers.N.ffn.shared_experts.w3.weight     -> layers.N.mlp.shared_experts.up_proj.weight
    layers.N.ffn.shared_experts.w2.weight     -> layers.N.mlp.shared_experts.down_proj.weight
    mtp.*                                     -> (ignored: transformers has no MTP / DSpark head)

The table agrees with transformers' own ``conversion_mapping.py`` entry for
``deepseek_v4``; it is written out here so a renamed or missing tensor fails
loudly instead of silently keeping transformers' random init.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from deepinfer_adapters.config import ARCH_V4, ARCH_V4_0731, AttnRole, ModelConfig, Routing, load_config, parse_config
from deepinfer_adapters.model_impl.base import module_name
from deepinfer_adapters.model_impl.layers.linear import Linear
from deepinfer_adapters.model_impl.quant import dequant_fp8_blocks
from deepinfer_adapters.model_impl.weights import load_checkpoint

# config.json keys that describe the *stored* checkpoint, not the math. We hand
# transformers dense dequantized weights, so its FP8 quantizer must not engage.
_STORAGE_KEYS = ("quantization_config", "expert_dtype", "torch_dtype", "dtype")

_LAYER_TYPE = {AttnRole.WINDOW: "sliding_attention", AttnRole.CSA: "compressed_sparse_attention",
               AttnRole.HCA: "heavily_compressed_attention"}
_MLP_TYPE = {Routing.HASH: "hash_moe", Routing.SCORE: "moe"}

# Per-layer 1:1 renames (official suffix after "layers.N." -> transformers suffix after "model.layers.N.").
_LAYER_RENAMES: dict[str, str] = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "hc_attn_fn": "attn_hc.fn",
    "hc_attn_base": "attn_hc.base",
    "hc_attn_scale": "attn_hc.scale",
    "hc_ffn_fn": "ffn_hc.fn",
    "hc_ffn_base": "ffn_hc.base",
    "hc_ffn_scale": "ffn_hc.scale",
    "attn.wq_a.weight": "self_attn.q_a_proj.weight",
    "attn.q_norm.weight": "self_attn.q_a_norm.weight",
    "attn.wq_b.weight": "self_attn.q_b_proj.weight",
    "attn.wkv.weight": "self_attn.kv_proj.weight",
    "attn.kv_norm.weight": "self_attn.kv_norm.weight",
    "attn.wo_a.weight": "self_attn.o_a_proj.weight",
    "attn.wo_b.weight": "self_attn.o_b_proj.weight",
    "attn.attn_sink": "self_attn.sinks",
    "ffn.gate.weight": "mlp.gate.weight",
    "ffn.shared_experts.w1.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn.shared_experts.w3.weight": "mlp.shared_experts.up_proj.weight",
    "ffn.shared_experts.w2.weight": "mlp.shared_experts.down_proj.weight",
}
_COMPRESSOR_RENAMES: dict[str, str] = {  # ratio 4 and ratio 128 layers
    "attn.compressor.wkv.weight": "self_attn.compressor.kv_proj.weight",
    "attn.compressor.wgate.weight": "self_attn.compressor.gate_proj.weight",
    "attn.compressor.ape": "self_attn.compressor.position_bias",
    "attn.compressor.norm.weight": "self_attn.compressor.kv_norm.weight",
}
_INDEXER_RENAMES: dict[str, str] = {  # ratio 4 layers only
    "attn.indexer.compressor.wkv.weight": "self_attn.compressor.indexer.kv_proj.weight",
    "attn.indexer.compressor.wgate.weight": "self_attn.compressor.indexer.gate_proj.weight",
    "attn.indexer.compressor.ape": "self_attn.compressor.indexer.position_bias",
    "attn.indexer.compressor.norm.weight": "self_attn.compressor.indexer.kv_norm.weight",
    "attn.indexer.wq_b.weight": "self_attn.compressor.indexer.q_b_proj.weight",
    "attn.indexer.weights_proj.weight": "self_attn.compressor.indexer.scorer.weights_proj.weight",
}
_TOP_RENAMES: dict[str, str] = {
    "embed.weight": "model.embed_tokens.weight",
    "head.weight": "lm_head.weight",
    "norm.weight": "model.norm.weight",
    "hc_head_fn": "model.hc_head.hc_fn",
    "hc_head_base": "model.hc_head.hc_base",
    "hc_head_scale": "model.hc_head.hc_scale",
}


@dataclass
class HFLoadReport:
    """What the conversion did: how many transformers tensors were filled and what was left out."""

    filled: int
    ignored: list[str] = field(default_factory=list)  # official names with no transformers counterpart (mtp.*)
    mapping: dict[str, str] = field(default_factory=dict)  # official -> transformers, 1:1 renames only


def _check_arch(cfg: ModelConfig) -> None:
    if cfg.arch not in (ARCH_V4, ARCH_V4_0731):
        raise ValueError(f"transformers' DeepseekV4ForCausalLM models V4-Flash only; got arch {cfg.arch!r}")


def hf_config(model_dir: str | Path, *, dtype: torch.dtype = torch.float32) -> Any:
    """transformers' DeepseekV4Config built from our config.json.

    DeepseekV4Config takes the official flat config directly: ``compress_ratios``
    (0/4/128) becomes ``layer_types`` (truncated to num_hidden_layers, so the
    trailing MTP/DSpark entries are dropped), ``num_hash_layers`` becomes
    ``mlp_layer_types``, ``qk_rope_head_dim`` becomes ``partial_rotary_factor``
    and ``rope_scaling`` (``type: yarn``) becomes ``rope_parameters["compress"]``
    with ``attention_factor`` forced to 1.0 (no mscale); sliding layers get
    ``rope_parameters["main"]`` = plain RoPE at ``rope_theta``. Only the storage
    keys (quantization_config, expert_dtype, torch_dtype) are dropped.
    """
    path = Path(model_dir)
    return hf_config_from_dict(json.loads((path / "config.json" if path.is_dir() else path).read_text()),
                               dtype=dtype)


def hf_config_from_dict(raw: dict[str, Any], *, dtype: torch.dtype = torch.float32) -> Any:
    """``hf_config`` from a config.json already read (e.g. a preset cut to fewer layers)."""
    from transformers.models.deepseek_v4 import DeepseekV4Config

    cfg = parse_config(raw)
    _check_arch(cfg)
    bad = sorted({layer.compress_ratio for layer in cfg.main_layers} - {0, 4, 128})
    if bad:
        raise ValueError(f"transformers' DeepseekV4 supports compress ratios 0/4/128 only; config has {bad}")
    kwargs = {k: v for k, v in raw.items() if k not in _STORAGE_KEYS}
    hf_cfg = DeepseekV4Config(**kwargs)
    hf_cfg.use_cache = False
    hf_cfg.dtype = dtype
    _check_consistent(cfg, hf_cfg)
    return hf_cfg


def _check_consistent(cfg: ModelConfig, hf_cfg: Any) -> None:
    """transformers derived the same layer roles, routing and RoPE as our parser."""
    want_layers = [_LAYER_TYPE[layer.attn] for layer in cfg.main_layers]
    want_mlp = [_MLP_TYPE[layer.routing] for layer in cfg.main_layers]
    assert hf_cfg.layer_types == want_layers, (hf_cfg.layer_types, want_layers)
    assert hf_cfg.mlp_layer_types == want_mlp, (hf_cfg.mlp_layer_types, want_mlp)
    assert hf_cfg.qk_rope_head_dim == cfg.qk_rope_head_dim
    assert hf_cfg.compress_rates == {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
    main, comp = hf_cfg.rope_parameters["main"], hf_cfg.rope_parameters["compress"]
    assert main["rope_type"] == "default" and float(main["rope_theta"]) == cfg.rope.theta
    assert comp["rope_type"] == "yarn" and float(comp["rope_theta"]) == cfg.rope.compress_theta
    assert float(comp["factor"]) == cfg.rope.factor
    assert int(comp["original_max_position_embeddings"]) == cfg.rope.original_max_position_embeddings
    assert float(comp["beta_fast"]) == cfg.rope.beta_fast and float(comp["beta_slow"]) == cfg.rope.beta_slow
    assert comp["attention_factor"] == 1.0  # no YaRN mscale
    assert hf_cfg.sliding_window == cfg.sliding_window
    assert hf_cfg.index_topk == cfg.index_topk and hf_cfg.hc_sinkhorn_iters == cfg.hc_sinkhorn_iters


def name_mapping(cfg: ModelConfig) -> dict[str, str]:
    """Official name -> transformers name for every 1:1 tensor of the main model.

    Routed experts are not in here: they are stacked (see ``convert_state_dict``).
    """
    _check_arch(cfg)
    out = dict(_TOP_RENAMES)
    for layer in cfg.main_layers:
        n = layer.index
        table = dict(_LAYER_RENAMES)
        if layer.attn in (AttnRole.CSA, AttnRole.HCA):
            table.update(_COMPRESSOR_RENAMES)
        if layer.attn is AttnRole.CSA:
            table.update(_INDEXER_RENAMES)
        table["ffn.gate.tid2eid" if layer.routing is Routing.HASH else "ffn.gate.bias"] = (
            "mlp.gate.tid2eid" if layer.routing is Routing.HASH else "mlp.gate.e_score_correction_bias")
        out.update({f"layers.{n}.{k}": f"model.layers.{n}.{v}" for k, v in table.items()})
    return out


_EXPERT = re.compile(r"^layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.weight$")


def convert_state_dict(official: dict[str, torch.Tensor], cfg: ModelConfig) -> tuple[dict[str, torch.Tensor], HFLoadReport]:
    """Dense official tensors (``load_checkpoint(..., dequantize=...)``) -> transformers state dict.

    Every official tensor is consumed exactly once or listed as ignored (mtp.*);
    anything else raises.
    """
    mapping = name_mapping(cfg)
    out: dict[str, torch.Tensor] = {}
    experts: dict[int, dict[int, dict[str, torch.Tensor]]] = {}
    ignored: list[str] = []
    unknown: list[str] = []
    for name, tensor in official.items():
        if name.startswith("mtp."):
            ignored.append(name)
        elif name in mapping:
            out[mapping[name]] = tensor.long() if name.endswith("tid2eid") else tensor
        elif m := _EXPERT.match(name):
            experts.setdefault(int(m[1]), {}).setdefault(int(m[2]), {})[m[3]] = tensor
        elif name.endswith(".scale") and not name.endswith("hc_head_scale"):
            unknown.append(f"{name} (a quantization scale: load with dequantize=<dtype>)")
        else:
            unknown.append(name)
    if unknown:
        raise KeyError(f"{len(unknown)} official tensors have no transformers name: {unknown[:5]}")
    not_found = sorted(set(mapping) - set(official))
    if not_found:
        raise KeyError(f"{len(not_found)} official tensors missing from the checkpoint: {not_found[:5]}")
    for layer in cfg.main_layers:
        n, E = layer.index, layer.n_routed_experts
        per = experts.pop(n, {})
        if sorted(per) != list(range(E)) or any(sorted(per[e]) != ["w1", "w2", "w3"] for e in per):
            raise KeyError(f"layer {n}: expected w1/w2/w3 for experts 0..{E - 1}")
        out[f"model.layers.{n}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([per[e]["w1"], per[e]["w3"]], dim=0) for e in range(E)])
        out[f"model.layers.{n}.mlp.experts.down_proj"] = torch.stack([per[e]["w2"] for e in range(E)])
    if experts:
        raise KeyError(f"expert weights for layers not in the model: {sorted(experts)}")
    return out, HFLoadReport(filled=len(out), ignored=sorted(ignored), mapping=mapping)


def build_hf_model(
    model_dir: str | Path,
    dtype: torch.dtype = torch.float32,
    *,
    index_tie_break: str | None = None,
    return_report: bool = False,
):
    """transformers' DeepseekV4ForCausalLM holding the checkpoint's (dequantized) weights.

    Built with eager attention and eager experts (the reference loops), in eval
    mode. ``dtype`` is the parameter dtype of the linears / embeddings; the
    modules transformers keeps in fp32 (norms, mHC, sinks, ape, gate bias) stay
    fp32 as in ``from_pretrained``. Asserts that every transformers parameter and
    persistent buffer is filled and nothing unexpected is left over.

    ``index_tie_break``: None keeps transformers' indexer as is (``torch.topk``,
    whose choice among equal scores is unspecified and changes with the number
    of compressed entries). ``"lowest_index"`` makes the CSA indexer pick, among
    equal scores, the lower compressed-entry index (see
    ``use_lowest_index_tie_break``). Tiny random checkpoints produce exact ties
    (score 0 when every indexer head's ReLU is 0), so parity tests need a rule.
    """
    cfg = load_config(model_dir)
    model = new_hf_model(hf_config(model_dir, dtype=dtype), dtype)
    official = load_checkpoint(model_dir, cfg, dequantize=torch.float32, progress=False)
    state, report = convert_state_dict(official, cfg)
    expected = model.state_dict()
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    assert not missing, f"{len(missing)} transformers tensors not filled: {missing[:8]}"
    assert not unexpected, f"{len(unexpected)} converted tensors unknown to transformers: {unexpected[:8]}"
    for name, tensor in state.items():
        want = expected[name].shape
        assert tensor.shape == want, f"{name}: checkpoint gives {tuple(tensor.shape)}, transformers wants {tuple(want)}"
    result = model.load_state_dict(state, strict=True)
    assert not result.missing_keys and not result.unexpected_keys, result
    model.eval()
    if index_tie_break == "lowest_index":
        use_lowest_index_tie_break(model)
    elif index_tie_break is not None:
        raise ValueError(f"index_tie_break must be None or 'lowest_index', got {index_tie_break!r}")
    return (model, report) if return_report else model


def new_hf_model(hf_cfg: Any, dtype: torch.dtype, *, device: str | torch.device = "cpu",
                 experts_implementation: str | None = "eager") -> Any:
    """An unfilled DeepseekV4ForCausalLM on ``device`` with eager attention (V4 ships eager
    only). ``experts_implementation``: "eager" (the reference loop), None (transformers'
    default: grouped_mm where it can dispatch, else eager) or any name transformers knows."""
    from transformers.models.deepseek_v4 import DeepseekV4ForCausalLM

    kwargs = {"attn_implementation": "eager"}
    if experts_implementation is not None:
        kwargs["experts_implementation"] = experts_implementation
    with torch.device(device):
        return DeepseekV4ForCausalLM._from_config(hf_cfg, dtype=dtype, **kwargs)


def hf_model_from_ours(ours: nn.Module, raw: dict[str, Any], dtype: torch.dtype = torch.bfloat16, *,
                       experts_implementation: str | None = None, index_tie_break: str | None = None) -> Any:
    """transformers' DeepseekV4ForCausalLM holding ``ours``' weights, on ``ours``' device, eval mode.

    ``raw`` is the config.json ``ours`` was parsed from (its draft entries, if any, are
    dropped by transformers as by us). ``index_tie_break`` as in ``build_hf_model``."""
    device = next(ours.parameters()).device
    hf_cfg = hf_config_from_dict(raw, dtype=dtype)
    hf_cfg.use_cache = True  # a peer that generates: its own cache, as transformers ships it
    _check_consistent(ours.cfg, hf_cfg)
    model = new_hf_model(hf_cfg, dtype, device=device, experts_implementation=experts_implementation)
    copy_weights_to_hf(ours, model)
    model.eval()
    if index_tie_break == "lowest_index":
        use_lowest_index_tie_break(model)
    elif index_tie_break is not None:
        raise ValueError(f"index_tie_break must be None or 'lowest_index', got {index_tie_break!r}")
    return model


@torch.no_grad()
def copy_weights_to_hf(ours: nn.Module, hf_model: Any) -> int:
    """Copy every main-model weight of ``ours`` into ``hf_model`` (same config); returns the
    number of transformers tensors filled, which is all of them or this raises.

    Native FP8 weights are dequantized in float32 (exact) and cast to the transformers
    tensor's dtype; routed experts go one expert at a time, so the extra memory is one
    expert's weights, whatever the model size."""
    cfg = ours.cfg
    _check_arch(cfg)
    target = hf_model.state_dict()  # shares storage with the model: copy_ fills it
    filled: set[str] = set()

    def put(name: str, tensor: torch.Tensor) -> None:
        dst = target[name]
        if tuple(dst.shape) != tuple(tensor.shape):
            raise ValueError(f"{name}: ours gives {tuple(tensor.shape)}, transformers wants {tuple(dst.shape)}")
        if name in filled:
            raise ValueError(f"{name} filled twice")
        dst.copy_(tensor.to(dst.dtype))
        filled.add(name)

    for official, name in name_mapping(cfg).items():
        put(name, _dense_weight(ours, official))
    for layer in cfg.main_layers:
        n = layer.index
        ffn = ours.layers[n].ffn
        gate_up = target[f"model.layers.{n}.mlp.experts.gate_up_proj"]
        down = target[f"model.layers.{n}.mlp.experts.down_proj"]
        for e in range(layer.n_routed_experts):
            w13, w2 = _expert_weights(ffn, e)
            if gate_up[e].shape != w13.shape or down[e].shape != w2.shape:
                raise ValueError(f"layer {n} expert {e}: ours gives {tuple(w13.shape)} / {tuple(w2.shape)}, "
                                 f"transformers wants {tuple(gate_up[e].shape)} / {tuple(down[e].shape)}")
            gate_up[e].copy_(w13.to(gate_up.dtype))
            down[e].copy_(w2.to(down.dtype))
        filled.update({f"model.layers.{n}.mlp.experts.gate_up_proj", f"model.layers.{n}.mlp.experts.down_proj"})
    missing = sorted(target.keys() - filled)
    if missing:
        raise KeyError(f"{len(missing)} transformers tensors not filled from our model: {missing[:8]}")
    return len(filled)


def _dense_weight(ours: nn.Module, official: str) -> torch.Tensor:
    """Our tensor behind an official (non-expert) name, dense: FP8 linears dequantized (float32)."""
    name = module_name(official)
    owner, _, attr = name.rpartition(".")
    module = ours.get_submodule(owner)
    if isinstance(module, Linear) and module.block is not None and attr == "weight":
        return dequant_fp8_blocks(module.weight, module.scale, module.block, torch.float32)
    return getattr(module, attr)


def _expert_weights(ffn: nn.Module, e: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Routed expert e as transformers stores it: ([w1; w3] [2I, D], w2 [D, I]), dense."""
    if ffn.routed is not None:  # native: stacked E4M3 (or packed E2M1) with block scales
        return ffn.routed.dense(e)
    expert = ffn.experts[e]
    w1, w2, w3 = (_linear_weight(lin) for lin in (expert.w1, expert.w2, expert.w3))
    return torch.cat([w1, w3]), w2


def _linear_weight(lin: Linear) -> torch.Tensor:
    if lin.block is not None:
        return dequant_fp8_blocks(lin.weight, lin.scale, lin.block, torch.float32)
    return lin.weight


@torch.no_grad()
def hf_logits(model: Any, input_ids: torch.Tensor | list[int]) -> torch.Tensor:
    """float32 logits [T, vocab] of one full forward over ``input_ids`` (1-D), no cache."""
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    if ids.dim() != 1:
        raise ValueError(f"input_ids must be 1-D [T], got shape {tuple(ids.shape)}")
    out = model(input_ids=ids[None], use_cache=False)
    return out.logits[0].float()


def _rank_keys(module: Any, args: Any, scores: torch.Tensor) -> torch.Tensor:
    """Replace indexer scores [B, S, T] by tie-free rank keys with the same order.

    Order: higher score first, equal scores by lower entry index. The indexer
    only feeds its scores to ``topk`` (after masking future entries with -inf,
    which keeps the relative order of the visible ones), so selections follow
    this rule and nothing else changes.
    """
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    t = scores.shape[-1]
    keys = torch.arange(t, 0, -1, dtype=torch.float32, device=scores.device).expand_as(scores).contiguous()
    return torch.empty_like(keys).scatter_(-1, order, keys)


def use_lowest_index_tie_break(model: Any) -> int:
    """Hook every CSA indexer scorer so top-k ties go to the lowest entry index; returns how many."""
    count = 0
    for layer in model.model.layers:
        compressor = layer.self_attn.compressor
        indexer = getattr(compressor, "indexer", None)
        if indexer is not None:
            indexer.scorer.register_forward_hook(_rank_keys)
            count += 1
    return count
