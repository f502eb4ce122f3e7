"""The official checkpoint's tensor contract, derived from a ModelConfig.

Names follow the reference module tree (model_spec.md section 4); shapes and
dtypes follow the header-verified contracts cited there. The reader validates a
checkpoint against this before loading anything big, and the tiny-checkpoint
writer produces exactly this set, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepinfer_adapters.config import ARCH_V4, ARCH_V4_0731, AttnRole, LayerSpec, ModelConfig, Routing

# safetensors dtype strings
BF16, F32, I8, I32, I64 = "BF16", "F32", "I8", "I32", "I64"
F8_E4M3, F8_E8M0 = "F8_E4M3", "F8_E8M0"

FP4_GROUP = 32  # routed-expert FP4 values per E8M0 scale


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtypes: tuple[str, ...]  # accepted storage dtypes; the first is what we write
    kind: str = "plain"  # plain | fp8_weight | fp8_scale | fp4_weight | fp4_scale | fp8_table | hc
    scale_for: str | None = None

    @property
    def dtype(self) -> str:
        return self.dtypes[0]


class _Builder:
    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        self.block = cfg.quant.fp8_block
        self.specs: dict[str, TensorSpec] = {}

    def add(self, name: str, shape: tuple[int, ...], *dtypes: str, kind: str = "plain", scale_for: str | None = None) -> None:
        assert name not in self.specs, name
        self.specs[name] = TensorSpec(name, tuple(int(s) for s in shape), dtypes, kind, scale_for)

    def fp8_linear(self, prefix: str, out_f: int, in_f: int) -> None:
        bo, bi = self.block
        self.add(f"{prefix}.weight", (out_f, in_f), F8_E4M3, kind="fp8_weight")
        self.add(f"{prefix}.scale", (math.ceil(out_f / bo), math.ceil(in_f / bi)), F8_E8M0,
                 kind="fp8_scale", scale_for=f"{prefix}.weight")

    def expert_linear(self, prefix: str, out_f: int, in_f: int) -> None:
        if self.cfg.quant.expert_dtype == "fp8":
            # V4-Flash-Base style: FP8 experts with F32 block scales.
            bo, bi = self.block
            self.add(f"{prefix}.weight", (out_f, in_f), F8_E4M3, kind="fp8_weight")
            self.add(f"{prefix}.scale", (math.ceil(out_f / bo), math.ceil(in_f / bi)), F32,
                     kind="fp8_scale", scale_for=f"{prefix}.weight")
            return
        self.add(f"{prefix}.weight", (out_f, in_f // 2), I8, kind="fp4_weight")
        self.add(f"{prefix}.scale", (out_f, in_f // FP4_GROUP), F8_E8M0, kind="fp4_scale",
                 scale_for=f"{prefix}.weight")

    def hc(self, prefix: str, branch: str) -> None:
        c = self.cfg
        self.add(f"{prefix}.hc_{branch}_fn", (c.hc_mix_dim, c.hc_mult * c.hidden_size), F32, kind="hc")
        self.add(f"{prefix}.hc_{branch}_base", (c.hc_mix_dim,), F32, kind="hc")
        self.add(f"{prefix}.hc_{branch}_scale", (3,), F32, kind="hc")

    def hc_head(self, prefix: str) -> None:
        c = self.cfg
        self.add(f"{prefix}hc_head_fn", (c.hc_mult, c.hc_mult * c.hidden_size), F32, kind="hc")
        self.add(f"{prefix}hc_head_base", (c.hc_mult,), F32, kind="hc")
        self.add(f"{prefix}hc_head_scale", (1,), F32, kind="hc")


def expected_tensors(cfg: ModelConfig, *, vision: bool | None = None) -> dict[str, TensorSpec]:
    """Every tensor of the checkpoint, by name. ``vision`` defaults to whether
    the V4.1 config carries a ``vision_config`` section."""
    b = _Builder(cfg)
    D, V = cfg.hidden_size, cfg.vocab_size
    b.add("embed.weight", (V, D), BF16)
    b.add("head.weight", (V, D), BF16)
    b.add("norm.weight", (D,), BF16)
    if cfg.is_v41:
        has_vision = ("vision_config" in cfg.extra) if vision is None else vision
        if has_vision:
            _vision(b, cfg.extra["vision_config"])
    else:
        has_vision = False
        b.hc_head("")
    for layer in cfg.layers:
        prefix = f"mtp.{layer.index - cfg.num_hidden_layers}" if layer.is_draft else f"layers.{layer.index}"
        _block(b, prefix, layer, has_vision)
    _draft_heads(b)
    return b.specs


def _block(b: _Builder, prefix: str, layer: LayerSpec, vision: bool) -> None:
    c = b.cfg
    D, H, d = c.hidden_size, c.num_attention_heads, c.head_dim
    a = f"{prefix}.attn"
    b.add(f"{prefix}.attn_norm.weight", (D,), BF16)
    b.add(f"{prefix}.ffn_norm.weight", (D,), BF16)
    b.add(f"{a}.attn_sink", (H,), F32)
    b.add(f"{a}.q_norm.weight", (c.q_lora_rank,), BF16)
    b.add(f"{a}.kv_norm.weight", (d,), BF16)
    b.fp8_linear(f"{a}.wq_a", c.q_lora_rank, D)
    b.fp8_linear(f"{a}.wq_b", H * d, c.q_lora_rank)
    b.fp8_linear(f"{a}.wkv", d, D)
    b.fp8_linear(f"{a}.wo_a", c.o_groups * c.o_lora_rank, H * d // c.o_groups)
    b.fp8_linear(f"{a}.wo_b", D, c.o_groups * c.o_lora_rank)
    if c.is_v41:
        _csa2_attention(b, a, layer)
        if layer.engram:
            _engram(b, f"{prefix}.engram", layer)
    elif layer.compress_ratio:
        _v4_compressor(b, f"{a}.compressor", layer.compress_ratio, d)
        if layer.attn is AttnRole.CSA:
            _v4_compressor(b, f"{a}.indexer.compressor", layer.compress_ratio, c.index_head_dim)
            b.add(f"{a}.indexer.weights_proj.weight", (c.index_n_heads, D), BF16)
            b.fp8_linear(f"{a}.indexer.wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank)
    _moe(b, f"{prefix}.ffn", layer, vision)
    b.hc(prefix, "attn")
    b.hc(prefix, "ffn")


def _v4_compressor(b: _Builder, p: str, ratio: int, dim: int) -> None:
    width = (2 if ratio == 4 else 1) * dim  # ratio 4 overlaps: two halves
    D = b.cfg.hidden_size
    b.add(f"{p}.ape", (ratio, width), F32)
    b.add(f"{p}.wkv.weight", (width, D), BF16)
    b.add(f"{p}.wgate.weight", (width, D), BF16)
    b.add(f"{p}.norm.weight", (dim,), BF16)


def _csa2_attention(b: _Builder, a: str, layer: LayerSpec) -> None:
    c = b.cfg
    D, d = c.hidden_size, c.head_dim
    if layer.is_kv_source:
        b.add(f"{a}.compressor.wkv.weight", (d, D), BF16)
        if layer.compress_ratio > 1:  # ratio 1 has nothing to pool: no gate
            b.add(f"{a}.compressor.wgate.weight", (d, D), BF16)
        b.add(f"{a}.compressor.norm.weight", (d,), BF16)
        b.add(f"{a}.indexer.wk.weight", (c.index_head_dim, d), BF16)
        b.add(f"{a}.indexer.k_norm.weight", (c.index_head_dim,), BF16)
    if layer.has_indexer_query:
        b.fp8_linear(f"{a}.indexer.wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank)
        b.add(f"{a}.indexer.weights_proj.weight", (c.index_n_heads, D), BF16)


def _engram(b: _Builder, p: str, layer: LayerSpec) -> None:
    c, e = b.cfg, b.cfg.engram
    assert e is not None
    rows = e.num_embeddings[e.layer_ids.index(layer.index)]
    b.add(f"{p}.embed.weight", (rows, e.head_dim), F8_E4M3, kind="fp8_table")
    b.add(f"{p}.embed.scale", (rows, math.ceil(e.head_dim / b.block[1])), F8_E8M0, kind="fp8_scale",
          scale_for=f"{p}.embed.weight")
    b.fp8_linear(f"{p}.wkv", c.hidden_size * (c.hc_mult + 1), e.n_hash_columns * e.head_dim)
    b.add(f"{p}.q_weight", (c.hc_mult, c.hidden_size), BF16)
    b.add(f"{p}.k_weight", (c.hc_mult, c.hidden_size), BF16)


def _moe(b: _Builder, f: str, layer: LayerSpec, vision: bool) -> None:
    c = b.cfg
    D, I, E = c.hidden_size, c.moe_intermediate_size, layer.n_routed_experts
    b.add(f"{f}.gate.weight", (E, D), BF16)
    if layer.routing is Routing.HASH:
        b.add(f"{f}.gate.tid2eid", (c.vocab_size, layer.num_experts_per_tok), I64, I32)
    else:
        b.add(f"{f}.gate.bias", (E,), F32)
        if vision:
            b.add(f"{f}.gate.bias_vl", (E,), F32)
    for e in range(E):
        b.expert_linear(f"{f}.experts.{e}.w1", I, D)
        b.expert_linear(f"{f}.experts.{e}.w2", D, I)
        b.expert_linear(f"{f}.experts.{e}.w3", I, D)
    if c.n_shared_experts:
        b.fp8_linear(f"{f}.shared_experts.w1", I, D)
        b.fp8_linear(f"{f}.shared_experts.w2", D, I)
        b.fp8_linear(f"{f}.shared_experts.w3", I, D)


def _draft_heads(b: _Builder) -> None:
    c, draft = b.cfg, b.cfg.draft
    if draft is None:
        return
    D, V = c.hidden_size, c.vocab_size
    if draft.kind == "mtp":  # V4-Flash: embedding/hidden projections and its own HC head per layer
        for s in range(draft.num_stages):
            p = f"mtp.{s}"
            b.fp8_linear(f"{p}.e_proj", D, D)
            b.fp8_linear(f"{p}.h_proj", D, D)
            for norm in ("enorm", "hnorm", "norm"):
                b.add(f"{p}.{norm}.weight", (D,), BF16)
            b.hc_head(f"{p}.")
        return
    last = f"mtp.{draft.num_stages - 1}"
    b.fp8_linear("mtp.0.main_proj", D, D * len(draft.target_layer_ids))
    b.add("mtp.0.main_norm.weight", (D,), BF16)
    b.add(f"{last}.norm.weight", (D,), BF16)
    b.add(f"{last}.confidence_head.proj.weight", (1, D + draft.markov_rank), BF16)
    if c.arch == ARCH_V4_0731:
        b.add(f"{last}.markov_head.markov_w1.weight", (V, draft.markov_rank), BF16)
        b.add(f"{last}.markov_head.markov_w2.weight", (V, draft.markov_rank), BF16)
        b.hc_head(f"{last}.")
    else:
        b.add(f"{last}.markov_head.embed.weight", (V, draft.markov_rank), BF16)
        b.add(f"{last}.markov_head.head.weight", (V, draft.markov_rank), BF16)


def _vision(b: _Builder, v: dict) -> None:
    """V4.1's ViT tower, aligner and image-span embeddings (loaded, not yet run)."""
    D, Dv, I = b.cfg.hidden_size, v["hidden_size"], v["intermediate_size"]
    patch, down = v["patch_size"], v["downsample_ratio"]
    for name in ("image_start", "image_end", "image_newline"):
        b.add(name, (D,), BF16)
    for proj, in_f in (("w1", Dv * down**2), ("w2", D)):
        b.add(f"aligner.{proj}.weight", (D, in_f), BF16)
        b.add(f"aligner.{proj}.bias", (D,), BF16)
    b.add("vision.patch_embed.proj.weight", (Dv, 3 * patch**2), BF16)
    b.add("vision.patch_embed.proj.bias", (Dv,), BF16)
    b.add("vision.norm.weight", (Dv,), BF16)
    for i in range(v["num_hidden_layers"]):
        p = f"vision.blocks.{i}"
        for proj, out_f in (("wqkv", 3 * Dv), ("wo", Dv)):
            b.add(f"{p}.attn.{proj}.weight", (out_f, Dv), BF16)
            b.add(f"{p}.attn.{proj}.bias", (out_f,), BF16)
        b.add(f"{p}.mlp.w1.weight", (2 * I, Dv), BF16)
        b.add(f"{p}.mlp.w2.weight", (Dv, I), BF16)
        b.add(f"{p}.norm1.weight", (Dv,), BF16)
        b.add(f"{p}.norm2.weight", (Dv,), BF16)


__all__ = ["TensorSpec", "expected_tensors", "ARCH_V4"]
