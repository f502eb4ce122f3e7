"""Release configs (model_spec.md section 1, as published) and the tiny presets.

The tiny presets keep every structural feature of their release (layer roles,
the 128-token window, ratio-128 blocks, the real vocabulary and tokenizer, the
quantization formats) and shrink only the widths, so tests on the CPU cross the
same code paths as the real models.
"""

from __future__ import annotations

import copy
from typing import Any

from deepinfer_adapters.config import ARCH_V4, ARCH_V4_0731, ARCH_V41, ARCHES, parse_config
from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.primes import next_prime

_V4_FLASH: dict[str, Any] = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "vocab_size": 129280,
    "hidden_size": 4096,
    "num_hidden_layers": 43,
    "num_attention_heads": 64,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "q_lora_rank": 1024,
    "o_lora_rank": 1024,
    "o_groups": 8,
    "sliding_window": 128,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 6,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.5,
    "num_hash_layers": 3,
    "swiglu_limit": 10.0,
    "hidden_act": "silu",
    "index_n_heads": 64,
    "index_head_dim": 128,
    "index_topk": 512,
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-6,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000,
    "compress_rope_theta": 160000,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    "max_position_embeddings": 1048576,
    "expert_dtype": "fp4",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
    "num_nextn_predict_layers": 1,
    "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0],
    "bos_token_id": 0,
    "eos_token_id": 1,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "torch_dtype": "bfloat16",
    "use_cache": True,
}

_V4_0731_DSPARK = {
    "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0, 0, 0],
    "dspark_block_size": 5,
    "dspark_noise_token_id": 128799,
    "dspark_target_layer_ids": [40, 41, 42],
    "dspark_markov_rank": 256,
}

_V41_TEXT: dict[str, Any] = {
    "model_type": "deepseek_v41_text",
    "vocab_size": 129280,
    "hidden_size": 5120,
    "num_hidden_layers": 40,
    "num_attention_heads": 64,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "q_lora_rank": 1280,
    "o_lora_rank": 1024,
    "o_groups": 8,
    "sliding_window": 128,
    "moe_intermediate_size": 2304,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_experts_per_tok": 6,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.5,
    "swiglu_limit": 10.0,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-20,
    "rope_theta": 10000,
    "compress_rope_theta": 160000,
    "rope_scaling": {"rope_type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    "max_position_embeddings": 1048576,
    "compress_ratios": [0, 0] + [2] * 18 + [1] * 20 + [0, 0, 0],
    "kv_source_layer_ids": [2, 8, 14, 20],
    "index_source_layer_ids": [2, 8, 14, 20, 24, 28, 32, 36],
    "index_n_heads": 32,
    "index_head_dim": 128,
    "index_topk": 512,
    "candidate_source_layer_id": 20,
    "candidate_topk_blocks": 2048,
    "candidate_block_size": 8,
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-6,
    "engram_layer_ids": [1, 14],
    "engram_num_embeddings": [384006168, 384016682],
    "engram_max_ngram_size": 4,
    "engram_vocab_size": 16000000,
    "engram_n_heads": 8,
    "engram_head_dim": 256,
    "engram_pad_token_id": 2,
    "engram_compressed_vocab_size": 99092,
    "num_nextn_predict_layers": 3,
    "dspark_block_size": 5,
    "dspark_noise_token_id": 128799,
    "dspark_target_layer_ids": [37, 38, 39],
    "dspark_markov_rank": 256,
    "dspark_n_routed_experts": 128,
    "dspark_num_experts_per_tok": 3,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "use_cache": True,
}

_V41_FLASH: dict[str, Any] = {
    "architectures": ["DeepseekV41ForCausalLM"],
    "model_type": "deepseek_v41",
    "bos_token_id": 0,
    "eos_token_id": 1,
    "pad_token_id": 2,
    "image_token_id": 129264,
    "dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "scale_fmt": "ue8m0",
                            "weight_block_size": [32, 32], "expert_dtype": "fp4"},
    "text_config": _V41_TEXT,
    "vision_config": {"num_hidden_layers": 32, "hidden_size": 1024, "num_attention_heads": 16,
                      "intermediate_size": 2816, "patch_size": 14, "downsample_ratio": 3,
                      "max_image_tokens": 1024, "min_pixels": 295936, "max_wh_ratio": None, "rope_theta": 10000},
}


def release_config(arch: str) -> dict[str, Any]:
    """The published config.json of a release, as a fresh dict."""
    _check_arch(arch)
    if arch == ARCH_V4:
        return copy.deepcopy(_V4_FLASH)
    if arch == ARCH_V4_0731:
        return {**copy.deepcopy(_V4_FLASH), **copy.deepcopy(_V4_0731_DSPARK)}
    return copy.deepcopy(_V41_FLASH)


