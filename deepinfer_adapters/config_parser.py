"""Parse a release config.json dict into ModelConfig, validating every field.

Each error names the field by its path in the file (``text_config.hidden_size``)
and says what would be valid.
"""

from __future__ import annotations

from typing import Any

from deepinfer_adapters.config import (
    ARCH_V4,
    ARCH_V4_0731,
    ARCH_V41,
    AttnRole,
    DraftConfig,
    EngramConfig,
    LayerSpec,
    ModelConfig,
    QuantConfig,
    RopeConfig,
    Routing,
)
from deepinfer_adapters.errors import ConfigError

_MISSING = object()

V4_RATIOS = (0, 4, 128)
V41_RATIOS = (0, 1, 2)
MODEL_TYPES = {"deepseek_v4": "V4-Flash", "deepseek_v41": "V4.1-Flash"}


class _Fields:
    """Typed access to one JSON object, remembering which keys were read."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{path or 'config.json'} must be a JSON object, got {type(data).__name__}", path)
        self.data = data
        self.path = path
        self.used: set[str] = set()

    def name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, default: Any = _MISSING) -> Any:
        self.used.add(key)
        if key not in self.data:
            if default is _MISSING:
                raise ConfigError(f"missing required field '{self.name(key)}'", self.name(key))
            return default
        return self.data[key]

    def int(self, key: str, *, lo: int | None = None, default: Any = _MISSING) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"field '{self.name(key)}' must be an integer, got {value!r}", self.name(key))
        if lo is not None and value < lo:
            raise ConfigError(f"field '{self.name(key)}' must be >= {lo}, got {value}", self.name(key))
        return value

    def float(self, key: str, *, positive: bool = False, default: Any = _MISSING) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"field '{self.name(key)}' must be a number, got {value!r}", self.name(key))
        if positive and not value > 0:
            raise ConfigError(f"field '{self.name(key)}' must be > 0, got {value}", self.name(key))
        return float(value)

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"field '{self.name(key)}' must be true or false, got {value!r}", self.name(key))
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: Any = _MISSING) -> str:
        value = self.get(key, default)
        if value not in choices:
            raise ConfigError(
                f"field '{self.name(key)}' must be one of {list(choices)}, got {value!r}", self.name(key)
            )
        return value

    def int_list(self, key: str, *, default: Any = _MISSING, lo: int = 0) -> tuple[int, ...]:
        value = self.get(key, default)
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise ConfigError(f"field '{self.name(key)}' must be a list of integers, got {value!r}", self.name(key))
        if any(v < lo for v in value):
            raise ConfigError(f"field '{self.name(key)}' entries must be >= {lo}, got {value}", self.name(key))
        return tuple(value)

    def unread(self) -> dict[str, Any]:
        """Keys the parser did not consume (dtype, use_cache, ...): kept for the round trip."""
        return {k: v for k, v in self.data.items() if k not in self.used}


def parse_release_dict(raw: dict[str, Any]) -> ModelConfig:
    root = _Fields(raw, "")
    model_type = root.get("model_type")
    if model_type == "deepseek_v4":
        return _parse_v4(root)
    if model_type == "deepseek_v41":
        return _parse_v41(root)
    raise ConfigError(
        f"field 'model_type' must be one of {sorted(MODEL_TYPES)} (DeepSeek V4-Flash / V4.1-Flash), "
        f"got {model_type!r}",
        "model_type",
    )


def _architectures(f: _Fields, expected: str) -> None:
    archs = f.get("architectures")
    if archs != [expected]:
        raise ConfigError(f"field '{f.name('architectures')}' must be [\"{expected}\"], got {archs!r}", "architectures")


def _common(f: _Fields) -> dict[str, Any]:
    """The backbone fields both formats share, read from the object that holds them."""
    out = dict(
        vocab_size=f.int("vocab_size", lo=1),
        hidden_size=f.int("hidden_size", lo=1),
        num_hidden_layers=f.int("num_hidden_layers", lo=1),
        num_attention_heads=f.int("num_attention_heads", lo=1),
        num_key_value_heads=f.int("num_key_value_heads", lo=1),
        head_dim=f.int("head_dim", lo=2),
        qk_rope_head_dim=f.int("qk_rope_head_dim", lo=2),
        q_lora_rank=f.int("q_lora_rank", lo=1),
        o_lora_rank=f.int("o_lora_rank", lo=1),
        o_groups=f.int("o_groups", lo=1),
        sliding_window=f.int("sliding_window", lo=1),
        moe_intermediate_size=f.int("moe_intermediate_size", lo=1),
        n_routed_experts=f.int("n_routed_experts", lo=1),
        n_shared_experts=f.int("n_shared_experts", lo=0),
        num_experts_per_tok=f.int("num_experts_per_tok", lo=1),
        scoring_func=f.choice("scoring_func", ("sqrtsoftplus",)),
        topk_method=f.choice("topk_method", ("noaux_tc",)),
        norm_topk_prob=f.bool("norm_topk_prob"),
        routed_scaling_factor=f.float("routed_scaling_factor", positive=True),
        swiglu_limit=f.float("swiglu_limit", positive=True),
        hidden_act=f.choice("hidden_act", ("silu",)),
        index_n_heads=f.int("index_n_heads", lo=1),
        index_head_dim=f.int("index_head_dim", lo=2),
        index_topk=f.int("index_topk", lo=1),
        hc_mult=f.int("hc_mult", lo=1),
        hc_sinkhorn_iters=f.int("hc_sinkhorn_iters", lo=1),
        hc_eps=f.float("hc_eps", positive=True),
        rms_norm_eps=f.float("rms_norm_eps", positive=True),
        max_position_embeddings=f.int("max_position_embeddings", lo=1),
        num_nextn_predict_layers=f.int("num_nextn_predict_layers", lo=0),
        compress_ratios=f.int_list("compress_ratios"),
        tie_word_embeddings=f.bool("tie_word_embeddings", default=False),
        rope=_rope(f),
    )
    _check_shapes(f, out)
    return out


def _check_shapes(f: _Fields, c: dict[str, Any]) -> None:
    def bad(key: str, why: str) -> ConfigError:
        return ConfigError(f"field '{f.name(key)}' {why}", f.name(key))

    if c["num_key_value_heads"] != 1:
        raise bad("num_key_value_heads", f"must be 1 (single-head latent KV), got {c['num_key_value_heads']}")
    if c["qk_rope_head_dim"] > c["head_dim"] or c["qk_rope_head_dim"] % 2:
        raise bad("qk_rope_head_dim", f"must be even and <= head_dim {c['head_dim']}, got {c['qk_rope_head_dim']}")
    if c["qk_rope_head_dim"] > c["index_head_dim"]:
        raise bad("index_head_dim", f"must be >= qk_rope_head_dim {c['qk_rope_head_dim']}, got {c['index_head_dim']}")
    if c["num_attention_heads"] % c["o_groups"]:
        raise bad("o_groups", f"must divide num_attention_heads {c['num_attention_heads']}, got {c['o_groups']}")
    if c["num_experts_per_tok"] > c["n_routed_experts"]:
        raise bad("num_experts_per_tok", f"must be <= n_routed_experts {c['n_routed_experts']}")
    if c["n_shared_experts"] > 1:
        raise bad("n_shared_experts", f"must be 0 or 1, got {c['n_shared_experts']}")


def _rope(f: _Fields) -> RopeConfig:
    rs = _Fields(f.get("rope_scaling"), f.name("rope_scaling"))
    type_key = "rope_type" if "rope_type" in rs.data else "type"
    rs.choice(type_key, ("yarn",))
    return RopeConfig(
        theta=f.float("rope_theta", positive=True),
        compress_theta=f.float("compress_rope_theta", positive=True),
        factor=rs.float("factor", positive=True),
        original_max_position_embeddings=rs.int("original_max_position_embeddings", lo=1),
        beta_fast=rs.float("beta_fast", positive=True),
        beta_slow=rs.float("beta_slow", positive=True),
        type_key=type_key,
    )


def _quant(q: _Fields, expert_dtype: str) -> QuantConfig:
    q.choice("quant_method", ("fp8",))
    block = q.int_list("weight_block_size", lo=1)
    if len(block) != 2:
        raise ConfigError(f"field '{q.name('weight_block_size')}' must be [rows, cols], got {list(block)}", q.name("weight_block_size"))
    fmt = q.choice("fmt", ("e4m3",)) if "fmt" in q.data else None
    return QuantConfig(
        fp8_block=(block[0], block[1]),
        expert_dtype=expert_dtype,
        activation_scheme=q.choice("activation_scheme", ("dynamic",)),
        scale_fmt=q.choice("scale_fmt", ("ue8m0",)),
        fmt=fmt,
    )


def _check_ratios(f: _Fields, ratios: tuple[int, ...], allowed: tuple[int, ...], n_layers: int) -> None:
    name = f.name("compress_ratios")
    bad = [r for r in ratios if r not in allowed]
    if bad:
        raise ConfigError(f"field '{name}' entries must be in {list(allowed)}, got {sorted(set(bad))}", name)
    if len(ratios) <= n_layers:
        raise ConfigError(
            f"field '{name}' must have num_hidden_layers ({n_layers}) entries plus one per draft layer, "
            f"got {len(ratios)}",
            name,
        )


def _dspark(f: _Fields, n_layers: int, n_stages: int, experts: int, topk: int) -> DraftConfig:
    targets = f.int_list("dspark_target_layer_ids")
    if not targets or any(t >= n_layers for t in targets):
        raise ConfigError(
            f"field '{f.name('dspark_target_layer_ids')}' must list main layers < {n_layers}, got {list(targets)}",
            f.name("dspark_target_layer_ids"),
        )
    return DraftConfig(
        kind="dspark",
        num_stages=n_stages,
        block_size=f.int("dspark_block_size", lo=1),
        noise_token_id=f.int("dspark_noise_token_id", lo=0),
        target_layer_ids=targets,
        markov_rank=f.int("dspark_markov_rank", lo=1),
        n_routed_experts=experts,
        num_experts_per_tok=topk,
    )


def _parse_v4(f: _Fields) -> ModelConfig:
    _architectures(f, "DeepseekV4ForCausalLM")
    c = _common(f)
    n = c["num_hidden_layers"]
    ratios = c["compress_ratios"]
    _check_ratios(f, ratios, V4_RATIOS, n)
    num_hash = f.int("num_hash_layers", lo=0)
    if num_hash > n:
        raise ConfigError(f"field 'num_hash_layers' must be <= num_hidden_layers {n}, got {num_hash}", "num_hash_layers")
    n_draft = len(ratios) - n
    is_0731 = "dspark_block_size" in f.data
    if is_0731:
        draft = _dspark(f, n, n_draft, c["n_routed_experts"], c["num_experts_per_tok"])
    else:
        if n_draft != c["num_nextn_predict_layers"]:
            raise ConfigError(
                f"field 'compress_ratios' has {n_draft} entries past num_hidden_layers but "
                f"num_nextn_predict_layers is {c['num_nextn_predict_layers']}; they must agree",
                "compress_ratios",
            )
        draft = DraftConfig(kind="mtp", num_stages=n_draft) if n_draft else None
    if any(ratios[i] != 0 for i in range(n, len(ratios))):
        raise ConfigError("field 'compress_ratios': draft-layer entries must be 0 (window-only)", "compress_ratios")
    layers = []
    for i, r in enumerate(ratios):
        role = {0: AttnRole.WINDOW, 4: AttnRole.CSA, 128: AttnRole.HCA}[r]
        draft_layer = i >= n
        routing = Routing.HASH if (i < num_hash and not draft_layer) else Routing.SCORE
        layers.append(
            LayerSpec(
                index=i, compress_ratio=r, attn=role, routing=routing,
                n_routed_experts=c["n_routed_experts"], num_experts_per_tok=c["num_experts_per_tok"],
                kv_source=i if r else None, index_source=i if r == 4 else None, is_draft=draft_layer,
            )
        )
    quant = _quant(_Fields(f.get("quantization_config"), "quantization_config"),
                   f.choice("expert_dtype", ("fp4", "fp8")))
    return ModelConfig(
        arch=ARCH_V4_0731 if is_0731 else ARCH_V4,
        **c,
        bos_token_id=f.int("bos_token_id", lo=0),
        eos_token_id=f.int("eos_token_id", lo=0),
        # V4's tokenizer_config pads with EOS; the config has no pad_token_id.
        pad_token_id=f.int("pad_token_id", lo=0, default=f.data.get("eos_token_id", 1)),
        quant=quant,
        layers=tuple(layers),
        draft=draft,
        num_hash_layers=num_hash,
        extra=f.unread(),
    )


def _parse_v41(root: _Fields) -> ModelConfig:
    _architectures(root, "DeepseekV41ForCausalLM")
    f = _Fields(root.get("text_config"), "text_config")
    c = _common(f)
    n = c["num_hidden_layers"]
    ratios = c["compress_ratios"]
    _check_ratios(f, ratios, V41_RATIOS, n)
    n_draft = len(ratios) - n
    if n_draft != c["num_nextn_predict_layers"]:
        raise ConfigError(
            f"field 'text_config.compress_ratios' has {n_draft} draft entries but "
            f"text_config.num_nextn_predict_layers is {c['num_nextn_predict_layers']}; they must agree",
            "text_config.compress_ratios",
        )
    kv_sources = f.int_list("kv_source_layer_ids")
    index_sources = f.int_list("index_source_layer_ids")
    candidate = f.int("candidate_source_layer_id", lo=0)
    _check_v41_lists(f, ratios[:n], kv_sources, index_sources, candidate)
    engram = _engram(f, n)
    layers = [
        _v41_layer(i, ratios[i], kv_sources, index_sources, candidate, engram, c) for i in range(n)
    ]
    if any(ratios[i] != 0 for i in range(n, len(ratios))):
        raise ConfigError("field 'text_config.compress_ratios': DSpark entries must be 0", "text_config.compress_ratios")
    d_experts = f.int("dspark_n_routed_experts", lo=1, default=c["n_routed_experts"])
    d_topk = f.int("dspark_num_experts_per_tok", lo=1, default=c["num_experts_per_tok"])
    if d_topk > d_experts:
        raise ConfigError("field 'text_config.dspark_num_experts_per_tok' must be <= dspark_n_routed_experts",
                          "text_config.dspark_num_experts_per_tok")
    draft = _dspark(f, n, n_draft, d_experts, d_topk) if n_draft else None
    for i in range(n, len(ratios)):
        layers.append(LayerSpec(index=i, compress_ratio=0, attn=AttnRole.WINDOW, routing=Routing.SCORE,
                                n_routed_experts=d_experts, num_experts_per_tok=d_topk, is_draft=True))
    q = _Fields(root.get("quantization_config"), "quantization_config")
    quant = _quant(q, q.choice("expert_dtype", ("fp4", "fp8")))
    return ModelConfig(
        arch=ARCH_V41,
        **c,
        bos_token_id=root.int("bos_token_id", lo=0),
        eos_token_id=root.int("eos_token_id", lo=0),
        pad_token_id=root.int("pad_token_id", lo=0),
        image_token_id=root.int("image_token_id", lo=0, default=None) if "image_token_id" in root.data else None,
        quant=quant,
        layers=tuple(layers),
        draft=draft,
        engram=engram,
        candidate_source_layer_id=candidate,
        candidate_topk_blocks=f.int("candidate_topk_blocks", lo=1),
        candidate_block_size=f.int("candidate_block_size", lo=1),
        kv_source_layer_ids=kv_sources,
        index_source_layer_ids=index_sources,
        gate_temp=f.float("gate_temp", positive=True, default=1.0),
        extra=root.unread(),
        text_extra=f.unread(),
    )


def _check_v41_lists(f: _Fields, ratios: tuple[int, ...], kv: tuple[int, ...], idx: tuple[int, ...], cand: int) -> None:
    n = len(ratios)
    for key, ids in (("kv_source_layer_ids", kv), ("index_source_layer_ids", idx)):
        name = f.name(key)
        if not ids or list(ids) != sorted(set(ids)) or ids[-1] >= n:
            raise ConfigError(f"field '{name}' must be a non-empty ascending list of layer ids < {n}, got {list(ids)}", name)
        if any(ratios[i] == 0 for i in ids):
            raise ConfigError(f"field '{name}' lists window-only layers (compress ratio 0): "
                              f"{[i for i in ids if ratios[i] == 0]}", name)
    if not set(kv) <= set(idx):
        raise ConfigError(f"field '{f.name('kv_source_layer_ids')}': every KV source must also be an index source; "
                          f"missing from index_source_layer_ids: {sorted(set(kv) - set(idx))}", f.name("kv_source_layer_ids"))
    if cand not in kv:
        raise ConfigError(f"field '{f.name('candidate_source_layer_id')}' must be one of kv_source_layer_ids "
                          f"{list(kv)}, got {cand}", f.name("candidate_source_layer_id"))
    first = kv[0]
    orphans = [i for i in range(first) if ratios[i] != 0]
    if orphans:
        raise ConfigError(f"field '{f.name('compress_ratios')}': layers {orphans} are compressed but come before the "
                          f"first KV source {first}; they would have no compressed cache to read", f.name("compress_ratios"))
    for i in range(first, n):
        src = max(s for s in kv if s <= i)
        if ratios[i] not in (0, ratios[src]):
            raise ConfigError(f"field '{f.name('compress_ratios')}': layer {i} has ratio {ratios[i]} but reads KV "
                              f"source {src} of ratio {ratios[src]}", f.name("compress_ratios"))


def _engram(f: _Fields, n_layers: int) -> EngramConfig | None:
    if "engram_layer_ids" not in f.data:
        return None
    layer_ids = f.int_list("engram_layer_ids")
    rows = f.int_list("engram_num_embeddings", lo=1)
    if len(rows) != len(layer_ids):
        raise ConfigError(f"field '{f.name('engram_num_embeddings')}' must have one entry per engram layer "
                          f"({len(layer_ids)}), got {len(rows)}", f.name("engram_num_embeddings"))
    if any(i >= n_layers for i in layer_ids):
        raise ConfigError(f"field '{f.name('engram_layer_ids')}' must list layers < {n_layers}, got {list(layer_ids)}",
                          f.name("engram_layer_ids"))
    return EngramConfig(
        layer_ids=layer_ids,
        num_embeddings=rows,
        max_ngram_size=f.int("engram_max_ngram_size", lo=2),
        vocab_size=f.int("engram_vocab_size", lo=1),
        n_heads=f.int("engram_n_heads", lo=1),
        head_dim=f.int("engram_head_dim", lo=1),
        pad_token_id=f.int("engram_pad_token_id", lo=0),
        compressed_vocab_size=f.int("engram_compressed_vocab_size", lo=1),
    )


def _v41_layer(i: int, ratio: int, kv: tuple[int, ...], idx: tuple[int, ...], cand: int,
               engram: EngramConfig | None, c: dict[str, Any]) -> LayerSpec:
    if ratio == 0:
        role, kv_src, idx_src, pool = AttnRole.WINDOW, None, None, False
    else:
        kv_src = max(s for s in kv if s <= i)
        idx_src = max(s for s in idx if s <= i)
        pool = i > cand and idx_src > cand  # selections made inside the candidate pool
        if i == cand:
            role = AttnRole.CANDIDATE_SOURCE
        elif i in kv:
            role = AttnRole.KV_INDEX_SOURCE
        elif i in idx:
            role = AttnRole.REINDEX
        else:
            role = AttnRole.REUSE
    return LayerSpec(
        index=i, compress_ratio=ratio, attn=role, routing=Routing.SCORE,
        n_routed_experts=c["n_routed_experts"], num_experts_per_tok=c["num_experts_per_tok"],
        kv_source=kv_src, index_source=idx_src, uses_candidate_pool=pool,
        engram=engram is not None and i in engram.layer_ids,
    )
