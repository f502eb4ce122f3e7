"""V4.1 CSA2 attention (model_spec.md 2.4): the window plus up to ``index_topk``
compressed rows, with compressed KV produced by a few source layers and shared.

Per layer role:
- window: sliding window only;
- KV+index source (and the candidate source): compress, publish compressed KV
  and index keys, run the indexer;
- reindex: own indexer query over the latest source's keys, inside the pool;
- reuse: the latest index source's selections over the latest source's rows.

Compressed rows live in the source layer's state (rows fields, one row per
``ratio`` tokens); selections pass down the stack in ``ForwardBatch.scratch``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from deepinfer_adapters.config import LayerSpec, ModelConfig
from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.layers.attention_common import AttentionBase, join_rows
from deepinfer_adapters.model_impl.layers.compressor_v41 import CompressorV41, group_start
from deepinfer_adapters.model_impl.layers.indexer_v41 import IndexerV41
from deepinfer_adapters.model_impl import overlap
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.overlap import aside, join_all
from deepinfer_adapters.model_impl.state import StateCache, StateField, shared_row_address, step_row_blocks
from deepinfer_adapters.kernels.pooled_rows import PooledRows
from deepinfer_adapters import kernels

WINDOW_FP8_BLOCK = 32  # the whole post-RoPE window vector, blocks of 32
COMPRESSED_FP4_GROUP = 16  # stored compressed rows: FP4 with e4m3 scales per 16
# the indexer's scores take each query's visible row count, so a backend skips the keys past it (the same
# selections; prefill: index scores 7.25 -> 3.80 ms at 8192 tokens on the H200, session 16; decode since session
# 21: no masking launch). False: every key scored, then masked (an A/B switch of benchmarks/bench_real_width.py)
CAUSAL_INDEX_SCORES = True


@dataclass
class EarlyDecode:
    """What ``AttentionV41.decode_early`` issued: the projection's output, the publishing's and the indexer head
    weights' joins."""

    projected: tuple[torch.Tensor, torch.Tensor] | None = None
    publish: Callable[[], Callable[[], None] | None] | None = None
    weights: Callable[[], torch.Tensor] | None = None


