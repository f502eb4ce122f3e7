"""A V4.1 block: attention and MoE between single-pass hyper-connections, Engram before it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from deepinfer_adapters.config import LayerSpec, ModelConfig
from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.layers.attention_common import AttentionBase
from deepinfer_adapters.model_impl.layers.attention_v41 import AttentionV41
from deepinfer_adapters.model_impl.layers.engram import Engram
from deepinfer_adapters.model_impl.layers.hyper_connection import (HyperConnection, hc_post, hc_post_pre_norm,
                                                                   hc_pre_norm)
from deepinfer_adapters.model_impl.layers.moe import MoE
from deepinfer_adapters.model_impl.layers.norm import RMSNorm
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl import overlap
from deepinfer_adapters.model_impl.overlap import side_by_side
from deepinfer_adapters.model_impl.state import StateCache


class BlockOutput(NamedTuple):
    """A block's output streams [T, hc, D], the pre weights of the next collapse [T, hc], and, where the block was
    given the next sublayer's norm (``next_norm``), that sublayer's input [T, D] (else None)."""

    x: torch.Tensor
    pre: torch.Tensor
    normed: torch.Tensor | None = None


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
                numerics: Numerics, keep: torch.Tensor | None = None, attn_batch: ForwardBatch | None = None, *,
                normed: torch.Tensor | None = None, next_norm: RMSNorm | None = None) -> BlockOutput:
        """``keep``: rows to continue with after attention (compact bounded replay). Then
        attention runs on every row of ``x`` with the full-layout ``attn_batch`` (so a KV
        source here still compresses every token) and the rest on ``batch``'s kept rows.
        ``normed``, ``next_norm``: see ``_run``."""
        return self._run(x, pre_mix, lambda a, _: self.attn(a, attn_batch or batch, state, numerics), numerics,
                         batch.input_ids, batch.image_mask, keep, normed=normed, next_norm=next_norm)

    def decode(self, x: torch.Tensor, pre_mix: torch.Tensor, batch: DecodeBatch, state: StateCache,
               numerics: Numerics, *, normed: torch.Tensor | None = None,
               next_norm: RMSNorm | None = None) -> BlockOutput:
        """``forward`` for one new token per sequence (model.decode)."""
        return self._run(x, pre_mix, lambda a, early: self.attn.decode(a, batch, state, numerics, early),
                         numerics, batch.input_ids, None,
                         early=lambda a: self.attn.decode_early(a, batch, state, numerics), normed=normed,
                         next_norm=next_norm)

    def _run(self, x: torch.Tensor, pre_mix: torch.Tensor, attention: Callable[[torch.Tensor, Any], torch.Tensor],
             numerics: Numerics, input_ids: torch.Tensor, image_mask: torch.Tensor | None,
             keep: torch.Tensor | None = None, early: Callable[[torch.Tensor], Any] = lambda a: None, *,
             normed: torch.Tensor | None = None, next_norm: RMSNorm | None = None) -> BlockOutput:
        """``attention(a, early(a))`` of the attention sublayer's input ``a``: ``early`` is its first work (the
        decode step's publishing and projection), issued before the mixes fork with the pre-norm (``_normed``).
        ``normed``: ``a`` itself, computed by the block before with its last hc_post (``next_norm``: the norm of
        the sublayer after this block, whose input this block then returns as ``BlockOutput.normed``)."""
        attn_in = (lambda: normed) if normed is not None else (lambda: hc_pre_norm(x, pre_mix, self.attn_norm))
        # each sublayer reads the previous mix, so this one's mixes run next to it (overlap.py)
        y, (attn_pre, post, comb) = side_by_side(x, _normed(attn_in, attention, early), lambda: self.hc_attn.mixes(x),
                                                 urgent=overlap.MIXES_URGENT)
        if keep is not None:
            y, x, attn_pre, post, comb = y[keep], x[keep], attn_pre[keep], post[keep], comb[keep]
        # the new streams and the next sublayer's input in one op (one launch on the GPU)
        x, h = hc_post_pre_norm(y, x, post, comb, attn_pre, self.ffn_norm)
        y, (ffn_pre, post, comb) = side_by_side(
            x, _normed(lambda: h, lambda h, _: self.ffn(h, numerics, input_ids, image_mask)),
            lambda: self.hc_ffn.mixes(x), urgent=overlap.MIXES_URGENT)
        if next_norm is None:
            return BlockOutput(hc_post(y, x, post, comb), ffn_pre)
        x, h = hc_post_pre_norm(y, x, post, comb, ffn_pre, next_norm)
        return BlockOutput(x, ffn_pre, h)


def _normed(norm: Callable[[], torch.Tensor], sublayer: Callable[[torch.Tensor, Any], torch.Tensor],
            early: Callable[[torch.Tensor], Any] = lambda h: None) -> Callable[[], torch.Tensor]:
    """The main part next to a sublayer's mixes: ``sublayer(h, early(h))`` of its pre-norm ``h``. With
    ``overlap.NORM_BEFORE_MIXES`` the norm and ``early`` run now, before the side stream forks: issued
    after the mixes' split GEMV, which fills the GPU, the one-program norm waited behind it on the critical
    path (overlap.py)."""
    if overlap.NORM_BEFORE_MIXES:
        h = norm()
        first = early(h)
        return lambda: sublayer(h, first)

    def later() -> torch.Tensor:
        h = norm()
        return sublayer(h, early(h))
    return later
