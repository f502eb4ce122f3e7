"""What every V4 / V4.1 attention layer shares (model_spec.md 2.3, 2.4):

- the low-rank query path (wq_a -> q_norm -> wq_b, RoPE on the last dims),
- the per-layer window KV (wkv -> kv_norm -> RoPE -> cache quantization), kept in a
  ring of ``sliding_window`` slots between steps,
- the per-head sink, and the output path (inverse RoPE, grouped wo_a, wo_b).

The window-index layout reproduces the reference's for its two cases (a prefill
from position 0; a one-token decode), because ``sparse_attn``'s block-wise
online softmax makes results depend, at the last bf16 bit, on where valid
indices fall. Other chunks list the window ascending, padded at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels.invariance import narrow
from deepinfer_adapters.config import LayerSpec, ModelConfig
from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.layers.linear import Linear, MergedLinear, same_input
from deepinfer_adapters.model_impl.layers.norm import RMSNorm
from deepinfer_adapters.model_impl.layers.rope import RotaryTable
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl import overlap
from deepinfer_adapters.model_impl.overlap import side_by_side
from deepinfer_adapters.model_impl.state import StateCache, StateField


@dataclass(frozen=True)
class WindowSlots:
    """Where a decode step's positions sit in the window rings: the same for every layer
    (one ring size), so a step computes it once (``DecodeBatch.shared``)."""

    write_rows: torch.Tensor  # [B] row of the flattened rings each new token goes to (fields: window_slots' order)
    read_rows: torch.Tensor  # [B * W] rows of the flattened rings holding positions p - W + 1 .. p, oldest first
    valid: torch.Tensor  # [B, W] which of those positions exist (>= 0)
    attend_index: torch.Tensor  # [B, W] ``gathered_index(valid)``: a window-only layer's attention

    @classmethod
    def of(cls, batch: DecodeBatch, size: int, window: int) -> "WindowSlots":
        """``kernels.window_slots``: one launch on the GPU, where torch's integer ops were ~7 at the first layer
        that reads a window."""
        return cls(*kernels.window_slots(batch.positions, batch.slots, size, window))


def join_rows(outs: list[torch.Tensor]) -> torch.Tensor:
    """Per-sequence outputs of a forward (``ForwardBatch.rows`` order) as one tensor. One sequence (a prefill
    chunk): its output as it is -- a concatenation copies even one tensor (8192 tokens: ~0.26 ms a layer,
    H200 profile, session 15)."""
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def gathered_index(batch: DecodeBatch, valid: torch.Tensor) -> torch.Tensor:
    """Index rows [B, K] into per-sequence keys [B, K, d] flattened to [B * K, d]; -1 where
    ``valid`` [B, K] is False."""
    B, K = valid.shape
    return torch.where(valid, batch.arange(B * K).view(B, K), -1)


class AttentionBase(nn.Module):
    SAME_INPUT = {"q_kv": ("wq_a", "wkv")}  # merged at load (layers/linear.py)

    def __init__(self, cfg: ModelConfig, layer: LayerSpec, key: str) -> None:
        super().__init__()
        self.cfg, self.layer, self.key = cfg, layer, key
        D, H, d, block = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim, cfg.quant.fp8_block[1]
        self.n_heads, self.head_dim, self.rope_dim = H, d, cfg.qk_rope_head_dim
        self.window = cfg.sliding_window
        self.groups, self.o_rank = cfg.o_groups, cfg.o_lora_rank
        self.scale = d**-0.5
        self.wq_a = Linear(D, cfg.q_lora_rank, quantized=True, act_block=block)
        self.q_norm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
        self.wq_b = Linear(cfg.q_lora_rank, H * d, quantized=True, act_block=block)
        self.wkv = Linear(D, d, quantized=True, act_block=block)
        self.q_kv: MergedLinear | None = None
        self.kv_norm = RMSNorm(d, cfg.rms_norm_eps)
        # FP8 in the checkpoint, but the reference dequantizes it and runs a bf16 einsum
        self.wo_a = Linear(H * d // self.groups, self.groups * self.o_rank, quantized=False)
        self.wo_b = Linear(self.groups * self.o_rank, D, quantized=True, act_block=block)
        self.attn_sink = nn.Parameter(torch.empty(H), requires_grad=False)
        self.rope = RotaryTable(cfg, compressed=layer.compress_ratio > 0)

    # ------------------------------------------------------------------ state ----
    def window_fields(self, dtype: torch.dtype = torch.float32, rewind: int = 0) -> list[StateField]:
        """The ring of the last ``window`` positions' KV (the reference keeps it in the activation dtype).

        ``rewind`` extra slots let a sequence restart up to ``rewind`` positions before its last
        one (speculative decoding drops rejected drafts): the rows those drafts wrote then land
        in slots no restarted query reads (model_impl/state.py, "Rewinding")."""
        return [StateField("window_kv", (self.window + rewind, self.head_dim), dtype, "fixed")]

    # ------------------------------------------------------------ projections ----
    def normalize_q(self, q: torch.Tensor) -> torch.Tensor:
        """V4 normalises each head (weightless RMS); V4.1 does not."""
        return q

    def quantize_window_kv(self, kv: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        raise NotImplementedError

    def project_kv(self, x: torch.Tensor, freqs: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        return self.window_kv(self.wkv(x, numerics), freqs, numerics)

    def project_q_kv(self, x: torch.Tensor, freqs: torch.Tensor,
                     numerics: Numerics) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries and window KV of one input: (q [T, H, d], qr, kv), as ``queries`` and
        ``project_kv`` give them (wq_a and wkv as one GEMM where they were merged)."""
        q_low, kv = same_input(x, numerics, self.q_kv, self.wq_a, self.wkv)
        return *self.queries(q_low, freqs, numerics), self.window_kv(kv, freqs, numerics)

    def queries(self, q_low: torch.Tensor, freqs: torch.Tensor, numerics: Numerics) -> tuple[torch.Tensor, torch.Tensor]:
        """wq_a's output -> (RoPE'd queries [T, H, d], the normed low-rank query qr)."""
        qr = self.q_norm(q_low)
        return self.query_heads(qr, freqs, numerics), qr

    def query_heads(self, qr: torch.Tensor, freqs: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        """The normed low-rank query -> RoPE'd queries [T, H, d]."""
        q = self.normalize_q(self.wq_b(qr, numerics).unflatten(-1, (self.n_heads, self.head_dim)))
        return kernels.apply_rope(q, freqs, overwrite=True)  # q is this call's own

    def window_kv(self, kv: torch.Tensor, freqs: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        """wkv's output -> the window KV as the cache holds it."""
        kv = kernels.apply_rope(self.kv_norm(kv), freqs)
        return self.quantize_window_kv(kv, numerics) if numerics.kv_quant else kv

    def output(self, o: torch.Tensor, freqs: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        """o [T, H, d] -> [T, D]: inverse RoPE, per-group wo_a, then wo_b."""
        return self.project_out(kernels.apply_rope(o, freqs, inverse=True, overwrite=True), numerics)  # o used once

    def project_out(self, o: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        """The output rotated back already [T, H, d] -> [T, D]: per-group wo_a, then wo_b."""
        T = o.shape[0]
        grouped = o.reshape(T, self.groups, -1)
        if self.wo_a.block is not None:  # native FP8 weight
            z = kernels.fp8_grouped_linear(grouped, self.wo_a.weight, self.wo_a.scale, self.wo_a.block)
        else:
            wo_a = self.wo_a.weight.view(self.groups, self.o_rank, -1)
            z = torch.einsum("tgd,grd->tgr", narrow(grouped), narrow(wo_a, o.dtype)).to(o.dtype)
        return self.wo_b(z.flatten(1), numerics)

    # ----------------------------------------------------------------- window ----
    def window_keys(self, state: StateCache, slot: int, start: int, kv_new: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Keys for the window of every new query: earlier ring entries + this chunk's KV.

        Returns (keys [m + n, d], position of keys[0]) and stores the newest positions in
        the ring (slot of position p is p % ring size; the size is ``window`` + rewind slots).
        """
        W, n = self.window, kv_new.shape[0]
        ring = state.fixed(self.key, "window_kv")[slot]
        size = ring.shape[0]
        base = max(0, start - (W - 1))
        old_pos = torch.arange(base, start, device=ring.device)
        keys = torch.cat([ring[old_pos % size].to(kv_new.dtype), kv_new]) if start > 0 else kv_new
        keep = torch.arange(max(start, start + n - size), start + n, device=ring.device)
        ring[keep % size] = kv_new[keep - start].to(ring.dtype)
        return keys, base

    def window_index(self, start: int, n: int, base: int, lo: int = 0,
                     device: torch.device | str = "cpu") -> torch.Tensor:
        """[n, K] indices into ``window_keys``' output; -1 = nothing. Built on ``device`` (a
        prefill's [n, W] int64 index copied from the host cost ~1 ms a layer on the H200).

        ``lo`` narrows every window to positions >= lo (bounded replay's rectangle)."""
        W = self.window
        p = torch.arange(start, start + n, device=device).unsqueeze(1)
        if start == 0:  # reference prefill: K = min(n, W), row p lists max(0, p-W+1) + j
            pos = (p - W + 1).clamp(min=0) + torch.arange(min(n, W), device=device)
            pos = torch.where(pos > p, -1, pos)
        elif n == 1:  # reference decode: the ring oldest first; unfilled slots (-1) lead
            pos = p - W + 1 + torch.arange(W, device=device)
            pos = torch.where(pos < 0, -1, pos)
        else:  # continued chunk: ascending, padded at the end
            pos = (p - W + 1).clamp(min=0) + torch.arange(W, device=device)
            pos = torch.where(pos > p, -1, pos)
        return torch.where(pos >= max(lo, 0), pos - base, -1)

    def chunk_window(self, state: StateCache, batch: ForwardBatch, i: int, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Window keys and index rows for sequence i of a step.

        Under compact bounded replay the batch lacks the first ``clip`` rows of the chunk:
        they are stood in for by zeros (never visible: they lie below ``lo``) so keys and
        index rows keep exactly the layout of the full chunk."""
        clip, start = batch.clip(i), batch.start_pos[i]
        if clip:
            kv = torch.cat([kv.new_zeros(clip, kv.shape[1]), kv])
        keys, base = self.window_keys(state, batch.slots[i], start, kv)
        idx = self.window_index(start, kv.shape[0], base, batch.lo(i), device=kv.device)[clip:]
        return keys, idx

    def project(self, x: torch.Tensor, numerics: Numerics) -> tuple[torch.Tensor, torch.Tensor]:
        """A decode step's first GEMV: (wq_a x, wkv x), one GEMM where they were merged."""
        return same_input(x, numerics, self.q_kv, self.wq_a, self.wkv)

    def decode_step(self, x: torch.Tensor, batch: DecodeBatch, numerics: Numerics,
                    keys_and_index: Callable[[torch.Tensor, Callable[[], torch.Tensor], torch.Tensor],
                                             tuple[torch.Tensor, torch.Tensor]],
                    projected: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """One decode step's attention (``model.decode``): wq_a + wkv (``project``; ``projected``: its
        output where the caller issued it already), then the queries (wq_b, one large GEMV) next to
        ``keys_and_index(qr, window kv, freqs)`` -> (keys [B, K, d], their ``gathered_index``): the window
        ring, compressor and indexer, dozens of small kernels that need only qr and the KV (overlap.py),
        then attention and the output. The window KV comes as a callable: issued where the keys' part
        needs it, not ahead of its other work."""
        freqs = self.decode_freqs(batch)
        q_low, kv = projected if projected is not None else self.project(x, numerics)
        qr = self.q_norm(q_low)
        q, (keys, index) = side_by_side(
            x, lambda: self.query_heads(qr, freqs, numerics),
            lambda: keys_and_index(qr, lambda: self.window_kv(kv, freqs, numerics), freqs), when=overlap.DECODE_KEYS)
        return self.project_out(self.attend_gathered(q, keys, index, freqs, numerics), numerics)

    def decode_freqs(self, batch: DecodeBatch) -> torch.Tensor:
        """RoPE rows of a decode step's positions, looked up once per step per table."""
        return batch.shared(("rope", self.rope.kind), lambda: self.rope.lookup(batch.positions, batch.max_len))

    def decode_window(self, state: StateCache, batch: DecodeBatch, kv: torch.Tensor) -> tuple[torch.Tensor, "WindowSlots"]:
        """Batched decode: store each sequence's new KV in its ring, then return its window
        keys [B, W, d] (positions p - W + 1 .. p, oldest first, as ``window_index``'s
        decode layout) and the step's ``WindowSlots`` (which of those keys exist)."""
        ring = state.fixed(self.key, "window_kv")
        size = ring.shape[1]
        slots = batch.shared(("window_slots", size, self.window), lambda: WindowSlots.of(batch, size, self.window))
        # one index over the flattened ring (a view: state fields are contiguous), not two index tensors (torch's
        # per-element index kernel: H200, 128 sequences, 50 -> 17 us for the read, benchmarks/bench_gather.py)
        keys = kernels.window_store_gather(ring.flatten(0, 1), slots.write_rows, slots.read_rows, kv)
        return keys.view(*slots.valid.shape, *ring.shape[2:]), slots

    def attend_gathered(self, q: torch.Tensor, keys: torch.Tensor, index: torch.Tensor, freqs: torch.Tensor,
                        numerics: Numerics) -> torch.Tensor:
        """q [B, H, d] over per-sequence keys [B, K, d] (``gathered_index`` of which exist), the output rotated
        back (inverse RoPE): the same index layout as the per-sequence path, so the same blocks of 64 and the same
        result. One op, so that a backend may rotate where it writes the output (split-K's merge)."""
        return kernels.sparse_attn_inverse_rope(q, keys.flatten(0, 1), self.attn_sink, index, self.scale, freqs,
                                                probs_bf16=numerics.attn_probs_bf16)

    def attend(self, q: torch.Tensor, keys: torch.Tensor, idx: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        return kernels.sparse_attn(q, keys, self.attn_sink, idx, self.scale, probs_bf16=numerics.attn_probs_bf16)
