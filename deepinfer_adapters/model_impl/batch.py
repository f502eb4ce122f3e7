"""ForwardBatch: what one model step computes, for any mix of sequences.

The T new tokens of all sequences are flattened into one dimension. Sequence i
owns rows ``cu_seqlens[i]:cu_seqlens[i+1]``; its first new token sits at
absolute position ``start_pos[i]`` (the context it already has in its state
slot), so a step may hold fresh prefills (start 0), continued chunks and
single-token decodes side by side. The model never sees requests or hosts.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from deepinfer_adapters.model_impl import overlap

T = TypeVar("T")


@dataclass
class ForwardBatch:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64, absolute positions
    cu_seqlens: list[int]  # [B + 1] offsets into the T rows
    start_pos: list[int]  # [B] tokens already in each sequence's state before this step
    slots: list[int]  # [B] state-cache slot of each sequence
    # rows whose logits are wanted; None = the last new token of every sequence
    logits_rows: torch.Tensor | None = None
    # [T] bool, True for image-span tokens (MoE bias_vl, Engram blocking); None = text only
    image_mask: torch.Tensor | None = None
    # bounded replay (see model_impl/replay.py), per sequence: the prompt's full length when
    # this step is a chunk of that prompt's prefill, else None
    prompt_len: list[int | None] | None = None
    # set by the model for layers under bounded replay: lowest position each sequence's
    # window may show, and how many leading rows of its chunk were dropped (compact mode)
    window_lo: list[int] | None = None
    row_clip: list[int] | None = None
    # filled by the model during the forward: per-sequence scratch shared between layers
    scratch: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        seqs: Sequence[tuple[int, int, Sequence[int]]],
        *,
        all_logits: bool = False,
        device: str | torch.device = "cpu",
    ) -> "ForwardBatch":
        """From (slot, start_pos, new token ids) per sequence."""
        ids: list[int] = []
        pos: list[int] = []
        cu = [0]
        for _, start, toks in seqs:
            if len(toks) == 0:
                raise ValueError("every sequence in a ForwardBatch needs at least one new token")
            ids.extend(int(t) for t in toks)
            pos.extend(range(start, start + len(toks)))
            cu.append(len(ids))
        batch = cls(
            input_ids=torch.tensor(ids, dtype=torch.long, device=device),
            positions=torch.tensor(pos, dtype=torch.long, device=device),
            cu_seqlens=cu,
            start_pos=[s for _, s, _ in seqs],
            slots=[slot for slot, _, _ in seqs],
        )
        if all_logits:
            batch.logits_rows = torch.arange(len(ids), device=device)
        return batch

    @property
    def num_seqs(self) -> int:
        return len(self.slots)

    @property
    def num_tokens(self) -> int:
        return self.cu_seqlens[-1]

    def clip(self, i: int) -> int:
        """Leading rows of sequence i's chunk that this (compacted) batch no longer holds."""
        return self.row_clip[i] if self.row_clip is not None else 0

    def lo(self, i: int) -> int:
        return self.window_lo[i] if self.window_lo is not None else 0

    def seq_len(self, i: int) -> int:
        return self.cu_seqlens[i + 1] - self.cu_seqlens[i]

    def rows(self, i: int) -> slice:
        return slice(self.cu_seqlens[i], self.cu_seqlens[i + 1])

    def end_pos(self, i: int) -> int:
        """Context length of sequence i after this step."""
        return self.start_pos[i] + self.clip(i) + self.seq_len(i)

    def default_logits_rows(self) -> torch.Tensor:
        if self.logits_rows is not None:
            return self.logits_rows
        last = torch.tensor(self.cu_seqlens[1:], device=self.input_ids.device) - 1
        return last


_ARANGES: dict[tuple[int, int, torch.device], torch.Tensor] = {}  # DecodeBatch.arange


@dataclass(frozen=True)
class _Ahead:
    """A ``DecodeBatch.shared`` value built on a side stream: ``join`` makes the calling stream wait for it."""

    join: Callable[[], object]
    value: object