# Widths of the tiny presets. Every activation width is a multiple of the FP8
# block (32 for V4.1, 128 for V4) because the reference quantizes activations
# per block and requires whole blocks.
_TINY_WIDTHS = {
    "hidden_size": 128,
    "num_attention_heads": 4,
    "head_dim": 64,
    "qk_rope_head_dim": 16,
    "o_groups": 2,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    # 16 index heads: an index score is exactly 0 only when every head's ReLU is 0,
    # which with 4 random heads happens for ~6% of entries and makes top-k ties.
    "index_n_heads": 16,
    "index_head_dim": 32,
    "index_topk": 16,
}
_TINY_V41 = {"q_lora_rank": 96, "o_lora_rank": 32, "moe_intermediate_size": 64}
_TINY_V4 = {"q_lora_rank": 128, "o_lora_rank": 64, "moe_intermediate_size": 128}


def tiny_config(arch: str, **overrides: Any) -> dict[str, Any]:
    """A release-format config with small widths and every layer role present.

    ``overrides`` replace fields of the tiny preset after its own choices: the text config's
    for V4.1, the root's for V4 (e.g. ``num_attention_heads=64, head_dim=512`` for the
    release's attention geometry; a shorter layer layout as its consistent set of lists).
    Only existing fields can be overridden. V4.1's ``engram_num_embeddings`` is derived from
    the (overridden) Engram fields unless it is overridden itself. The result is parsed, so
    an inconsistent set fails here with the parser's ConfigError.
    """
    _check_arch(arch)
    cfg = release_config(arch)
    fields = cfg["text_config"] if arch == ARCH_V41 else cfg
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ConfigError(f"tiny_config({arch!r}) has no field(s) {unknown} to override", unknown[0])
    if arch == ARCH_V41:
        text = cfg["text_config"]
        text.update(_TINY_WIDTHS, **_TINY_V41)
        # Layers: 0,1 window | 2-5 ratio 2 (sources 2, 4; reuse 3, 5) |
        # 6-9 ratio 1 (candidate source 6, reuse 7, 9, reindex 8) | 3 DSpark stages.
        text.update(
            num_hidden_layers=10,
            compress_ratios=[0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0],
            kv_source_layer_ids=[2, 4, 6],
            index_source_layer_ids=[2, 4, 6, 8],
            candidate_source_layer_id=6,
            candidate_topk_blocks=8,  # a pool of 32 rows > index_topk: picks never fall outside it
            candidate_block_size=4,
            engram_layer_ids=[1, 4],
            engram_vocab_size=1000,
            engram_n_heads=2,
            engram_head_dim=32,
            dspark_target_layer_ids=[7, 8, 9],
            dspark_markov_rank=16,
            dspark_n_routed_experts=4,
            dspark_num_experts_per_tok=2,
        )
        text.update(copy.deepcopy(overrides))
        if "engram_num_embeddings" not in overrides:
            text["engram_num_embeddings"] = engram_table_rows(
                len(text["engram_layer_ids"]), text["engram_vocab_size"],
                (text["engram_max_ngram_size"] - 1) * text["engram_n_heads"])
        cfg["vision_config"].update(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                    intermediate_size=64)
        return _parsed(cfg, overrides)
    cfg.update(_TINY_WIDTHS, **_TINY_V4)
    # 0,1 window | 2,4 CSA (ratio 4) | 3,5 HCA (ratio 128) | hash MoE on 0-2.
    ratios = [0, 0, 4, 128, 4, 128]
    cfg.update(num_hidden_layers=len(ratios), num_hash_layers=3)
    if arch == ARCH_V4:
        cfg["compress_ratios"] = ratios + [0]
    else:
        cfg.update(compress_ratios=ratios + [0, 0, 0], dspark_target_layer_ids=[3, 4, 5], dspark_markov_rank=16)
    cfg.update(copy.deepcopy(overrides))
    return _parsed(cfg, overrides)


def _parsed(cfg: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``cfg``, after checking that it parses when ``overrides`` changed the preset."""
    if overrides:
        parse_config(cfg)
    return cfg


def engram_table_rows(n_layers: int, vocab_size: int, columns_per_layer: int) -> list[int]:
    """Rows of each Engram table: the sum of its primes.

    Each layer draws ``columns_per_layer`` consecutive primes above
    ``vocab_size - 1``, continuing where the previous layer stopped. This
    reproduces the release's [384006168, 384016682] for vocab 16,000,000 and
    3 x 8 columns (checked in tests).
    """
    rows, p = [], vocab_size - 1
    for _ in range(n_layers):
        total = 0
        for _ in range(columns_per_layer):
            p = next_prime(p)
            total += p
        rows.append(total)
    return rows


def _check_arch(arch: str) -> None:
    if arch not in ARCHES:
        raise ConfigError(f"unknown architecture preset {arch!r}; valid: {list(ARCHES)}", "arch")
