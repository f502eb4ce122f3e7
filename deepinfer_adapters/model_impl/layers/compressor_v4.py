"""V4 compressor (model_spec.md 2.3): gated pooling of ``ratio`` tokens into one KV row.

Per token ``k = wkv x`` and ``s = wgate x + ape[p mod r]`` (fp32, weights stored bf16).
- ratio 128 ("HCA", no overlap): entry j = sum over block j of softmax_t(s) * k, per channel.
- ratio 4 ("CSA", overlap): k and s are twice as wide; entry j pools 2r rows, the
  previous block's first half (A) and block j's second half (B). Before block 0 the
  previous rows are k = 0, s = -inf.
The pooled entry goes through ``norm`` and RoPE at position j*r, then the cache
round trip: FP8 of the non-rope dims for KV, or (indexer keys) a Hadamard rotation
and FP4.

Chunked prefill and decode carry two things between steps (fixed state fields):
the rows of the block in progress and, with overlap, the whole previous block.
Layout of ``{name}_kv`` / ``{name}_score`` [c*r, c*width]: rows 0..r-1 hold the
previous complete block (overlap only), rows off+(p mod r) the block in progress
(off = r with overlap, else 0), as in the reference's kv_state/score_state.
``decode`` (model.decode, one token per sequence) updates the same layout, with masks
where ``forward`` branches on whether a token completes its block.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from deepinfer_adapters import kernels
from deepinfer_adapters.config import ModelConfig
from deepinfer_adapters.model_impl.batch import DecodeBatch
from deepinfer_adapters.model_impl.layers.linear import Linear, MergedLinear, same_input
from deepinfer_adapters.model_impl.layers.norm import RMSNorm
from deepinfer_adapters.model_impl.layers.rope import RotaryTable
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.state import StateCache, StateField, shared_row_address

# Block of the V4 FP8 round trip on cached KV (non-rope dims) and of the FP4 round trip
# on index keys/queries: constants of the official code, not config fields.
KV_FP8_BLOCK = 64
INDEX_FP4_BLOCK = 32


def quantize_kv_v4(kv: torch.Tensor, rope_dim: int) -> torch.Tensor:
    """FP8 round trip of the first ``d - rope_dim`` dims in blocks of 64; RoPE dims untouched.

    A trailing partial block (only in shrunken test configs, e.g. 48 non-rope dims) is
    quantized as one block of its own: zero padding leaves its amax unchanged.
    """
    nope = kv.shape[-1] - rope_dim
    pad = -nope % KV_FP8_BLOCK
    head = kv[..., :nope]
    if pad:
        head = torch.nn.functional.pad(head, (0, pad))
    head = kernels.fp8_roundtrip(head, KV_FP8_BLOCK)[..., :nope]
    return torch.cat([head, kv[..., nope:]], dim=-1)


@dataclass(frozen=True)
class BlockSlots:
    """Where a decode step's tokens sit in a compressor's blocks: the same for every compressor of
    one ratio, so a step computes it once (``DecodeBatch.shared``)."""

    at: torch.Tensor  # [B] p mod r: the token's place in its block
    complete: torch.Tensor  # [B] whether the token completes its block
    freqs: torch.Tensor  # RoPE of each token's entry, at its block's first position

    @classmethod
    def of(cls, batch: DecodeBatch, r: int, rope: RotaryTable) -> "BlockSlots":
        pos = batch.positions
        at = pos % r
        return cls(at=at, complete=at == r - 1, freqs=rope.lookup(pos - at, batch.max_len))


class CompressorV4(nn.Module):
    SAME_INPUT = {"kv_gate": ("wkv", "wgate")}  # merged at load (layers/linear.py)

    def __init__(self, cfg: ModelConfig, ratio: int, width: int, key: str, name: str, *, rotate: bool) -> None:
        super().__init__()
        self.ratio, self.width, self.key, self.name, self.rotate = ratio, width, key, name, rotate
        self.overlap = ratio == 4  # the reference ties overlap to ratio 4, not to a config flag
        c = 2 if self.overlap else 1
        self.ape = nn.Parameter(torch.empty(ratio, c * width), requires_grad=False)
        self.wkv = Linear(cfg.hidden_size, c * width, quantized=False)
        self.wgate = Linear(cfg.hidden_size, c * width, quantized=False)
        self.kv_gate: MergedLinear | None = None
        self.norm = RMSNorm(width, cfg.rms_norm_eps)
        self.rope_dim = cfg.qk_rope_head_dim
        self.rope = RotaryTable(cfg, compressed=True)

    def state_fields(self) -> list[StateField]:
        c = 2 if self.overlap else 1
        shape = (c * self.ratio, c * self.width)
        return [StateField(f"{self.name}_kv", shape, torch.float32, "fixed"),
                StateField(f"{self.name}_score", shape, torch.float32, "fixed", fill=float("-inf"))]

    def forward(self, x: torch.Tensor, numerics: Numerics, state: StateCache, slot: int, start: int) -> torch.Tensor:
        """x [n, D] of one sequence at positions start.. -> the entries of the blocks this chunk
        completes, [(start + n) // r - start // r, width], ready for the cache."""
        r, n, w = self.ratio, x.shape[0], self.width
        pos = torch.arange(start, start + n, device=x.device)
        # the reference pools in fp32: fp32 results of x's values (Linear.forward's out_dtype: no fp32 copy of x)
        kv, score = same_input(x, numerics, self.kv_gate, self.wkv, self.wgate, out_dtype=torch.float32)
        score = score + self.ape[pos % r]
        kv_state = state.fixed(self.key, f"{self.name}_kv")[slot]
        score_state = state.fixed(self.key, f"{self.name}_score")[slot]
        off = r if self.overlap else 0
        first = start - start % r  # first position of the block in progress
        held = torch.arange(first, start, device=x.device) % r + off
        kv = torch.cat([kv_state[held], kv])  # rows of positions first .. start+n-1
        score = torch.cat([score_state[held], score])
        complete = (start + n) // r * r - first
        n_blocks = complete // r
        pooled = None
        if n_blocks:
            bkv, bscore = kv[:complete].unflatten(0, (n_blocks, r)), score[:complete].unflatten(0, (n_blocks, r))
            if self.overlap:
                prev_kv = torch.cat([kv_state[None, :r], bkv[:-1]])
                prev_score = torch.cat([score_state[None, :r], bscore[:-1]])
                bkv = torch.cat([prev_kv[..., :w], bkv[..., w:]], dim=1)
                bscore = torch.cat([prev_score[..., :w], bscore[..., w:]], dim=1)
                kv_state[:r] = kv[complete - r : complete]
                score_state[:r] = score[complete - r : complete]
            pooled = kernels.softmax_pool(bkv, bscore)
        tail = torch.arange(first + complete, start + n, device=x.device) % r + off
        kv_state[tail] = kv[complete:]
        score_state[tail] = score[complete:]
        if pooled is None:
            return x.new_zeros(0, w)
        return self.finish(pooled.to(numerics.dtype), first // r, numerics)

    def decode(self, x: torch.Tensor, numerics: Numerics, state: StateCache,
               batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward`` for one token per sequence (model.decode), with masks for the host's
        branches: (the entry of each token's block [B, width], ready for the cache, and
        whether the token completes that block [B]). An entry of a block not yet complete
        pools stale rows and must not be stored (``store_completed``)."""
        r = self.ratio
        place = batch.shared(("block_slots", r, self.rope.kind), lambda: BlockSlots.of(batch, r, self.rope))
        kv, score = same_input(x, numerics, self.kv_gate, self.wkv, self.wgate, out_dtype=torch.float32)
        # the token's block (with overlap the previous one's first half too) and the state
        # updated, in one kernel on the GPU (reference.compressor_v4_gather: ~20 torch ops)
        bkv, bscore = kernels.compressor_v4_gather(kv, score, self.ape, state.fixed(self.key, f"{self.name}_kv"),
                                                   state.fixed(self.key, f"{self.name}_score"), batch.slots,
                                                   place.at, r, self.overlap)
        pooled = kernels.softmax_pool(bkv, bscore)
        return self.cache_form(pooled.to(numerics.dtype), place.freqs, numerics), place.complete

    def finish(self, pooled: torch.Tensor, first_entry: int, numerics: Numerics) -> torch.Tensor:
        """norm -> RoPE at entry j's first position j*r -> cache round trip."""
        entries = torch.arange(first_entry, first_entry + pooled.shape[0], device=pooled.device)
        end = (first_entry + pooled.shape[0]) * self.ratio  # past the last entry's position
        return self.cache_form(pooled, self.rope.lookup(entries * self.ratio, end), numerics)

    def cache_form(self, pooled: torch.Tensor, freqs: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        out = kernels.apply_rope(self.norm(pooled), freqs)
        if self.rotate:  # indexer keys: Hadamard always (it is part of the math), FP4 when simulated
            out = kernels.hadamard(out)
            return kernels.fp4_roundtrip_e8m0(out, INDEX_FP4_BLOCK) if numerics.kv_quant else out
        return quantize_kv_v4(out, self.rope_dim) if numerics.kv_quant else out


def store_completed(state: StateCache, key: str, name: str, batch: DecodeBatch, ratio: int,
                    entries: torch.Tensor, complete: torch.Tensor) -> None:
    """Batched ``write_rows`` of a decode step: entry b goes to row p_b // ratio of its slot
    where ``complete[b]``; the other sequences rewrite what is there (no host branch)."""
    pool = state.row_pool(key, name)
    row = batch.shared(("compressed_row", ratio), lambda: batch.positions // ratio)
    addr = shared_row_address(state, batch, key, name, ("compressed_row", ratio), row.unsqueeze(1)).squeeze(1)
    pool[addr] = torch.where(complete.unsqueeze(1), entries.to(pool.dtype), pool[addr])
