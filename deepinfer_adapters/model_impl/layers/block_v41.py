"""A V4.1 block: attention and MoE between single-pass hyper-connections, Engram before it."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from deepinfer_adapters.config import LayerSpec, ModelConfig
from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.layers.attention_common import AttentionBase
from deepinfer_adapters.model_impl.layers.attention_v41 import AttentionV41
from deepinfer_adapters.model_impl.layers.engram import Engram
from deepinfer_adapters.model_impl.layers.hyper_connection import HyperConnection, hc_post, hc_post_norm, hc_pre_norm
from deepinfer_adapters.model_impl.layers.moe import MoE
from deepinfer_adapters.model_impl.layers.norm import RMSNorm
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.overlap import side_by_side
from deepinfer_adapters.model_impl.state import StateCache


class BlockV41(nn.Module):
    """Single-pass hyper-connections: attention collapses with the previous block's
    FFN mix, the FFN with this block's attention mix (model_spec.md 2.2)."""

    def __init__(self, cfg: ModelConfig, layer: LayerSpec, key: str, *, vision: bool,
                 attention: type[AttentionBase] = AttentionV41) -> None:
        super().__init__()
        self.layer = layer
        self.attn = attention(cfg, layer, key)
        self.ffn = MoE(cfg, layer, vision=vision)
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hc_attn = HyperConnection(cfg)
        self.hc_ffn = HyperConnection(cfg)
        self.engram = Engram(cfg, layer.index) if layer.engram else None

    def forward(self, x: torch.Tensor, pre_mix: torch.Tensor, batch: ForwardBatch, state: StateCache,
                numerics: Numerics, keep: torch.Tensor | None = None,
                attn_batch: ForwardBatch | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``keep``: rows to continue with after attention (compact bounded replay). Then
        attention runs on every row of ``x`` with the full-layout ``attn_batch`` (so a KV
        source here still compresses every token) and the rest on ``batch``'s kept rows."""
        x, pre, _ = self._run(x, pre_mix, lambda a: self.attn(a, attn_batch or batch, state, numerics), numerics,
                              batch.input_ids, batch.image_mask, keep)
        return x, pre

    def decode(self, x: torch.Tensor, pre_mix: torch.Tensor, batch: DecodeBatch, state: StateCache,
               numerics: Numerics, attn_in: torch.Tensor | None = None,
               next_norm: RMSNorm | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``forward`` for one new token per sequence (model.decode). ``attn_in``: the attention's
        input, when the previous block made it; ``next_norm``: the norm of what follows (the next
        block's attention, the head), whose input is then made with the last hc_post and returned
        third (its pre mix is this block's FFN mix: one kernel, not two)."""
        return self._run(x, pre_mix, lambda a: self.attn.decode(a, batch, state, numerics), numerics,
                         batch.input_ids, None, attn_in=attn_in, next_norm=next_norm)

    def _run(self, x: torch.Tensor, pre_mix: torch.Tensor, attention: Callable[[torch.Tensor], torch.Tensor],
             numerics: Numerics, input_ids: torch.Tensor, image_mask: torch.Tensor | None,
             keep: torch.Tensor | None = None, attn_in: torch.Tensor | None = None,
             next_norm: RMSNorm | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        def attend() -> torch.Tensor:
            return attention(hc_pre_norm(x, pre_mix, self.attn_norm) if attn_in is None else attn_in)

        # each sublayer reads the previous mix, so this one's mixes run next to it (overlap.py)
        y, (attn_pre, post, comb) = side_by_side(x, attend, lambda: self.hc_attn.mixes(x))
        if keep is not None:
            y, x, attn_pre, post, comb = y[keep], x[keep], attn_pre[keep], post[keep], comb[keep]
        # the FFN's pre mix (the attention's) is known: its input comes with the streams
        x, ffn_in = hc_post_norm(y, x, post, comb, attn_pre, self.ffn_norm)
        y, (ffn_pre, post, comb) = side_by_side(x, lambda: self.ffn(ffn_in, numerics, input_ids, image_mask),
                                                lambda: self.hc_ffn.mixes(x))
        if next_norm is None:
            return hc_post(y, x, post, comb), ffn_pre, None
        x, next_in = hc_post_norm(y, x, post, comb, ffn_pre, next_norm)
        return x, ffn_pre, next_in
