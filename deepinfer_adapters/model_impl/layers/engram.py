"""V4.1 Engram (model_spec.md 2.7): an n-gram hash lookup gated into each residual stream.

Applied to the stream *before* its block. The table rows fetched for a token
(one per n-gram order and hash head) are projected by ``wkv`` into one key per
stream and a shared value; each stream's gate is a normalised dot product of
stream and key, passed through a signed square root and a sigmoid
(``kernels.engram_gate``).
"""

from __future__ import annotations

import torch
from torch import nn

from deepinfer_adapters import kernels
from deepinfer_adapters.config import ModelConfig
from deepinfer_adapters.model_impl.layers.linear import Linear
from deepinfer_adapters.model_impl.numerics import Numerics


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
        return kernels.engram_gate(x, kv, self.q_weight, self.k_weight, self.eps, token_mask)
