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
from deepinfer_adapters.kernels import invariance
from deepinfer_adapters.kernels.invariance import narrow, wide
from deepinfer_adapters.model_impl.batch import DecodeBatch
from deepinfer_adapters.model_impl.layers.compressor_v4 import INDEX_FP4_BLOCK, CompressorV4, store_completed
from deepinfer_adapters.model_impl.layers.linear import Linear
from deepinfer_adapters.model_impl.layers.topk import topk_lowest_index_ties
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.state import StateCache, StateField, shared_row_address


def future_rows(visible: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """[n, m] True where entry ``rows[j]`` is past the ``visible[i]`` entries query i can see."""
    return rows >= visible.unsqueeze(1)


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
        q = kernels.hadamard(kernels.apply_rope(q, freqs))
        return kernels.fp4_roundtrip_e8m0(q, INDEX_FP4_BLOCK) if numerics.kv_quant else q

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
        keys = state.read_rows(self.key, "index_keys", slot, 0, n_entries).to(numerics.dtype)
        visible = (torch.arange(start, end, device=x.device) + 1) // r
        return self.select(self.scores(x, q, keys, numerics), visible)

    def decode(self, x: torch.Tensor, q: torch.Tensor, numerics: Numerics, state: StateCache,
               batch: DecodeBatch) -> torch.Tensor:
        """``forward`` for one token per sequence (model.decode): x [B, D], q [B, H, d] ->
        [B, min(topk, n)] over the first n = max_len // r index keys of each sequence
        (the per-sequence picks, ascending, then -1 for what a sequence cannot see yet)."""
        entries, complete = self.compressor.decode(x, numerics, state, batch)
        store_completed(state, self.key, "index_keys", batch, self.ratio, entries, complete)
        n_rows = min(batch.max_len // self.ratio, state.row_capacity(self.key, "index_keys"))
        if n_rows == 0:
            return torch.empty(x.shape[0], 0, dtype=torch.long, device=x.device)
        rows = batch.arange(n_rows).expand(x.shape[0], n_rows)
        addr = shared_row_address(state, batch, self.key, "index_keys", ("arange", n_rows), rows)
        keys = state.row_pool(self.key, "index_keys")[addr].to(numerics.dtype)
        # what each sequence can see: the same for every CSA layer of the step
        visible = batch.visible_rows(self.ratio)
        future = batch.shared(("future_rows", self.ratio, n_rows),
                              lambda: future_rows(visible, batch.arange(n_rows)))
        return self.select(self.scores(x, q, keys, numerics), visible, future)

    def scores(self, x: torch.Tensor, q: torch.Tensor, keys: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        """[n, m] scores of n queries against m keys [m, d], or each query against its own
        keys [n, m, d] (batched decode). In the activation dtype, as the reference; in
        batch-invariant mode the sums run in fp64 (one rounding), so a score does not
        depend on how many keys or queries share the call."""
        dt = numerics.dtype
        w = self.weights_proj(x, numerics).to(dt) * self.weight_scale
        spec = "shd,std->sht" if keys.dim() == 3 else "shd,td->sht"
        per_head = torch.einsum(spec, narrow(q, dt), narrow(keys, dt)).to(dt).relu() * w.unsqueeze(-1)
        return (wide(per_head).sum(dim=1) if invariance.enabled() else per_head.sum(dim=1)).to(dt)

    def select(self, scores: torch.Tensor, visible: torch.Tensor, future: torch.Tensor | None = None) -> torch.Tensor:
        """Top min(topk, m) of scores [n, m] among the entries each query can see (visible
        [n]), ascending; picks it cannot see are -1. ``future``: ``future_rows(visible,
        arange(m))`` where the caller has it (a decode step builds it once for every layer)."""
        m = scores.shape[-1]
        if future is None:
            future = future_rows(visible, torch.arange(m, device=scores.device))
        # ranked in the scores' own dtype (exact either way): bf16 scores take the GPU kernel's
        # 16-bit keys, half the serial passes of fp32 ones (kernels/triton_topk.py)
        picked, _ = topk_lowest_index_ties(scores.masked_fill(future, float("-inf")), min(self.topk, m))
        return torch.where(picked < visible.unsqueeze(1), picked, -1)
