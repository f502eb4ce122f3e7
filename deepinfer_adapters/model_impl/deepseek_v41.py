"""DeepSeek-V4.1-Flash (model_spec.md sections 1.2, 1.3, 2): embed -> hc copies ->
blocks (Engram before layers that have it; single-pass hyper-connections) -> collapse
with the last mix -> norm -> fp32 logits. DSpark draft stages live in layers/dspark.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from deepinfer_adapters.config import ModelConfig
from deepinfer_adapters.model_impl import overlap
from deepinfer_adapters.model_impl.base import CausalLMBase, DraftOutput, ModelOutput, in_numerics_scope
from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch, cached_constant
from deepinfer_adapters.model_impl.engram_hash import (BLOCKED, EngramHasher, compressed_ids, engram_hash_chunk,
                                                      engram_hash_decode, make_engram_hasher)
from deepinfer_adapters.model_impl.layers.block_v41 import BlockV41
from deepinfer_adapters.model_impl.layers.linear import Linear
from deepinfer_adapters.model_impl.layers.dspark import DSparkStage
from deepinfer_adapters.model_impl.layers.hyper_connection import hc_pre, identity_pre_mix
from deepinfer_adapters.model_impl.layers.norm import RMSNorm
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.replay import (Replay, compact_rows, compact_selections, compacted,
                                                  consumer_boundary, rectangle)
from deepinfer_adapters.model_impl.state import StateCache, StateField, StateSpec

ENGRAM_KEY = "engram"


def greedy(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(-1)


class DeepseekV41ForCausalLM(CausalLMBase):
    def __init__(self, cfg: ModelConfig, numerics: Numerics | None = None, *, model_dir: Path | None = None,
                 hasher: EngramHasher | None = None, with_draft: bool = True) -> None:
        super().__init__()
        self.cfg, self.numerics = cfg, numerics or Numerics.reference()
        self.vision = "vision_config" in cfg.extra
        D = cfg.hidden_size
        self.embed = nn.Embedding(cfg.vocab_size, D)
        self.embed.weight.requires_grad_(False)
        self.layers = nn.ModuleList(BlockV41(cfg, l, f"layers.{l.index}", vision=self.vision) for l in cfg.main_layers)
        self.norm = RMSNorm(D, cfg.rms_norm_eps)
        self.head = Linear(D, cfg.vocab_size, quantized=False)
        self.with_draft = with_draft and cfg.draft is not None
        self.target_layers = cfg.draft.target_layer_ids if self.with_draft else ()
        self.mtp = nn.ModuleList(
            DSparkStage(cfg, l, f"mtp.{l.index - cfg.num_hidden_layers}", vision=self.vision)
            for l in (cfg.draft_layers if self.with_draft else ())
        )
        self.hasher = hasher
        self._pre_mixes: dict[tuple[int, torch.device], torch.Tensor] = {}
        if cfg.engram is not None and hasher is None and model_dir is not None:
            self.hasher = make_engram_hasher(cfg, model_dir)

    def _apply(self, fn, recurse=True):
        """Move the Engram hasher's tables along with the parameters (model.to(device))."""
        out = super()._apply(fn, recurse)
        if self.hasher is not None:
            self.hasher = self.hasher.to(self.embed.weight.device)
        return out

    def ignores(self, official: str) -> bool:
        skipped = ("vision.", "aligner.", "image_") + (() if self.with_draft else ("mtp.",))
        return official.startswith(skipped)  # the vision tower is not run yet

    def state_spec(self, rewind: int = 0) -> StateSpec:
        spec = StateSpec()
        for block in (*self.layers, *self.mtp):
            spec.add(block.attn.key, *block.attn.state_fields(self.numerics, rewind))
        if self.cfg.engram is not None:  # the last max_ngram_size - 1 compressed token ids, by position
            recent = (self.cfg.engram.max_ngram_size - 1 + rewind,)
            spec.add(ENGRAM_KEY, StateField("recent", recent, torch.int64, "fixed", fill=BLOCKED))
        return spec

    def _require_hasher(self) -> None:
        if self.hasher is None:
            raise ValueError("this V4.1 model has Engram layers but no token map: build it with model_dir "
                             "(the tokenizer files) or pass hasher=")

    def engram_ids(self, batch: ForwardBatch, state: StateCache) -> torch.Tensor | None:
        if self.cfg.engram is None:
            return None
        self._require_hasher()
        recent = state.fixed(ENGRAM_KEY, "recent")  # compressed id of position p at slot p % size
        size, device = recent.shape[1], recent.device
        history = self._engram_history(recent, torch.tensor(batch.slots, dtype=torch.long, device=device),
                                       torch.tensor(batch.start_pos, dtype=torch.long, device=device))
        ids, _ = engram_hash_chunk(self.hasher, batch.input_ids, history, batch.cu_seqlens, batch.image_mask)
        compressed = compressed_ids(self.hasher, batch.input_ids, batch.image_mask)
        for i, slot in enumerate(batch.slots):  # each sequence's newest `size` positions
            rows = batch.rows(i)
            pos = batch.positions[rows][-size:]
            recent[slot, pos % size] = compressed[rows][-size:]
        return ids

    def _engram_ids_decode(self, batch: DecodeBatch, state: StateCache) -> torch.Tensor | None:
        """``engram_ids`` for one text token per sequence, on the device."""
        if self.cfg.engram is None:
            return None
        recent = state.fixed(ENGRAM_KEY, "recent")
        size = recent.shape[1]
        # positions p, p - 1, ..., p - (max_ngram_size - 1) and their ring slots, at once: the
        # new token's (written), then those it looks back at (read first: the ring may hold no more)
        back = batch.positions.unsqueeze(1) - batch.arange(self.cfg.engram.max_ngram_size)
        ring = back % size
        earlier = torch.where(back[:, 1:] >= 0, recent[batch.slots.unsqueeze(1), ring[:, 1:]], BLOCKED)
        compressed = compressed_ids(self.hasher, batch.input_ids, None)
        recent[batch.slots, ring[:, 0]] = compressed
        return engram_hash_decode(self.hasher, compressed, earlier)

    def _engram_history(self, recent: torch.Tensor, slots: torch.Tensor, first_pos: torch.Tensor) -> torch.Tensor:
        """[B, max_ngram_size - 1] compressed ids of the positions before each sequence's first
        new one, oldest first, BLOCKED before the sequence start (``recent``: the position ring)."""
        back = torch.arange(1 - self.cfg.engram.max_ngram_size, 0, device=recent.device)
        hist_pos = first_pos.unsqueeze(1) + back
        return torch.where(hist_pos >= 0, recent[slots.unsqueeze(1), hist_pos % recent.shape[1]], BLOCKED)

    @in_numerics_scope
    def decode(self, batch: DecodeBatch, state: StateCache) -> torch.Tensor:
        """One new text token per sequence, batched on the device: logits [B, vocab] fp32.

        The same computation as ``forward`` on a one-token-per-sequence ForwardBatch (tests
        compare them), without host loops or syncs, so a CUDA graph can capture it. Needs a
        state cache with device addressing (``StateCache.row_pool``) and no draft stages
        (their rings follow ``forward`` only, for now)."""
        if self.with_draft:
            raise ValueError("decode() runs the main model only: build the model with with_draft=False "
                             "(draft stages are kept in step by forward())")
        if self.cfg.engram is not None:
            self._require_hasher()
        num = self.numerics
        batch.scratch.clear()
        # the engram ids (~20 small integer kernels: ~38 us at B = 1, H200 timeline, session 21) on a stream of their
        # own next to the embedding and the layers before the first engram one (overlap.ENGRAM_IDS_ASIDE)
        hash_ids = overlap.aside(batch.input_ids, lambda: self._engram_ids_decode(batch, state),
                                 when=overlap.ENGRAM_IDS_ASIDE and self.cfg.engram is not None)
        # the compressed layers' shared index tensors from the step's start too, where overlap.DECODE_PRELUDE
        prelude = batch.shared_ahead(lambda: self._decode_prelude(batch, state)) if overlap.DECODE_PRELUDE else None
        # hc copies of each embedding in one gather (an expanded index), not a gather and a repeat
        h = self.embed.weight[batch.input_ids.unsqueeze(1).expand(-1, self.cfg.hc_mult)].to(num.dtype)
        pre = self._identity_pre_mix(h.shape[0], h.device)
        normed = None
        for block, next_norm in zip(self.layers, self._next_norms()):
            if block.engram is not None:
                h = block.engram(h, hash_ids()[:, block.engram.table_index], num)
            h, pre, normed = block.decode(h, pre, batch, state, num, normed=normed, next_norm=next_norm)
        hash_ids()  # joined here too: a step (and a graph's capture) ends with its side streams joined
        if prelude is not None:
            prelude()
        return self.head(normed, num, torch.float32)

    def _decode_prelude(self, batch: DecodeBatch, state: StateCache) -> None:
        for block in self.layers:
            block.attn.decode_prelude(batch, state)

    def _next_norms(self) -> list[RMSNorm | None]:
        """For each main block, the norm of the sublayer after it where the block's last hc_post may give that
        sublayer's input too (``BlockV41._run``'s ``next_norm``): the next block's attention norm unless its Engram
        layer changes the streams first; the final norm after the last block."""
        after = [None if b.engram is not None else b.attn_norm for b in self.layers[1:]]
        return [*after, self.norm]

    def _identity_pre_mix(self, num_seqs: int, device: torch.device) -> torch.Tensor:
        """``identity_pre_mix`` for a decode step: a constant, built once per batch size and device
        (at warm-up, not in a captured graph). Shared: never write into it."""
        return cached_constant(self._pre_mixes, (num_seqs, device),
                               lambda: identity_pre_mix(num_seqs, self.cfg.hc_mult, device))

    def forward(self, batch: ForwardBatch, state: StateCache, replay: Replay | None = None) -> ModelOutput:
        """One step. ``replay`` (mask / compact) bounds the consumer layers' prefill work;
        under ``compact`` the logits rows are the kept ones (``ModelOutput.rows``)."""
        num, dt = self.numerics, self.numerics.dtype
        hash_ids = self.engram_ids(batch, state)
        text = None if batch.image_mask is None else ~batch.image_mask
        h = self.embed.weight[batch.input_ids].to(dt).unsqueeze(1).repeat(1, self.cfg.hc_mult, 1)
        pre = identity_pre_mix(h.shape[0], self.cfg.hc_mult, h.device)
        boundary, mode = self._replay_plan(batch, replay)
        full, targets, kept, normed = batch, [], None, None
        for block, next_norm in zip(self.layers, self._next_norms()):
            attn_batch = None
            if block.layer.index == boundary:
                lo = rectangle(full, replay.keep)
                batch = dataclasses.replace(full, window_lo=lo)
                if mode == "compact":
                    kept, clips = compact_rows(full, lo)
                    attn_batch, batch = batch, compacted(full, kept, clips, lo)
            if block.engram is not None:
                h = block.engram(h, hash_ids[:, block.engram.table_index], num, text)
            if block.layer.index in self.target_layers:  # DSpark reads the block *input*
                targets.append(h.float().mean(1).to(dt))
            h, pre, normed = block(h, pre, batch, state, num, keep=kept if attn_batch else None,
                                   attn_batch=attn_batch, normed=normed, next_norm=next_norm)
            if attn_batch is not None:
                compact_selections(batch.scratch, clips)
        rows = self._logits_rows(full, kept)
        logits = self.head(normed[rows], num, torch.float32)
        main_hidden = torch.cat(targets, -1) if targets else None
        if self.with_draft:
            self.observe(main_hidden, batch if self._targets_after(boundary) else full, state)
        return ModelOutput(logits=logits, hidden=main_hidden, rows=None if kept is None else kept[rows])

    def _replay_plan(self, batch: ForwardBatch, replay: Replay | None) -> tuple[int | None, str]:
        if replay is None or replay.mode == "off" or batch.prompt_len is None:
            return None, "off"
        replay.validate(self.cfg)
        boundary = consumer_boundary(self.cfg)
        if boundary is None:
            return None, "off"
        if replay.mode == "compact":
            after = [t >= boundary for t in self.target_layers]
            if any(after) and not all(after):
                raise ValueError("compact replay needs every DSpark target layer on one side of layer "
                                 f"{boundary}, got {list(self.target_layers)}")
        return boundary, replay.mode

    def _targets_after(self, boundary: int | None) -> bool:
        return boundary is not None and bool(self.target_layers) and min(self.target_layers) >= boundary

    @staticmethod
    def _logits_rows(full: ForwardBatch, kept: torch.Tensor | None) -> torch.Tensor:
        rows = full.default_logits_rows()
        if kept is None:
            return rows
        position = torch.full((full.num_tokens,), -1, dtype=torch.long, device=rows.device)
        position[kept.to(rows.device)] = torch.arange(kept.numel(), device=rows.device)
        mapped = position[rows]
        return mapped[mapped >= 0]  # requested rows that survived compaction

    # ----------------------------------------------------------------- DSpark ----
    def observe(self, main_hidden: torch.Tensor, batch: ForwardBatch, state: StateCache) -> None:
        """Keep the draft stages' rings in step with the main model (every step)."""
        first = self.mtp[0]
        main_x = first.main_norm(first.main_proj(main_hidden, self.numerics))
        for stage in self.mtp:
            stage.attn.observe(main_x, batch, state, self.numerics)

    @in_numerics_scope
    def draft(self, last_tokens: list[int], positions: list[int], slots: list[int], state: StateCache,
              sample: Callable[[torch.Tensor], torch.Tensor] = greedy) -> DraftOutput:
        """Propose ``block_size`` tokens for each sequence whose last processed position is
        ``positions[i]`` and whose next token (sampled from the main model) is ``last_tokens[i]``."""
        d, num = self.cfg.draft, self.numerics
        noise = [d.noise_token_id] * (d.block_size - 1)
        device = self.embed.weight.device
        batch = ForwardBatch.build([(s, p + 1, [t, *noise]) for t, p, s in zip(last_tokens, positions, slots)],
                                   device=device)
        h = self.embed.weight[batch.input_ids].to(num.dtype).unsqueeze(1).repeat(1, self.cfg.hc_mult, 1)
        pre = identity_pre_mix(h.shape[0], self.cfg.hc_mult, h.device)
        for stage in self.mtp:
            h, pre, _ = stage(h, pre, batch, state, num)
        x = hc_pre(h, pre).view(len(slots), d.block_size, -1)
        first = torch.tensor(last_tokens, device=x.device)
        tokens, logits, conf = self.mtp[-1].heads(x, self.head, first, num, sample)
        return DraftOutput(tokens=tokens[:, 1:], logits=logits, confidence=conf)