def cached_constant(cache: dict, key: Hashable, build: Callable[[], T], limit: int = 0) -> T:
    """``cache[key]``, built on first use (a decode step's warm-up, not a captured graph). Shared:
    never write into it. One made while a CUDA graph is being captured is returned but not kept:
    it holds its values only once the graph replays. ``limit``: the cache is emptied before an
    entry beyond that many is kept (keys of unbounded variety, e.g. token counts)."""
    value = cache.get(key)
    if value is None:
        value = build()
        if not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
            if limit and len(cache) >= limit:
                cache.clear()
            cache[key] = value
    return value


@dataclass
class DecodeBatch:
    """B sequences with one new token each, every per-sequence value a device tensor.

    What ``model.decode`` takes: no host loop over sequences and no host sync, so a
    decode step can be captured once in a CUDA graph and replayed with new values in
    the same tensors. Shapes depend only on B and ``max_len``.
    """

    input_ids: torch.Tensor  # [B] int64
    positions: torch.Tensor  # [B] int64: the new token's position = context before it
    slots: torch.Tensor  # [B] int64 state-cache slots
    # upper bound of every sequence's context after this step (a host int, part of a
    # captured graph's shape): index scans cover max_len // ratio compressed rows
    max_len: int
    # filled by the model during the forward: tensors shared between layers (selections,
    # ``shared`` values); cleared at the start of every step
    scratch: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, tokens: Sequence[int], positions: Sequence[int], slots: Sequence[int], *,
              max_len: int | None = None, device: str | torch.device = "cpu") -> "DecodeBatch":
        if not (len(tokens) == len(positions) == len(slots)) or not tokens:
            raise ValueError("a DecodeBatch needs one token, position and slot per sequence (at least one)")
        def as_tensor(values: Sequence[int]) -> torch.Tensor:
            return torch.tensor([int(v) for v in values], dtype=torch.long, device=device)

        return cls(as_tensor(tokens), as_tensor(positions), as_tensor(slots),
                   max_len if max_len is not None else max(positions) + 1)

    @property
    def num_seqs(self) -> int:
        return self.input_ids.shape[0]

    def shared(self, key: Hashable, build: Callable[[], T]) -> T:
        """``build()`` once per step for every layer that asks with the same ``key``: index
        tensors that depend only on the batch (ring slots, RoPE rows, visible rows) then cost
        their few small kernels once per step, not once per layer. A value ``shared_ahead`` built
        comes after the calling stream has waited for it."""
        if key not in self.scratch:
            self.scratch[key] = build()
        value = self.scratch[key]
        if isinstance(value, _Ahead):
            value.join()
            return value.value
        return value

    def shared_ahead(self, prepare: Callable[[], object]) -> Callable[[], object]:
        """Run ``prepare`` (``shared`` calls) now on a stream of its own (``overlap.aside``), next to what the
        caller issues after it, instead of where each value's first reader asks: a step's index tensors that
        depend only on the batch then stay off the critical path of the layer that reads them first. Every
        ``shared`` call for one of them makes its stream wait for the side part's end. Returns the join, which
        the step calls before it ends (a captured graph's side streams rejoin it). ``prepare`` must read
        nothing the step writes."""
        before = set(self.scratch)
        built: dict = {}

        def side() -> dict:
            prepare()
            built.update((k, v) for k, v in self.scratch.items() if k not in before)
            return built

        join = overlap.aside(self.positions, side)
        for key, value in built.items():
            self.scratch[key] = _Ahead(join, value)
        return join

    def arange(self, n: int, start: int = 0) -> torch.Tensor:
        """``torch.arange(start, start + n)`` on the batch's device (row numbers and ring offsets
        that several layers index with): a constant, built once per process, i.e. at warm-up
        (as RoPE tables), not in a captured graph. Shared: never write into it."""
        device = self.positions.device
        return cached_constant(_ARANGES, (start, n, device), lambda: torch.arange(start, start + n, device=device))

    def visible_rows(self, ratio: int) -> torch.Tensor:
        """[B] rows of one per ``ratio`` tokens that each sequence has after this step,
        ``(positions + 1) // ratio``, once per step per ratio. Shared: never write into it."""
        def build() -> torch.Tensor:
            context = self.shared("context_len", lambda: self.positions + 1)
            return context if ratio == 1 else context // ratio  # // 1 would copy

        return self.shared(("visible_rows", ratio), build)
