"""SWA bounded replay ("YoCo prefill truncation", DeepInfer; components.md section 12).

From the first ratio-1 layer on (the *consumer* layers: V4.1 layers 20-39), no
layer writes shared state other than its own window ring, and every KV source
lies before or at that layer. So during a prompt's prefill the consumer layers
only need the last ``keep`` positions of the prompt: the logits of the last
token, the window rings (128 slots) that decoding will read, and the draft
rings. DeepInfer's modes:

- ``off``: exact.
- ``mask``: consumer layers narrow every window to positions >= prompt_len - keep
  (the "rectangle"); everything is still computed.
- ``compact``: the rows below the rectangle are dropped at the first consumer
  layer's attention output, so the remaining consumer layers (attention, MoE,
  hyper-connections) run on the kept rows only. Every chunk keeps at least its
  last row. Kept rows see exactly what they see under ``mask``, so the two
  modes give the same results there.

``keep`` must cover the window plus the most tokens speculative decoding may
roll back (DeepInfer: 140 = 128 + 12), so the rings decoding reads are whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from deepinfer_adapters.config import ModelConfig
from deepinfer_adapters.model_impl.batch import ForwardBatch

MODES = ("off", "mask", "compact")


@dataclass(frozen=True)
class Replay:
    mode: str = "off"
    keep: int = 140

    def validate(self, cfg: ModelConfig, max_backtracking: int = 0) -> None:
        if self.mode not in MODES:
            raise ValueError(f"replay mode must be one of {list(MODES)}, got {self.mode!r}")
        need = cfg.sliding_window + max_backtracking
        if self.mode != "off" and self.keep < need:
            raise ValueError(f"replay keep ({self.keep}) must be >= sliding_window + max backtracking ({need})")


def consumer_boundary(cfg: ModelConfig) -> int | None:
    """Index of the first ratio-1 layer (the first consumer), or None if there is none."""
    return next((l.index for l in cfg.main_layers if l.compress_ratio == 1), None)


def rectangle(batch: ForwardBatch, keep: int) -> list[int]:
    """Per sequence: the lowest position consumer layers keep (0 when not in a prompt prefill)."""
    lens = batch.prompt_len or [None] * batch.num_seqs
    return [max(0, n - keep) if n is not None else 0 for n in lens]


def compact_rows(batch: ForwardBatch, lo: list[int]) -> tuple[torch.Tensor, list[int]]:
    """Rows of ``batch`` to keep (positions >= lo, at least each chunk's last) and per-sequence clips."""
    keep_rows, clips = [], []
    for i in range(batch.num_seqs):
        n, start = batch.seq_len(i), batch.start_pos[i]
        clip = min(max(lo[i] - start, 0), n - 1)
        clips.append(clip)
        keep_rows.append(torch.arange(batch.cu_seqlens[i] + clip, batch.cu_seqlens[i + 1],
                                      device=batch.input_ids.device))
    return torch.cat(keep_rows), clips


def compacted(batch: ForwardBatch, rows: torch.Tensor, clips: list[int], lo: list[int]) -> ForwardBatch:
    """The batch the layers after the boundary see: only ``rows``, same chunk geometry."""
    cu = [0]
    for i in range(batch.num_seqs):
        cu.append(cu[-1] + batch.seq_len(i) - clips[i])
    return ForwardBatch(
        input_ids=batch.input_ids[rows], positions=batch.positions[rows], cu_seqlens=cu,
        start_pos=batch.start_pos, slots=batch.slots, logits_rows=None,
        image_mask=None if batch.image_mask is None else batch.image_mask[rows],
        prompt_len=batch.prompt_len, window_lo=lo, row_clip=clips, scratch=batch.scratch,
    )


def compact_selections(scratch: dict, clips: list[int]) -> None:
    """Drop the clipped rows from what attention layers hand down: per-sequence top-k
    selections and candidate pools (rows are queries)."""
    for i, clip in enumerate(clips):
        if "selections" in scratch and i in scratch["selections"]:
            scratch["selections"][i] = scratch["selections"][i][clip:]
        pool = scratch.get(("pool", i))
        if pool and pool.get("candidates") is not None:  # (None: the pool is every block)
            pool["candidates"] = pool["candidates"][clip:]
