"""V4.1 Engram (model_spec.md 2.7): an n-gram hash lookup gated into each residual stream.

Applied to the stream *before* its block. The table rows fetched for a token
(one per n-gram order and hash head) are projected by ``wkv`` into one key per
stream and a shared value; each stream's gate is a normalised dot product of
stream and key, passed through a signed square root and a sigmoid.
"""

from __future__ import annotations

import torch
from torch import nn

from deepinfer_adapters.config import ModelConfig
from deepinfer_adapters.kernels.invariance import wide
from deepinfer_adapters.kernels.reference import mean_square
from deepinfer_adapters.model_impl.layers.linear import Linear
from deepinfer_adapters.model_impl.numerics import Numerics

GATE_FLOOR = 1e-6  # |dot| floor before the signed sqrt, from training


class EngramEmbed(nn.Module):
    """The table, dequantized (FP8 rows x E8M0 scales are exact in bf16)."""

    def __init__(self, rows: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, dim), requires_grad=False)

    def forward(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.weight[ids].to(dtype)


class Engram(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_index: int) -> None:
        super().__init__()
        e = cfg.engram
        assert e is not None
        self.hc, self.dim, self.eps = cfg.hc_mult, cfg.hidden_size, cfg.rms_norm_eps
        self.table_index = e.layer_ids.index(layer_index)
        self.embed = EngramEmbed(e.num_embeddings[self.table_index], e.head_dim)
        self.wkv = Linear(e.n_hash_columns * e.head_dim, self.dim * (self.hc + 1), quantized=True,
                          act_block=cfg.quant.fp8_block[1])
        self.q_weight = nn.Parameter(torch.empty(self.hc, self.dim), requires_grad=False)
        self.k_weight = nn.Parameter(torch.empty(self.hc, self.dim), requires_grad=False)

    def forward(self, x: torch.Tensor, hash_ids: torch.Tensor, numerics: Numerics,
                token_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [T, hc, D]; hash_ids [T, n_cols] table rows; token_mask [T] False = no contribution."""
        kv = self.wkv(self.embed(hash_ids, numerics.dtype).flatten(-2), numerics)
        key, value = kv.split([self.hc * self.dim, self.dim], dim=-1)
        key = key.float().unflatten(-1, (self.hc, self.dim))
        h = x.float()
        weight = self.q_weight.float() * self.k_weight.float()
        # normalised per (token, stream) over D, not jointly over the streams
        rstd = torch.rsqrt(mean_square(h)[..., 0] + self.eps) * torch.rsqrt(mean_square(key)[..., 0] + self.eps)
        dot = wide(h * weight * key).sum(-1).float() * rstd * self.dim**-0.5
        gate = torch.sigmoid(torch.copysign(wide(dot).abs().clamp_min(GATE_FLOOR).sqrt(), wide(dot))).float()
        if token_mask is not None:
            gate = gate.masked_fill(~token_mask.unsqueeze(-1), 0)
        return (h + gate.unsqueeze(-1) * value.float().unsqueeze(-2)).to(x.dtype)
