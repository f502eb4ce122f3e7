"""One typed model config for the three DeepSeek-V4 release formats of config.json.

Formats (model_spec.md section 1):
- V4-Flash: flat, model_type ``deepseek_v4``, one MTP layer (``compress_ratios``
  has one trailing entry), 128x128 FP8 blocks, ``expert_dtype`` at the root.
- V4-Flash-0731: the same flat format plus ``dspark_*`` keys; three DSpark stages
  (three trailing ratio entries) although ``num_nextn_predict_layers`` says 1.
- V4.1-Flash: nested ``text_config`` (model_type ``deepseek_v41``), CSA2 layer
  lists, Engram and DSpark keys, 32x32 FP8 blocks, ``expert_dtype`` inside
  ``quantization_config``.

``parse_config`` reads any of them into :class:`ModelConfig`; ``to_release_dict``
writes the release's own format back (parse -> write gives the input dict).
Every size comes from the file: nothing here assumes the released widths.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from deepinfer_adapters.errors import ConfigError

ARCH_V4 = "v4"
ARCH_V4_0731 = "v4-0731"
ARCH_V41 = "v41"
ARCHES = (ARCH_V4, ARCH_V4_0731, ARCH_V41)
# how a native model holds its weights (model_impl/native_format.py); engines add "auto"
WEIGHT_FORMATS = ("dense", "fp8", "fp4")


class AttnRole(str, Enum):
    """What a layer's attention does (V4 roles, then V4.1 CSA2 roles)."""

    WINDOW = "window"  # sliding window only (ratio 0), both releases
    CSA = "csa"  # V4 ratio 4: overlapping compressor + indexer top-k
    HCA = "hca"  # V4 ratio 128: compressor, attends to every compressed row
    KV_INDEX_SOURCE = "kv_index_source"  # V4.1: compressor + index keys + indexer
    CANDIDATE_SOURCE = "candidate_source"  # V4.1: a KV source that also builds the pool
    REINDEX = "reindex"  # V4.1: own indexer query over the latest source's keys, in the pool
    REUSE = "reuse"  # V4.1: latest selections over the latest source's compressed rows


class Routing(str, Enum):
    HASH = "hash"  # V4 first layers: experts from tid2eid[token]
    SCORE = "score"  # top-k of sqrtsoftplus scores + selection bias


@dataclass(frozen=True)
class LayerSpec:
    """Everything a block needs to know about its role, derived from config.json."""

    index: int
    compress_ratio: int
    attn: AttnRole
    routing: Routing
    n_routed_experts: int
    num_experts_per_tok: int
    # V4.1 CSA2 wiring: which layer's compressed cache / index keys / selections
    # this layer reads (itself when it is the source); None when it reads none.
    kv_source: int | None = None
    index_source: int | None = None
    uses_candidate_pool: bool = False
    engram: bool = False
    is_draft: bool = False

    @property
    def is_kv_source(self) -> bool:
        return self.kv_source == self.index and self.attn in (
            AttnRole.KV_INDEX_SOURCE,
            AttnRole.CANDIDATE_SOURCE,
        )

    @property
    def has_indexer_query(self) -> bool:
        return self.attn in (
            AttnRole.CSA,
            AttnRole.KV_INDEX_SOURCE,
            AttnRole.CANDIDATE_SOURCE,
            AttnRole.REINDEX,
        )


@dataclass(frozen=True)
class QuantConfig:
    fp8_block: tuple[int, int]
    expert_dtype: str  # "fp4" (E2M1 + E8M0 per 32) or "fp8"
    quant_method: str = "fp8"
    activation_scheme: str = "dynamic"
    scale_fmt: str = "ue8m0"
    fmt: str | None = "e4m3"  # V4 has it, V4.1 does not


@dataclass(frozen=True)
class RopeConfig:
    theta: float
    compress_theta: float
    factor: float
    original_max_position_embeddings: int
    beta_fast: float
    beta_slow: float
    type_key: str = "type"  # V4 writes "type", V4.1 writes "rope_type"


@dataclass(frozen=True)
class EngramConfig:
    layer_ids: tuple[int, ...]
    num_embeddings: tuple[int, ...]
    max_ngram_size: int
    vocab_size: int
    n_heads: int
    head_dim: int
    pad_token_id: int
    compressed_vocab_size: int

    @property
    def n_hash_columns(self) -> int:
        """One table row per (n-gram order 2..max, hash head)."""
        return (self.max_ngram_size - 1) * self.n_heads


@dataclass(frozen=True)
class DraftConfig:
    """The speculative head: V4-Flash's MTP layer or DSpark stages (0731, V4.1)."""

    kind: str  # "mtp" or "dspark"
    num_stages: int
    block_size: int = 1
    noise_token_id: int | None = None
    target_layer_ids: tuple[int, ...] = ()
    markov_rank: int = 0
    n_routed_experts: int = 0
    num_experts_per_tok: int = 0


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    qk_rope_head_dim: int
    q_lora_rank: int
    o_lora_rank: int
    o_groups: int
    sliding_window: int
    moe_intermediate_size: int
    n_routed_experts: int
    n_shared_experts: int
    num_experts_per_tok: int
    scoring_func: str
    topk_method: str
    norm_topk_prob: bool
    routed_scaling_factor: float
    swiglu_limit: float
    hidden_act: str
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    hc_mult: int
    hc_sinkhorn_iters: int
    hc_eps: float
    rms_norm_eps: float
    max_position_embeddings: int
    num_nextn_predict_layers: int
    compress_ratios: tuple[int, ...]
    bos_token_id: int
    eos_token_id: int
    pad_token_id: int
    rope: RopeConfig
    quant: QuantConfig
    layers: tuple[LayerSpec, ...]
    draft: DraftConfig | None
    num_hash_layers: int = 0
    engram: EngramConfig | None = None
    candidate_source_layer_id: int | None = None
    candidate_topk_blocks: int = 0
    candidate_block_size: int = 0
    kv_source_layer_ids: tuple[int, ...] = ()
    index_source_layer_ids: tuple[int, ...] = ()
    image_token_id: int | None = None
    gate_temp: float = 1.0
    tie_word_embeddings: bool = False
    # Release keys with no effect on the math (dtype, attention_bias, ...) and
    # unknown keys, kept verbatim so writing the config back loses nothing.
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    text_extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def is_v41(self) -> bool:
        return self.arch == ARCH_V41

    @property
    def hc_mix_dim(self) -> int:
        return (2 + self.hc_mult) * self.hc_mult

    @property
    def draft_layers(self) -> tuple[LayerSpec, ...]:
        return self.layers[self.num_hidden_layers :]

    @property
    def main_layers(self) -> tuple[LayerSpec, ...]:
        return self.layers[: self.num_hidden_layers]

    def to_release_dict(self) -> dict[str, Any]:
        from deepinfer_adapters.config_writer import release_dict

        return release_dict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_release_dict(), indent=2) + "\n")


def load_config(model_dir: str | Path) -> ModelConfig:
    """Parse ``model_dir/config.json`` (or a path to the file itself)."""
    path = Path(model_dir)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"config.json not found at {path}")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    return parse_config(raw)


def parse_config(raw: dict[str, Any]) -> ModelConfig:
    from deepinfer_adapters.config_parser import parse_release_dict

    return parse_release_dict(raw)
