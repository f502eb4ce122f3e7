"""V4 lightning indexer (model_spec.md 2.3), in ratio-4 ("CSA") layers.

Keys: the layer's own overlap compressor at ``index_head_dim`` (norm, RoPE, Hadamard,
FP4), cached as rows of the state. Query: ``wq_b(qr)`` per index head, RoPE,
Hadamard, FP4. Score of entry j for query s:
``sum_h w[s,h] * relu(q[s,h] . K_j)`` with ``w = weights_proj(x) * d^-1/2 * H^-1/2``.
Entry j is visible to position p iff j < (p+1) // r; each query keeps the top
min(index_topk, entries so far) and marks picks it cannot see as -1.

The scores are computed in the activation dtype, as the reference's bf16 einsum. Equal
scores are frequent (every head's ReLU zero gives exactly 0, FP4-rounded inputs, -inf
masks) and the reference's ``topk`` leaves their order to the device; we pick the lower
entry index, the package-wide rule of ``layers.topk`` (model_spec.md 6.4), so a row
depends only on its own prefix (docs/notes/v4_model.md).
"""

from __future__ import annotations

import torch
from torch import nn

from deepinfer_adapters import kernels
from deepinfer_adapters.config import ModelConfig
from deepinfer_adapters.model_impl.layers.compressor_v4 import INDEX_FP4_BLOCK, CompressorV4, hadamard
from deepinfer_adapters.model_impl.layers.linear import Linear
from deepinfer_adapters.model_impl.layers.topk import topk_lowest_index_ties
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.quant import fp4_roundtrip_e8m0
from deepinfer_adapters.model_impl.state import StateCache, StateField


class IndexerV4(nn.Module):
    def __init__(self, cfg: ModelConfig, ratio: int, key: str) -> None:
        super().__init__()
        self.ratio, self.key = ratio, key
        self.n_heads, self.head_dim, self.topk = cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk
        self.wq_b = Linear(cfg.q_lora_rank, self.n_heads * self.head_dim, quantized=True,
                           act_block=cfg.quant.fp8_block[1])
        self.weights_proj = Linear(cfg.hidden_size, self.n_heads, quantized=False)
        self.compressor = CompressorV4(cfg, ratio, self.head_dim, key, "indexer", rotate=True)
        self.weight_scale = self.head_dim**-0.5 * self.n_heads**-0.5

    def state_fields(self, numerics: Numerics) -> list[StateField]:
        return [StateField("index_keys", (self.head_dim,), numerics.dtype, "rows", ratio=self.ratio),
                *self.compressor.state_fields()]

    def query(self, qr: torch.Tensor, freqs: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        """qr [T, q_lora] -> index queries [T, H, d] (RoPE, Hadamard, FP4)."""
        q = self.wq_b(qr, numerics).unflatten(-1, (self.n_heads, self.head_dim))
        q = hadamard(kernels.apply_rope(q, freqs))
        return fp4_roundtrip_e8m0(q, INDEX_FP4_BLOCK) if numerics.kv_quant else q

    def forward(self, x: torch.Tensor, q: torch.Tensor, numerics: Numerics, state: StateCache,
                slot: int, start: int) -> torch.Tensor:
        """One sequence's chunk: x [n, D], index queries q [n, H, d] at positions start..
        -> selected entry indices [n, min(topk, entries)], -1 where invisible."""
        r, n = self.ratio, x.shape[0]
        end = start + n
        new_keys = self.compressor(x, numerics, state, slot, start)
        if new_keys.shape[0]:
            state.write_rows(self.key, "index_keys", slot, start // r, new_keys)
        n_entries = end // r
        if n_entries == 0:
            return torch.empty(n, 0, dtype=torch.long, device=x.device)
        dtype = numerics.dtype
        keys = state.read_rows(self.key, "index_keys", slot, 0, n_entries).to(dtype)
        w = self.weights_proj(x, numerics).to(dtype) * self.weight_scale
        scores = (torch.einsum("shd,td->sht", q.to(dtype), keys).relu() * w.unsqueeze(-1)).sum(dim=1)
        visible = (torch.arange(start, end, device=x.device) + 1) // r
        future = torch.arange(n_entries, device=x.device) >= visible.unsqueeze(1)
        scores = scores.float().masked_fill(future, float("-inf"))
        picked, _ = topk_lowest_index_ties(scores, min(self.topk, n_entries))
        return torch.where(picked < visible.unsqueeze(1), picked, -1)
