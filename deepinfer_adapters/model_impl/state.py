"""StateSpec / StateCache: what each layer keeps between steps, and where it lives.

A layer declares its state as fields:
- ``rows`` fields grow with the sequence: one row per ``ratio`` tokens
  (compressed KV, index keys). Hosts page these.
- ``fixed`` fields have a constant size per sequence (the window KV ring, a
  compressor's partial block, Engram token history).

``StateSpec`` collects the fields of every layer so any host can size memory
(bytes per token, bytes per sequence) before allocating. ``StateCache`` is the
interface the model reads and writes through; ``DenseStateCache`` is the simple
contiguous implementation used by tests and the reference path. The standalone
engine implements it over paged blocks; the vLLM and SGLang adapters over the
cache tensors their host allocates.

Rewinding. Speculative decoding writes a verify step's draft positions into the
state and then drops the rejected ones: the next step restarts up to k positions
before the last one written. ``state_spec(rewind=k)`` makes that exact: every
fixed field that the next step reads by position (window rings, compressor
partial groups, Engram history, DSpark rings) is a ring indexed by position with
k extra slots, and every chunk writes all its positions into it, so a rejected
position's row lands in a slot no restarted query reads; rows fields are indexed
by position and simply rewritten. ``rewind=0`` keeps the reference's exact sizes.

Device addressing. The batched decode path (``model.decode``, what a CUDA graph
captures) cannot loop over sequences on the host: it reads and writes rows fields
through ``row_pool`` (the field as one flat tensor of rows) and ``row_address``
(slots and row numbers, as device tensors, to indices into that pool). A cache
that implements both supports ``decode``; others (the vLLM adapter's) only ``forward``.
Fields in one ``address_space`` share their addresses, so a decode step computes the
addresses of rows that depend on the step only once for all of them (``shared_row_address``),
and the slots' part of any other rows' addresses (``slot_base``, ``step_row_address``). A kernel that finds
rows itself takes the cache's block table (``row_blocks``: a dense cache's slot is one block).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass, field

import torch

from deepinfer_adapters.model_impl.batch import DecodeBatch


@dataclass(frozen=True)
class StateField:
    name: str
    shape: tuple[int, ...]  # rows: shape of one row; fixed: the whole per-sequence tensor
    dtype: torch.dtype
    kind: str  # "rows" | "fixed"
    ratio: int = 1  # rows: tokens per row
    fill: float = 0.0  # fixed: value of a fresh sequence's state (e.g. -inf for softmax scores)

    @property
    def nbytes(self) -> int:
        """Bytes of one row (rows) or of the whole field (fixed)."""
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()

    def rows_for(self, num_tokens: int) -> int:
        return num_tokens // self.ratio


@dataclass
class StateSpec:
    layers: dict[str, list[StateField]] = field(default_factory=dict)

    def add(self, key: str, *fields: StateField) -> None:
        self.layers.setdefault(key, []).extend(fields)

    def fields(self):
        for key, fields in self.layers.items():
            for f in fields:
                yield key, f

    def field(self, key: str, name: str) -> StateField:
        return next(f for f in self.layers[key] if f.name == name)

    def bytes_per_token(self, key: str | None = None) -> float:
        return sum(f.nbytes / f.ratio for k, f in self.fields() if f.kind == "rows" and key in (None, k))

    def bytes_per_seq(self, key: str | None = None) -> int:
        return sum(f.nbytes for k, f in self.fields() if f.kind == "fixed" and key in (None, k))

    def bytes_for(self, num_tokens: int) -> int:
        """Exact bytes one sequence of ``num_tokens`` tokens holds."""
        rows = sum(f.nbytes * f.rows_for(num_tokens) for _, f in self.fields() if f.kind == "rows")
        return rows + self.bytes_per_seq()


class StateCache(ABC):
    """Per-slot state storage. Slots are assigned by the host, one per live sequence."""

    spec: StateSpec

    @abstractmethod
    def fixed(self, key: str, name: str) -> torch.Tensor:
        """[num_slots, *shape] tensor of a fixed field; index by slot, write in place."""

    @abstractmethod
    def read_rows(self, key: str, name: str, slot: int, start: int, end: int) -> torch.Tensor:
        """Rows [start, end) of a rows field for one slot: [end - start, *row_shape]."""

    @abstractmethod
    def write_rows(self, key: str, name: str, slot: int, start: int, rows: torch.Tensor) -> None:
        """Write rows [start, start + len(rows)) of a rows field for one slot."""

    def row_pool(self, key: str, name: str) -> torch.Tensor:
        """A rows field as one flat tensor [P, *row_shape] (a view: writes land in the cache)."""
        raise NotImplementedError(f"{type(self).__name__} has no device addressing (model.decode needs it)")

    def row_address(self, key: str, name: str, slots: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Indices into ``row_pool`` of row ``rows[b, j]`` of slot ``slots[b]``; [B, n] int64.
        Device-side only (no host sync). Rows past a slot's capacity map to some valid index
        whose content is meaningless: callers mask what a sequence cannot see yet. Fields of
        one ``address_space`` share their addresses."""
        raise NotImplementedError(f"{type(self).__name__} has no device addressing (model.decode needs it)")

    def slot_base(self, key: str, name: str, slots: torch.Tensor) -> torch.Tensor:
        """The part of ``row_address`` that depends on the slots only, for ``row_address_at``:
        a decode step computes it once per address space (``step_row_address``). By default
        the slots themselves (a cache that overrides neither computes everything per call)."""
        return slots

    def row_address_at(self, key: str, name: str, base: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``row_address(key, name, slots, rows)`` from ``base = slot_base(key, name, slots)``."""
        return self.row_address(key, name, base, rows)

    def row_blocks(self, key: str, name: str, slots: torch.Tensor) -> tuple[torch.Tensor, int]:
        """``row_address`` as a block table, for kernels that find rows themselves (``kernels.selected_keys``):
        (table [B, blocks] int64, rows a block), row r of slot ``slots[b]`` (r clamped to ``row_capacity``) at
        ``table[b, r // rows_a_block] * rows_a_block + r % rows_a_block`` of ``row_pool``."""
        raise NotImplementedError(f"{type(self).__name__} has no device addressing (model.decode needs it)")

    def address_space(self, key: str, name: str) -> Hashable:
        """Fields whose ``row_address`` is the same function of (slots, rows) have equal address
        spaces. By default, those with the same ratio and capacity: the dense cache's rows of a
        slot are contiguous, the paged cache's blocks hold ``block_size // ratio`` rows and one
        block table serves every field. A cache whose fields differ otherwise (a block table
        per key) adds what they differ by."""
        return self.spec.field(key, name).ratio, self.row_capacity(key, name)

    def row_capacity(self, key: str, name: str) -> int:
        """How many rows of this field one slot can address (sizes a decode step's index scan)."""
        raise NotImplementedError(f"{type(self).__name__} has no device addressing (model.decode needs it)")

    def reset(self, slot: int) -> None:
        """Give a slot to a new sequence: fixed fields back to their fill value."""
        for key, f in self.spec.fields():
            if f.kind == "fixed":
                self.fixed(key, f.name)[slot].fill_(f.fill)


class DenseStateCache(StateCache):
    """Contiguous storage: every slot reserves ``max_len`` tokens of rows."""

    def __init__(self, spec: StateSpec, num_slots: int, max_len: int, device: str | torch.device = "cpu") -> None:
        self.spec = spec
        self.num_slots = num_slots
        self.max_len = max_len
        self._tensors: dict[tuple[str, str], torch.Tensor] = {}
        for key, f in spec.fields():
            if f.kind == "fixed":
                t = torch.full((num_slots, *f.shape), f.fill, dtype=f.dtype, device=device)
            else:
                t = torch.zeros((num_slots, f.rows_for(max_len), *f.shape), dtype=f.dtype, device=device)
            self._tensors[(key, f.name)] = t

    def fixed(self, key: str, name: str) -> torch.Tensor:
        return self._tensors[(key, name)]

    def read_rows(self, key: str, name: str, slot: int, start: int, end: int) -> torch.Tensor:
        return self._tensors[(key, name)][slot, start:end]

    def row_pool(self, key: str, name: str) -> torch.Tensor:
        return self._tensors[(key, name)].flatten(0, 1)

    def row_address(self, key: str, name: str, slots: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return self.row_address_at(key, name, self.slot_base(key, name, slots), rows)

    def slot_base(self, key: str, name: str, slots: torch.Tensor) -> torch.Tensor:
        return slots.unsqueeze(-1) * self._tensors[(key, name)].shape[1]  # a slot's first row

    def row_address_at(self, key: str, name: str, base: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return base + rows.clamp(0, self._tensors[(key, name)].shape[1] - 1)

    def row_blocks(self, key: str, name: str, slots: torch.Tensor) -> tuple[torch.Tensor, int]:
        return slots.unsqueeze(-1), self._tensors[(key, name)].shape[1]  # a slot's rows: one block

    def row_capacity(self, key: str, name: str) -> int:
        return self._tensors[(key, name)].shape[1]

    def write_rows(self, key: str, name: str, slot: int, start: int, rows: torch.Tensor) -> None:
        t = self._tensors[(key, name)]
        if start + rows.shape[0] > t.shape[1]:
            raise ValueError(f"state field {key}.{name}: writing rows up to {start + rows.shape[0]} "
                             f"exceeds capacity {t.shape[1]} (max_len {self.max_len})")
        t[slot, start : start + rows.shape[0]] = rows.to(t.dtype)


def step_row_address(state: StateCache, batch: DecodeBatch, key: str, name: str, rows: torch.Tensor) -> torch.Tensor:
    """``state.row_address(key, name, batch.slots, rows)`` for any ``rows`` (e.g. a layer's
    selections): the slots' part (``slot_base``) once per step per address space."""
    base = batch.shared(("slot_base", state.address_space(key, name)),
                        lambda: state.slot_base(key, name, batch.slots))
    return state.row_address_at(key, name, base, rows)


def step_row_blocks(state: StateCache, batch: DecodeBatch, key: str, name: str) -> tuple[torch.Tensor, int]:
    """``state.row_blocks(key, name, batch.slots)``, once per step per address space."""
    return batch.shared(("row_blocks", state.address_space(key, name)),
                        lambda: state.row_blocks(key, name, batch.slots))


def shared_row_address(state: StateCache, batch: DecodeBatch, key: str, name: str, rows_key: Hashable,
                       rows: torch.Tensor) -> torch.Tensor:
    """``state.row_address(key, name, batch.slots, rows)`` where ``rows`` depend on the step only
    (``rows_key`` names them, as their ``batch.shared`` key does): once per step for every field
    of the same address space, not once per layer."""
    return batch.shared(("row_address", state.address_space(key, name), rows_key),
                        lambda: step_row_address(state, batch, key, name, rows))