class AttentionV41(AttentionBase):
    def __init__(self, cfg: ModelConfig, layer: LayerSpec, key: str) -> None:
        super().__init__(cfg, layer, key)
        self.ratio = layer.compress_ratio
        self.is_source = layer.is_kv_source
        self.source_key = f"layers.{layer.kv_source}" if layer.kv_source is not None else None
        self.compressor = CompressorV41(cfg, self.ratio, key) if self.is_source else None
        self.indexer = IndexerV41(cfg, layer) if (self.is_source or layer.has_indexer_query) else None
        self.runs_indexer = layer.has_indexer_query

    def state_fields(self, numerics: Numerics, rewind: int = 0) -> list[StateField]:
        dt = numerics.dtype
        fields = self.window_fields(dt, rewind)
        if self.is_source:
            fields += [StateField("compressed_kv", (self.head_dim,), dt, "rows", ratio=self.ratio),
                       StateField("index_k", (self.cfg.index_head_dim,), dt, "rows", ratio=self.ratio)]
            fields += self.compressor.state_fields(rewind)
        return fields

    def quantize_window_kv(self, kv: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        return kernels.fp8_roundtrip(kv, WINDOW_FP8_BLOCK)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state: StateCache, numerics: Numerics) -> torch.Tensor:
        freqs = self.rope.lookup(batch.positions, max(batch.end_pos(i) for i in range(batch.num_seqs)))
        q, qr, kv = self.project_q_kv(x, freqs, numerics)
        outs = []
        for i in range(batch.num_seqs):
            rows = batch.rows(i)
            keys, idx = self.chunk_window(state, batch, i, kv[rows])
            if self.ratio:
                compressed, sel = self._compressed(x[rows], qr[rows], freqs[rows], batch, i, state, numerics)
                idx = torch.cat([idx, torch.where(sel >= 0, sel + keys.shape[0], -1)], dim=1)
                keys = torch.cat([keys, compressed])
            outs.append(self.attend(q[rows], keys, idx, numerics))
        return self.output(join_rows(outs), freqs, numerics)

    def decode_early(self, x: torch.Tensor, batch: DecodeBatch, state: StateCache,
                     numerics: Numerics) -> EarlyDecode:
        """A decode step's first work, issued by the block before its HC mixes fork: a KV source's publishing
        (compressor, index keys, compressed KV rows; it needs only ``x``) started on a stream of its own
        where ``overlap.PUBLISH_EARLY`` -- ahead of the projection, so it waits for nothing but ``x`` -- and
        the indexer's head weights (also from ``x`` alone) where ``overlap.INDEX_WEIGHTS_EARLY``, then the
        projection where ``overlap.PROJECT_BEFORE_MIXES``. ``decode`` takes the result."""
        publish = weights = None
        if self.is_source and overlap.PUBLISH_EARLY:
            publish = aside(x, lambda: self._publish_decode(x, batch, state, numerics,
                                                            aside_kv=overlap.KEYS_PARTS_ASIDE))
        if self.runs_indexer and overlap.INDEX_WEIGHTS_EARLY and self._index_rows(batch, state):
            weights = aside(x, lambda: self.indexer.head_weights(x, numerics))
        return EarlyDecode(self.project(x, numerics) if overlap.PROJECT_BEFORE_MIXES else None, publish, weights)

    def decode(self, x: torch.Tensor, batch: DecodeBatch, state: StateCache, numerics: Numerics,
               early: EarlyDecode | None = None) -> torch.Tensor:
        """``forward`` for one new token per sequence, batched on the device (model.decode); ``early``:
        ``decode_early``'s result where the block issued it."""
        early = early or EarlyDecode()
        return self.decode_step(x, batch, numerics,
                                lambda qr, window_kv, freqs: self._decode_keys(x, qr, window_kv, freqs, batch, state,
                                                                               numerics, early),
                                early.projected)

    def _decode_keys(self, x: torch.Tensor, qr: torch.Tensor, window_kv: Callable[[], torch.Tensor],
                     freqs: torch.Tensor, batch: DecodeBatch, state: StateCache, numerics: Numerics,
                     early: EarlyDecode) -> tuple[torch.Tensor, torch.Tensor]:
        """A decode step's keys [B, K, d] and attention index: the window, then (compressed
        layers) the selected rows, after publishing this layer's rows and selecting. ``early``: what
        ``decode_early`` started (the publishing, the head weights), joined here."""
        if not self.ratio:
            keys, window = self.decode_window(state, batch, window_kv())
            return keys, window.attend_index
        queries = None
        if self.runs_indexer and self._index_rows(batch, state):
            # the indexer's query side needs no keys: on a stream of its own next to the window, the
            # compressor and the publishing (overlap.py), joined where the scores need it
            query_side = x.shape[0] >= overlap.INDEX_QUERIES_ASIDE_FROM
            if early.weights is None:
                queries = aside(x, lambda: self.indexer.queries(x, qr, freqs, numerics), when=query_side)
            else:
                index_queries = aside(x, lambda: self.indexer.index_queries(qr, freqs, numerics), when=query_side)

                def queries() -> tuple[torch.Tensor, torch.Tensor]:  # both parts joined where the scores read them
                    return index_queries(), early.weights()
        # the window ring, and a source's compressed KV rows, are not read before the selected rows: next to the
        # publishing and the selection on streams of their own where ``overlap.KEYS_PARTS_ASIDE``
        parts = overlap.KEYS_PARTS_ASIDE
        window_part = aside(x, lambda: self.decode_window(state, batch, window_kv()), when=parts)
        compressed_part = None
        try:
            if early.publish is not None:
                compressed_part = early.publish()
            elif self.is_source:
                compressed_part = self._publish_decode(x, batch, state, numerics, aside_kv=parts)

            @functools.cache  # once, where KEYS_PARTS_JOINED puts it (a later call returns the same)
            def join_parts() -> tuple:  # the window's and the compressed KV rows' parts, and the block table (ahead)
                if compressed_part is not None:
                    compressed_part()
                return window_part(), step_row_blocks(state, batch, self.source_key, "compressed_kv")

            # joined where overlap.KEYS_PARTS_JOINED says: the kernel after the joins waits on the parts' streams
            # too, and a graph runs such a kernel on one of theirs, ~2 us after the last of them ends, instead of
            # launching it under PDL behind the kernel before it on its own stream
            where = overlap.KEYS_PARTS_JOINED if self.runs_indexer else "after_topk"
            if where == "before_scores":
                join_parts()
            if self.runs_indexer:
                batch.scratch["selections"] = self._select_decode(x, qr, freqs, batch, state, numerics, queries,
                                                                  join_parts if where == "before_topk" else None)
            (keys, window), (table, rows_a_block) = join_parts()
            picked, visible = batch.scratch["selections"]
            selected = kernels.selected_keys(keys, window.valid, state.row_pool(self.source_key, "compressed_kv"),
                                             picked, visible, table, rows_a_block,
                                             state.row_capacity(self.source_key, "compressed_kv"))
        except BaseException:  # no side stream left open
            join_all(early.publish, compressed_part, window_part, queries)
            raise
        if overlap.REJOIN_JOINED:
            join_all(early.publish, compressed_part, window_part, queries)
        return selected

    def decode_prelude(self, batch: DecodeBatch, state: StateCache) -> None:
        """The step's shared index tensors this layer's decode reads that no layer before the compressed ones
        does (``DecodeBatch.shared_ahead``, ``overlap.DECODE_PRELUDE``): the compressor ring's rows and the groups'
        RoPE rows (ratio > 1: a ratio-1 compressor keeps no ring, and its groups' RoPE rows are the step's own, which
        the first layer reads), the groups' row addresses, the visible rows and the block tables."""
        if not self.ratio:
            return
        if self.is_source:
            if self.ratio > 1:  # a ratio-1 compressor keeps no ring
                self.compressor.decode_slots(batch, state)
                self._group_rope(batch)
            self._group_row_address(batch, state)
        if self.runs_indexer:
            batch.visible_rows(self.ratio)
            step_row_blocks(state, batch, self.source_key, "index_k")
        step_row_blocks(state, batch, self.source_key, "compressed_kv")

    def _index_rows(self, batch: DecodeBatch, state: StateCache) -> int:
        """How many compressed rows a decode step's indexer scans: the first max_len // ratio."""
        return min(batch.max_len // self.ratio, state.row_capacity(self.source_key, "index_k"))

    def _select_decode(self, x: torch.Tensor, qr: torch.Tensor, freqs: torch.Tensor, batch: DecodeBatch,
                       state: StateCache, numerics: Numerics,
                       queries: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None,
                       before_pick: Callable[[], object] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, k] picked compressed rows (ascending) over the first max_len // ratio rows of each sequence's
        index keys, and [B] how many rows each sequence has seen: ``selected_keys`` masks the picks at or past
        that (which ``select`` gives as -1) and finds the picked rows in the pool itself, from the cache's block
        table (``StateCache.row_blocks``) -- no launches between the top-k and it. The reuse layers after an index
        layer read the same rows of the same source, which no layer in between writes.
        ``queries``: joins the indexer's query side where it was started already; ``before_pick``: called between
        the scores and the top-k."""
        n_rows = self._index_rows(batch, state)
        B = batch.num_seqs
        visible = batch.visible_rows(self.ratio)
        if n_rows == 0:
            return torch.empty(B, 0, dtype=torch.long, device=x.device), visible
        # a reindex layer scans the keys its source just published, read in place as its source's are
        keys = self._index_keys_decode(batch, state, n_rows)
        causal = visible if CAUSAL_INDEX_SCORES else None
        if queries is None:
            scores = self.indexer.scores(x, qr, freqs, keys, numerics, causal)
        else:
            scores = self.indexer.scores_of(*queries(), keys, causal)
        if before_pick is not None:
            before_pick()
        return self.indexer.pick(scores, visible, batch.scratch.setdefault("pool", {}), numerics,
                                 masked=CAUSAL_INDEX_SCORES), visible

    def _index_keys_decode(self, batch: DecodeBatch, state: StateCache, n_rows: int) -> PooledRows:
        """Rows 0 .. n_rows - 1 of every sequence's index keys [B, n_rows, index_head_dim], where they are in the
        cache (the scores read them through its block table: no gather first; the field is in the activation
        dtype, ``state_fields``)."""
        table, rows_a_block = step_row_blocks(state, batch, self.source_key, "index_k")
        return PooledRows(state.row_pool(self.source_key, "index_k"), table, rows_a_block, n_rows)

    def _publish_decode(self, x: torch.Tensor, batch: DecodeBatch, state: StateCache, numerics: Numerics,
                        aside_kv: bool = False) -> Callable[[], None] | None:
        """``_publish`` for one token per sequence: every sequence computes its group's row;
        only those whose token completes the group store it (the others rewrite what is there).
        ``aside_kv``: the compressed KV rows are computed and stored on a side stream (overlap.py); returns its
        join, to call before they are read."""
        latent, complete = self.compressor.decode(x, numerics, state, batch)
        freqs = self._group_rope(batch)
        addr = self._group_row_address(batch, state)

        def store(name: str, value: torch.Tensor) -> None:
            kernels.store_rows(state.row_pool(self.key, name), addr, value, complete)

        if not aside_kv:
            for name, value in self._cache_rows(latent, freqs, numerics).items():
                store(name, value)
            return None
        join = aside(x, lambda: store("compressed_kv", self._compressed_kv(latent, freqs, numerics)))
        store("index_k", self.indexer.index_keys(latent, freqs, numerics))
        return join

    def _group_rope(self, batch: DecodeBatch) -> torch.Tensor:
        """RoPE of each token's group [B]: a row sits at its group's first position (every token is a group
        of its own at ratio 1); the same for every source of this ratio."""
        r = self.ratio
        if r == 1:
            return self.decode_freqs(batch)
        return batch.shared(("group_rope", r, self.rope.kind), lambda: self.rope.lookup(group_start(batch, r),
                                                                                        batch.max_len))

    def _group_row_address(self, batch: DecodeBatch, state: StateCache) -> torch.Tensor:
        """[B] addresses of the compressed row each token's group completes, ``positions // ratio``: the same
        for both rows fields (one ratio: one StateCache.address_space) and every source of this ratio."""
        r = self.ratio
        row = batch.positions if r == 1 else batch.shared(("compressed_row", r), lambda: batch.positions // r)
        return shared_row_address(state, batch, self.key, "compressed_kv", ("compressed_row", r),
                                  row.unsqueeze(1)).squeeze(1)

    def _compressed(self, x: torch.Tensor, qr: torch.Tensor, freqs: torch.Tensor, batch: ForwardBatch, i: int,
                    state: StateCache, numerics: Numerics) -> tuple[torch.Tensor, torch.Tensor]:
        """This sequence's compressed rows and each query's selected row indices (-1 = none)."""
        r, slot, start, n = self.ratio, batch.slots[i], batch.start_pos[i], x.shape[0]
        end = batch.end_pos(i)
        if self.is_source:
            assert batch.clip(i) == 0, "a KV source never runs on a compacted batch"
            self._publish(x, slot, start, state, numerics)
        rows = state.read_rows(self.source_key, "compressed_kv", slot, 0, end // r).to(numerics.dtype)
        selections = batch.scratch.setdefault("selections", {})
        if self.runs_indexer:
            if end // r == 0:
                sel = torch.empty(n, 0, dtype=torch.long, device=x.device)
            else:
                keys = state.read_rows(self.source_key, "index_k", slot, 0, end // r).to(numerics.dtype)
                visible = (batch.positions[batch.rows(i)] + 1) // r
                causal = visible if CAUSAL_INDEX_SCORES else None
                scores = self.indexer.scores(x, qr, freqs, keys, numerics, causal)
                sel = self.indexer.select(scores, visible, batch.scratch.setdefault(("pool", i), {}), numerics,
                                          masked=CAUSAL_INDEX_SCORES)
            selections[i] = sel
        return rows, selections[i]

    def _publish(self, x: torch.Tensor, slot: int, start: int, state: StateCache, numerics: Numerics) -> None:
        """Compress this chunk's finished groups; store their index keys and compressed KV."""
        r = self.ratio
        latent = self.compressor(x, numerics, state, slot, start)
        if latent.shape[0] == 0:
            return
        first_row = start // r
        group_pos = (first_row + torch.arange(latent.shape[0], device=latent.device)) * r  # a row sits at its group's first token
        for name, value in self._cache_rows(latent, self.rope.lookup(group_pos, start + x.shape[0]), numerics).items():
            state.write_rows(self.key, name, slot, first_row, value)

    def _cache_rows(self, latent: torch.Tensor, freqs: torch.Tensor, numerics: Numerics) -> dict[str, torch.Tensor]:
        """Latents of completed groups (RoPE at each group's first position) -> the rows fields
        they are stored as: index keys and compressed KV (RoPE'd, FP4 round trip)."""
        return {"index_k": self.indexer.index_keys(latent, freqs, numerics),
                "compressed_kv": self._compressed_kv(latent, freqs, numerics)}

    @staticmethod
    def _compressed_kv(latent: torch.Tensor, freqs: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        """Latents -> compressed KV rows as stored: RoPE'd, FP4 round trip."""
        kv = kernels.apply_rope(latent, freqs)
        return kernels.fp4_roundtrip_e4m3(kv, COMPRESSED_FP4_GROUP) if numerics.kv_quant else kv
