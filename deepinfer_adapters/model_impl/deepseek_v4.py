"""DeepSeek-V4-Flash (and V4-Flash-0731): the backbone, its blocks and the HC head.

Data path (model_spec.md 2.1-2.8): embed -> repeat to hc streams -> blocks, each
attention and FFN sublayer wrapped in its own mHC mixes -> HC head collapse ->
final norm -> fp32 logits. The draft heads (MTP for V4-Flash, DSpark stages for
0731) live in ``layers.mtp`` and read what ``forward`` returns in
``ModelOutput.hidden``:
- MTP: the pre-HC-head stream of every new token, [T, hc, D];
- DSpark: the inputs of the target layers, averaged over the hc streams and
  concatenated, [T, n_targets * D].

Everything runs through the two contracts: ``ForwardBatch`` (any mix of prefill
chunks and decodes) and ``StateCache`` (window rings, compressed rows, index keys
and compressor partial blocks, all declared in ``state_spec``). ``decode`` is the
one-token-per-sequence step batched on the device (``DecodeBatch``, no host sync:
what a CUDA graph captures); every block runs the same body for both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from deepinfer_adapters.config import LayerSpec, ModelConfig
from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.model_impl.base import CausalLMBase, ModelOutput, in_numerics_scope
from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.layers.attention_v4 import AttentionV4
from deepinfer_adapters.model_impl.layers.linear import Linear
from deepinfer_adapters.model_impl.layers.hyper_connection import HyperConnection, hc_head_collapse, hc_post, hc_pre_norm
from deepinfer_adapters.model_impl.layers.moe import MoE
from deepinfer_adapters.model_impl.layers.norm import RMSNorm
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.state import StateCache, StateSpec

if TYPE_CHECKING:
    from deepinfer_adapters.model_impl.layers.mtp import DraftOutput


def layer_key(cfg: ModelConfig, layer: LayerSpec) -> str:
    """State/checkpoint prefix of a layer: ``layers.N`` or ``mtp.S`` for draft layers."""
    return f"mtp.{layer.index - cfg.num_hidden_layers}" if layer.is_draft else f"layers.{layer.index}"


class HyperHead(nn.Module):
    """The HC head (``hc_head_{fn,base,scale}``): collapse the streams with learned weights."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.hc_eps, self.norm_eps = cfg.hc_eps, cfg.rms_norm_eps
        self.fn = nn.Parameter(torch.empty(cfg.hc_mult, cfg.hc_mult * cfg.hidden_size, dtype=torch.float64),
                               requires_grad=False)
        self.base = nn.Parameter(torch.empty(cfg.hc_mult), requires_grad=False)
        self.scale = nn.Parameter(torch.empty(1), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, hc, D] -> [T, D]: pre = sigmoid(m * scale + base) + eps, sum_a pre_a x_a."""
        return hc_head_collapse(x, self.fn, self.scale, self.base, self.norm_eps, self.hc_eps)


class BlockV4(nn.Module):
    """One V4 block: each sublayer computes its own (pre, post, comb) from the stream it reads."""

    attention_cls: type[AttentionV4] = AttentionV4

    def __init__(self, cfg: ModelConfig, layer: LayerSpec) -> None:
        super().__init__()
        self.key = layer_key(cfg, layer)
        self.attn = self.attention_cls(cfg, layer, self.key)
        self.ffn = MoE(cfg, layer)
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hc_attn = HyperConnection(cfg)
        self.hc_ffn = HyperConnection(cfg)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state: StateCache, numerics: Numerics) -> torch.Tensor:
        """x [T, hc, D] -> [T, hc, D]."""
        return self._run(x, lambda a: self.attn(a, batch, state, numerics), numerics, batch.input_ids,
                         batch.image_mask)

    def decode(self, x: torch.Tensor, batch: DecodeBatch, state: StateCache, numerics: Numerics) -> torch.Tensor:
        """``forward`` for one new token per sequence (model.decode)."""
        return self._run(x, lambda a: self.attn.decode(a, batch, state, numerics), numerics, batch.input_ids, None)

    def _run(self, x: torch.Tensor, attention: Callable[[torch.Tensor], torch.Tensor], numerics: Numerics,
             input_ids: torch.Tensor, image_mask: torch.Tensor | None) -> torch.Tensor:
        pre, post, comb = self.hc_attn.mixes(x)
        y = attention(hc_pre_norm(x, pre, self.attn_norm))
        x = hc_post(y, x, post, comb)
        pre, post, comb = self.hc_ffn.mixes(x)
        y = self.ffn(hc_pre_norm(x, pre, self.ffn_norm), numerics, input_ids, image_mask)
        return hc_post(y, x, post, comb)


class DeepseekV4ForCausalLM(CausalLMBase):
    def __init__(self, cfg: ModelConfig, numerics: Numerics | None = None, model_dir: Path | None = None, *,
                 with_draft: bool = True) -> None:
        """``with_draft=False`` leaves the draft layers (MTP / DSpark) out: no draft state,
        no DSpark ring updates in ``forward``, and ``decode`` becomes available."""
        super().__init__()
        if cfg.is_v41:
            raise ConfigError(f"DeepseekV4ForCausalLM runs V4-Flash checkpoints; got arch {cfg.arch!r}", "arch")
        self.cfg, self.numerics, self.model_dir = cfg, numerics or Numerics.reference(), model_dir
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed.weight.requires_grad_(False)
        self.layers = nn.ModuleList(BlockV4(cfg, layer) for layer in cfg.main_layers)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.head = Linear(cfg.hidden_size, cfg.vocab_size, quantized=False)
        self.hc_head = HyperHead(cfg)
        self.with_draft = with_draft and cfg.draft is not None
        self.mtp = nn.ModuleList()
        self.drafter = None  # MTPDrafter / DSparkDrafter: plain objects driving the ``mtp`` layers
        if self.with_draft:
            from deepinfer_adapters.model_impl.layers import mtp  # it imports BlockV4 from here

            self.mtp.extend(mtp.build_draft_layers(cfg))
            self.drafter = mtp.make_drafter(self)
        dspark = self.with_draft and cfg.draft.kind == "dspark"
        self.target_layers = tuple(cfg.draft.target_layer_ids) if dspark else ()

    def ignores(self, official: str) -> bool:
        return not self.with_draft and official.startswith("mtp.")

    def state_spec(self, rewind: int = 0) -> StateSpec:
        if rewind:
            raise ConfigError("V4-Flash's state cannot rewind yet (its compressors keep block state outside a "
                              "position ring): speculative decoding runs on V4.1 only", "speculative_config")
        spec = StateSpec()
        for block in [*self.layers, *self.mtp]:
            spec.add(block.key, *block.attn.state_fields(self.numerics))
        return spec

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed.weight[ids].to(self.numerics.dtype)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Collapsed [R, D] after the final norm -> fp32 logits (bf16 head weights used in fp32)."""
        return self.head(h, self.numerics, torch.float32)

    @torch.no_grad()
    def forward(self, batch: ForwardBatch, state: StateCache) -> ModelOutput:
        """Logits for batch.default_logits_rows(); ``hidden`` holds the draft head's input for
        every new token (see the module docstring). With DSpark stages, their context rings
        are written here, so they stay in step with the main model."""
        num = self.numerics
        x = self.embed_tokens(batch.input_ids).unsqueeze(1).repeat(1, self.cfg.hc_mult, 1)
        targets = []
        for i, block in enumerate(self.layers):
            if i in self.target_layers:  # DSpark reads the *input* of its target layers
                targets.append(x.float().mean(dim=1).to(x.dtype))
            x = block(x, batch, state, num)
        rows = batch.default_logits_rows()
        logits = self.logits(self.norm(self.hc_head(x[rows])))
        if targets:
            main_hidden = torch.cat(targets, dim=-1)
            self.drafter.observe(main_hidden, batch, state)
            return ModelOutput(logits=logits, hidden=main_hidden)
        return ModelOutput(logits=logits, hidden=x if self.with_draft else None)

    @in_numerics_scope
    @torch.no_grad()
    def decode(self, batch: DecodeBatch, state: StateCache) -> torch.Tensor:
        """One new token per sequence, batched on the device: logits [B, vocab] fp32.

        The same computation as ``forward`` on a one-token-per-sequence ForwardBatch (tests
        compare them bit for bit), without host loops or syncs, so a CUDA graph can capture
        it. Needs a state cache with device addressing (``StateCache.row_pool``) and no
        draft layers (DSpark's rings follow ``forward`` only)."""
        if self.with_draft:
            raise ValueError("decode() runs the main model only: build the model with with_draft=False")
        num = self.numerics
        batch.scratch.clear()
        x = self.embed_tokens(batch.input_ids).unsqueeze(1).repeat(1, self.cfg.hc_mult, 1)
        for block in self.layers:
            x = block.decode(x, batch, state, num)
        return self.logits(self.norm(self.hc_head(x)))

    # ------------------------------------------------------------- draft heads ----
    @in_numerics_scope
    def mtp_step(self, batch: ForwardBatch, hidden: torch.Tensor, state: StateCache, *, stage: int = 0) -> ModelOutput:
        """V4-Flash MTP: logits of token t+2 from (main stream at t, token t+1); see layers.mtp."""
        if not self.with_draft or self.cfg.draft.kind != "mtp":
            raise ValueError(f"this {self.cfg.arch} model has no MTP layer (checkpoint without one, "
                             "or built with with_draft=False)")
        return self.drafter.forward(batch, hidden, state, stage=stage)

    @in_numerics_scope
    def draft(self, last_tokens: list[int], positions: list[int], slots: list[int], state: StateCache,
              sample: Callable[[torch.Tensor], torch.Tensor] | None = None) -> DraftOutput:
        """0731 DSpark: propose a block per sequence after its last position (as V4.1's ``draft``)."""
        if not self.with_draft or self.cfg.draft.kind != "dspark":
            raise ValueError(f"this {self.cfg.arch} model has no DSpark stages (checkpoint without them, "
                             "or built with with_draft=False)")
        kwargs = {} if sample is None else {"sample": sample}
        return self.drafter.draft(last_tokens, positions, slots, state, **kwargs)
