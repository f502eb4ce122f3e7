"""V4.1 compressor (model_spec.md 2.4), on KV-source layers only.

Ratio 2: ``latent_j = norm(sum_{t in group j} softmax_t(wgate x_t) * wkv x_t)`` with
the pooling in fp32; the unfinished group is carried between steps as state.
Ratio 1: ``latent = norm(wkv x)`` (bf16, no gate). Latents are returned before
RoPE: the indexer keys need them unrotated.
"""

from __future__ import annotations

import torch
from torch import nn

from deepinfer_adapters import kernels
from deepinfer_adapters.config import ModelConfig
from deepinfer_adapters.model_impl.layers.linear import Linear, MergedLinear, same_input
from deepinfer_adapters.model_impl.layers.norm import RMSNorm
from deepinfer_adapters.model_impl.batch import DecodeBatch
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.state import StateCache, StateField


class CompressorV41(nn.Module):
    SAME_INPUT = {"kv_gate": ("wkv", "wgate")}  # merged at load (layers/linear.py)

    def __init__(self, cfg: ModelConfig, ratio: int, key: str) -> None:
        super().__init__()
        self.ratio, self.key, d = ratio, key, cfg.head_dim
        self.wkv = Linear(cfg.hidden_size, d, quantized=False)
        self.wgate = Linear(cfg.hidden_size, d, quantized=False) if ratio > 1 else None
        self.kv_gate: MergedLinear | None = None
        self.norm = RMSNorm(d, cfg.rms_norm_eps)

    def state_fields(self, rewind: int = 0) -> list[StateField]:
        """Rows of the group in progress, in a ring indexed by position (``rewind`` extra slots,
        as the window ring's)."""
        if self.ratio == 1:
            return []
        shape = (self.ratio + rewind, self.norm.weight.shape[0])
        return [StateField("comp_kv", shape, torch.float32, "fixed"),
                StateField("comp_score", shape, torch.float32, "fixed", fill=float("-inf"))]

    def forward(self, x: torch.Tensor, numerics: Numerics, state: StateCache, slot: int, start: int) -> torch.Tensor:
        """x [n, D] of one sequence at positions start.. -> latents of the groups this chunk
        completes, [(start + n) // r - start // r, d], in the activation dtype."""
        r, n = self.ratio, x.shape[0]
        if r == 1:
            return self.norm(self.wkv(x, numerics))
        # fp32 results of x's values (Linear.forward's out_dtype: no fp32 copy of x first), pooled in fp32
        kv, score = same_input(x, numerics, self.kv_gate, self.wkv, self.wgate, out_dtype=torch.float32)
        kv_state, score_state = state.fixed(self.key, "comp_kv")[slot], state.fixed(self.key, "comp_score")[slot]
        size = kv_state.shape[0]
        first = start - start % r  # first position of the group in progress
        done = (start + n) // r * r  # positions before this are in completed groups
        # rows of positions first .. start+n-1: carried partial rows, then this chunk's
        held = torch.arange(first, start, device=x.device) % size
        new_kv, new_score = kv, score
        kv = torch.cat([kv_state[held], kv])
        score = torch.cat([score_state[held], score])
        # every new row goes to the ring (not only the unfinished group's): after a rewind the
        # group in progress may start inside this chunk
        keep = torch.arange(max(start, start + n - size), start + n, device=x.device)
        kv_state[keep % size], score_state[keep % size] = new_kv[keep - start], new_score[keep - start]
        complete = done - first
        if complete <= 0:
            return x.new_zeros(0, kv.shape[-1])
        kv, score = kv[:complete].unflatten(0, (-1, r)), score[:complete].unflatten(0, (-1, r))
        pooled = kernels.softmax_pool(kv, score)
        return self.norm(pooled.to(numerics.dtype))

    def decode(self, x: torch.Tensor, numerics: Numerics, state: StateCache,
               batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One token per sequence (model.decode): (the latent of each token's group [B, d],
        whether the token completes it [B], None at ratio 1 where every token does). A group
        not yet complete pools rows that are still stale; its latent is never stored."""
        r = self.ratio
        if r == 1:
            return self.norm(self.wkv(x, numerics)), None
        kv, score = same_input(x, numerics, self.kv_gate, self.wkv, self.wgate, out_dtype=torch.float32)
        # the rings as rows (a view: state fields are contiguous), each written and read through one index
        kv_rows, score_rows = (state.fixed(self.key, name).view(-1, kv.shape[-1]) for name in ("comp_kv", "comp_score"))
        at, group, complete = self.decode_slots(batch, state)
        return self.norm(kernels.ring_pool(kv, score, kv_rows, score_rows, at, group, numerics.dtype)), complete

    def decode_slots(self, batch: DecodeBatch, state: StateCache) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``group_slots`` of this compressor's ring, once per step for every source of its ratio and ring size."""
        r, size = self.ratio, state.fixed(self.key, "comp_kv").shape[1]
        return batch.shared(("group_slots", r, size), lambda: group_slots(batch, r, size))


def group_slots(batch: DecodeBatch, r: int, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of the compressor rings flattened to [slots x ``size``, d]: each token's [B] and its group's
    ``r`` positions' [B, r]; and whether the token completes its group [B]. The same for every source
    of one ratio, so a decode step computes them once (``DecodeBatch.shared``)."""
    at = batch.positions % size
    group = (group_start(batch, r).unsqueeze(1) + batch.arange(r)) % size
    base = batch.slots * size
    # the token completes its group iff it sits in the group's last slot (rings hold >= r slots)
    return base + at, base.unsqueeze(1) + group, group[:, -1] == at


def group_start(batch: DecodeBatch, r: int) -> torch.Tensor:
    """First position of each token's group [B] (``positions // r * r``), once per step per ratio."""
    return batch.shared(("group_start", r), lambda: batch.positions - batch.positions % r)
