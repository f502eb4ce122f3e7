"""V4 attention (model_spec.md 2.3) for one layer of any role: window-only (ratio 0),
"CSA" (ratio 4: overlap compressor + indexer top-k) or "HCA" (ratio 128: every
visible compressed row).

Each sequence of the flattened batch attends to
``[its window keys (ring + this chunk) | its compressed rows so far]`` with indices:
the window of each query, then its selected compressed rows (offset by the window
length). This is the reference's layout at prefill (window of all S tokens, offset
S) and at decode (128 ring slots, offset 128), generalised to any chunk.

V4 specifics on top of AttentionBase: the weightless per-head RMS norm of q, and the
FP8 round trip of the non-rope KV dims in blocks of 64 (RoPE dims stay exact).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.config import AttnRole, LayerSpec, ModelConfig
from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.layers.attention_common import AttentionBase, WindowSlots, gathered_index, join_rows
from deepinfer_adapters.model_impl.layers.compressor_v4 import CompressorV4, quantize_kv_v4, store_completed
from deepinfer_adapters.model_impl.layers.indexer_v4 import IndexerV4
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.state import StateCache, StateField, shared_row_address, step_row_address


class AttentionV4(AttentionBase):
    def __init__(self, cfg: ModelConfig, layer: LayerSpec, key: str) -> None:
        super().__init__(cfg, layer, key)
        self.eps = cfg.rms_norm_eps
        self.ratio = layer.compress_ratio
        self.compressor = None
        self.indexer = None
        if self.ratio:
            self.compressor = CompressorV4(cfg, self.ratio, self.head_dim, key, "compressor", rotate=False)
        if layer.attn is AttnRole.CSA:
            self.indexer = IndexerV4(cfg, self.ratio, key)

    def state_fields(self, numerics: Numerics) -> list[StateField]:
        """Ring, compressed rows and index keys in the activation dtype (as the reference
        caches them); the compressors' partial blocks in fp32."""
        fields = self.window_fields(numerics.dtype)
        if self.compressor is not None:
            fields.append(StateField("compressed_kv", (self.head_dim,), numerics.dtype, "rows", ratio=self.ratio))
            fields += self.compressor.state_fields()
        if self.indexer is not None:
            fields += self.indexer.state_fields(numerics)
        return fields

    def normalize_q(self, q: torch.Tensor) -> torch.Tensor:
        # In q's own dtype, as the reference's in-place ``q *= rsqrt(mean(q^2) + eps)``.
        return kernels.rms_norm_in_dtype(q, self.eps)

    def quantize_window_kv(self, kv: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        return quantize_kv_v4(kv, self.rope_dim)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state: StateCache, numerics: Numerics) -> torch.Tensor:
        """x [T, D] (attn_norm output of every new token) -> [T, D]."""
        freqs = self.rope.lookup(batch.positions, max(batch.end_pos(i) for i in range(batch.num_seqs)))
        q, qr, kv = self.project_q_kv(x, freqs, numerics)
        iq = self.indexer.query(qr, freqs, numerics) if self.indexer is not None else None
        outs = []
        for i in range(batch.num_seqs):
            rows, slot, start = batch.rows(i), batch.slots[i], batch.start_pos[i]
            outs.append(self.attend_seq(x[rows], q[rows], kv[rows], None if iq is None else iq[rows],
                                        state, slot, start, numerics))
        return self.output(join_rows(outs), freqs, numerics)

    def decode(self, x: torch.Tensor, batch: DecodeBatch, state: StateCache, numerics: Numerics,
               projected: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """``forward`` for one new token per sequence, batched on the device (model.decode):
        the window (W keys, oldest first), then the compressed rows it picks."""
        return self.decode_step(x, batch, numerics,
                                lambda qr, window_kv, freqs: self._decode_keys(x, qr, window_kv, freqs, batch, state,
                                                                               numerics),
                                projected)

    def _decode_keys(self, x: torch.Tensor, qr: torch.Tensor, window_kv: Callable[[], torch.Tensor],
                     freqs: torch.Tensor, batch: DecodeBatch, state: StateCache,
                     numerics: Numerics) -> tuple[torch.Tensor, torch.Tensor]:
        """A decode step's keys [B, K, d] and attention index: the window, then (compressed
        layers) the compressed rows picked, after storing a completed row."""
        keys, window = self.decode_window(state, batch, window_kv())
        if self.compressor is None:
            return keys, window.attend_index
        entries, complete = self.compressor.decode(x, numerics, state, batch)
        store_completed(state, self.key, "compressed_kv", batch, self.ratio, entries, complete)
        if self.indexer is not None:
            picked = self.indexer.decode(x, self.indexer.query(qr, freqs, numerics), numerics, state, batch)
            addr = step_row_address(state, batch, self.key, "compressed_kv", picked)
            index = gathered_index(batch, torch.cat([window.valid, picked >= 0], 1))
        else:
            addr, index = self._visible_rows(batch, state, window)
        rows = state.row_pool(self.key, "compressed_kv")[addr].to(keys.dtype)
        return torch.cat([keys, rows], 1), index

    def _visible_rows(self, batch: DecodeBatch, state: StateCache,
                      window: WindowSlots) -> tuple[torch.Tensor, torch.Tensor]:
        """HCA decode: the addresses of rows 0 .. max_len // r - 1 and the attention index over the
        window keys followed by them (-1 from the first row a sequence cannot see). They depend on
        the step only: built once per step for every HCA layer."""
        r = self.ratio
        n = min(batch.max_len // r, state.row_capacity(self.key, "compressed_kv"))

        def visible_rows() -> torch.Tensor:
            rows = batch.arange(n).expand(batch.num_seqs, n)
            return torch.where(rows < batch.visible_rows(r).unsqueeze(1), rows, -1)

        picked = batch.shared(("hca_rows", r, n), visible_rows)
        addr = shared_row_address(state, batch, self.key, "compressed_kv", ("hca_rows", r, n), picked)
        index = batch.shared(("hca_index", r, n, self.window),
                             lambda: gathered_index(batch, torch.cat([window.valid, picked >= 0], 1)))
        return addr, index

    def attend_seq(self, x: torch.Tensor, q: torch.Tensor, kv: torch.Tensor, iq: torch.Tensor | None,
                   state: StateCache, slot: int, start: int, numerics: Numerics) -> torch.Tensor:
        n = x.shape[0]
        keys, base = self.window_keys(state, slot, start, kv)
        idx = self.window_index(start, n, base, device=x.device)
        if self.compressor is not None:
            comp = self.compressed_rows(x, state, slot, start, numerics)
            if self.indexer is not None:
                picked = self.indexer(x, iq, numerics, state, slot, start)
            else:  # HCA: every compressed row the query can see
                visible = (torch.arange(start, start + n, device=x.device) + 1) // self.ratio
                all_rows = torch.arange(comp.shape[0], device=x.device).expand(n, -1)
                picked = torch.where(all_rows < visible.unsqueeze(1), all_rows, -1)
            picked = torch.where(picked >= 0, picked + keys.shape[0], -1)
            keys = torch.cat([keys, comp.to(keys.dtype)])
            idx = torch.cat([idx, picked], dim=1)
        return self.attend(q, keys, idx, numerics)

    def compressed_rows(self, x: torch.Tensor, state: StateCache, slot: int, start: int,
                        numerics: Numerics) -> torch.Tensor:
        """Run the compressor over the chunk, store completed entries, return every entry so far."""
        assert self.compressor is not None
        new = self.compressor(x, numerics, state, slot, start)
        if new.shape[0]:
            state.write_rows(self.key, "compressed_kv", slot, start // self.ratio, new)
        n_entries = (start + x.shape[0]) // self.ratio
        return state.read_rows(self.key, "compressed_kv", slot, 0, n_entries).to(numerics.dtype)
