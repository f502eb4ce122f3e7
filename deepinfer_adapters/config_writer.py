"""Write a ModelConfig back in its release's own config.json format."""

from __future__ import annotations

from typing import Any

from deepinfer_adapters.config import ARCH_V41, ModelConfig


def _backbone(c: ModelConfig) -> dict[str, Any]:
    return {
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "qk_rope_head_dim": c.qk_rope_head_dim,
        "q_lora_rank": c.q_lora_rank,
        "o_lora_rank": c.o_lora_rank,
        "o_groups": c.o_groups,
        "sliding_window": c.sliding_window,
        "moe_intermediate_size": c.moe_intermediate_size,
        "n_routed_experts": c.n_routed_experts,
        "n_shared_experts": c.n_shared_experts,
        "num_experts_per_tok": c.num_experts_per_tok,
        "scoring_func": c.scoring_func,
        "topk_method": c.topk_method,
        "norm_topk_prob": c.norm_topk_prob,
        "routed_scaling_factor": c.routed_scaling_factor,
        "swiglu_limit": c.swiglu_limit,
        "hidden_act": c.hidden_act,
        "index_n_heads": c.index_n_heads,
        "index_head_dim": c.index_head_dim,
        "index_topk": c.index_topk,
        "hc_mult": c.hc_mult,
        "hc_sinkhorn_iters": c.hc_sinkhorn_iters,
        "hc_eps": c.hc_eps,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": _num(c.rope.theta),
        "compress_rope_theta": _num(c.rope.compress_theta),
        "rope_scaling": {
            c.rope.type_key: "yarn",
            "factor": _num(c.rope.factor),
            "original_max_position_embeddings": c.rope.original_max_position_embeddings,
            "beta_fast": _num(c.rope.beta_fast),
            "beta_slow": _num(c.rope.beta_slow),
        },
        "max_position_embeddings": c.max_position_embeddings,
        "num_nextn_predict_layers": c.num_nextn_predict_layers,
        "compress_ratios": list(c.compress_ratios),
        "tie_word_embeddings": c.tie_word_embeddings,
    }


def _num(x: float) -> int | float:
    """Release files write integral values (rope_theta 10000, factor 16) as ints."""
    return int(x) if float(x).is_integer() else x


def _quant(c: ModelConfig, with_expert_dtype: bool) -> dict[str, Any]:
    q: dict[str, Any] = {
        "quant_method": c.quant.quant_method,
        "activation_scheme": c.quant.activation_scheme,
        "scale_fmt": c.quant.scale_fmt,
        "weight_block_size": list(c.quant.fp8_block),
    }
    if c.quant.fmt is not None:
        q["fmt"] = c.quant.fmt
    if with_expert_dtype:
        q["expert_dtype"] = c.quant.expert_dtype
    return q


def _dspark(c: ModelConfig, v41: bool) -> dict[str, Any]:
    d = c.draft
    if d is None or d.kind != "dspark":
        return {}
    out: dict[str, Any] = {
        "dspark_block_size": d.block_size,
        "dspark_noise_token_id": d.noise_token_id,
        "dspark_target_layer_ids": list(d.target_layer_ids),
        "dspark_markov_rank": d.markov_rank,
    }
    if v41:
        out["dspark_n_routed_experts"] = d.n_routed_experts
        out["dspark_num_experts_per_tok"] = d.num_experts_per_tok
    return out


def release_dict(c: ModelConfig) -> dict[str, Any]:
    if c.arch == ARCH_V41:
        return _v41(c)
    out: dict[str, Any] = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        **_backbone(c),
        "num_hash_layers": c.num_hash_layers,
        "expert_dtype": c.quant.expert_dtype,
        "quantization_config": _quant(c, with_expert_dtype=False),
        "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id,
        **_dspark(c, v41=False),
    }
    if c.pad_token_id != c.eos_token_id:
        out["pad_token_id"] = c.pad_token_id
    out.update(c.extra)
    return out


def _v41(c: ModelConfig) -> dict[str, Any]:
    text: dict[str, Any] = {
        **_backbone(c),
        "kv_source_layer_ids": list(c.kv_source_layer_ids),
        "index_source_layer_ids": list(c.index_source_layer_ids),
        "candidate_source_layer_id": c.candidate_source_layer_id,
        "candidate_topk_blocks": c.candidate_topk_blocks,
        "candidate_block_size": c.candidate_block_size,
        **_dspark(c, v41=True),
    }
    if c.engram is not None:
        e = c.engram
        text.update(
            engram_layer_ids=list(e.layer_ids),
            engram_num_embeddings=list(e.num_embeddings),
            engram_max_ngram_size=e.max_ngram_size,
            engram_vocab_size=e.vocab_size,
            engram_n_heads=e.n_heads,
            engram_head_dim=e.head_dim,
            engram_pad_token_id=e.pad_token_id,
            engram_compressed_vocab_size=e.compressed_vocab_size,
        )
    if c.gate_temp != 1.0:
        text["gate_temp"] = c.gate_temp
    text.update(c.text_extra)
    out: dict[str, Any] = {
        "architectures": ["DeepseekV41ForCausalLM"],
        "model_type": "deepseek_v41",
        "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id,
        "pad_token_id": c.pad_token_id,
    }
    if c.image_token_id is not None:
        out["image_token_id"] = c.image_token_id
    out["quantization_config"] = _quant(c, with_expert_dtype=True)
    out["text_config"] = text
    out.update(c.extra)
    return out
