"""State memory of the standalone engine: paged "rows" fields, per-slot "fixed" fields.

Two objects, split the way nano-vllm splits its block manager from its KV cache:

- ``CacheManager`` (scheduler side, CPU bookkeeping only): which slots and
  blocks are free, which blocks each slot holds, usage. It never touches
  tensors, so the scheduler can plan step N+1 while the model runs step N.
- ``PagedStateCache`` (model side): the tensors, implementing the model's
  ``StateCache`` contract. A "rows" field lives in a pool of blocks
  ``[num_blocks, block_size // ratio, *row_shape]``; a block covers
  ``block_size`` tokens of a sequence in every rows field at once, so one block
  table per slot serves all fields. A "fixed" field is ``[num_slots, *shape]``.
  Each step binds a snapshot of its sequences' block tables (taken when the
  step was scheduled), so the scheduler may free and reassign blocks while the
  step runs: steps execute in order, and a block's new owner writes its rows
  before it reads them.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import torch

from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.model_impl.state import StateCache, StateField, StateSpec


@dataclass(frozen=True)
class CacheUsage:
    block_size: int  # tokens per block
    num_blocks: int
    used_blocks: int
    num_slots: int
    used_slots: int
    bytes_per_block: int
    bytes_per_slot: int

    @property
    def total_bytes(self) -> int:
        return self.num_blocks * self.bytes_per_block + self.num_slots * self.bytes_per_slot

    @property
    def used_bytes(self) -> int:
        return self.used_blocks * self.bytes_per_block + self.used_slots * self.bytes_per_slot

    @property
    def fraction(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes else 0.0

    def __str__(self) -> str:
        return (f"state: {self.used_slots}/{self.num_slots} slots, {self.used_blocks}/{self.num_blocks} blocks "
                f"of {self.block_size} tokens, {self.used_bytes / 2**20:.1f}/{self.total_bytes / 2**20:.1f} MiB")


def block_bytes(spec: StateSpec, block_size: int) -> int:
    return sum(f.nbytes * (block_size // f.ratio) for _, f in spec.fields() if f.kind == "rows")


def round_block_size(spec: StateSpec, block_size: int) -> int:
    """Smallest multiple of every rows field's ratio that is >= ``block_size``."""
    lcm = math.lcm(1, *(f.ratio for _, f in spec.fields() if f.kind == "rows"))
    return -(-block_size // lcm) * lcm


class PagedStateCache(StateCache):
    def __init__(self, spec: StateSpec, num_slots: int, num_blocks: int, block_size: int,
                 device: str | torch.device = "cpu", max_blocks_per_slot: int | None = None) -> None:
        self.spec, self.num_slots, self.num_blocks, self.block_size = spec, num_slots, num_blocks, block_size
        self.device = torch.device(device)
        self._fields: dict[tuple[str, str], StateField] = {}
        self._tensors: dict[tuple[str, str], torch.Tensor] = {}
        for key, f in spec.fields():
            if block_size % f.ratio:
                raise ValueError(f"block_size {block_size} is not a multiple of {key}.{f.name}'s ratio {f.ratio}")
            shape = (num_slots, *f.shape) if f.kind == "fixed" else (num_blocks, block_size // f.ratio, *f.shape)
            self._fields[(key, f.name)] = f
            self._tensors[(key, f.name)] = torch.full(shape, f.fill, dtype=f.dtype, device=self.device)
        self._tables: dict[int, list[int]] = {}
        self._table_tensors: dict[int, torch.Tensor] = {}
        # device addressing (model.decode): every slot's block ids, rows updated by bind(); a
        # slot's entries past its own blocks are stale and only ever read (masked) never written
        self.max_blocks_per_slot = max_blocks_per_slot or max(num_blocks, 1)
        self.block_table = torch.zeros(num_slots, self.max_blocks_per_slot, dtype=torch.long, device=self.device)

    def bind(self, tables: dict[int, list[int]], tensors: dict[int, torch.Tensor] | None = None) -> None:
        """The block tables of the step about to run (slot -> block ids; optionally the same
        as tensors, built ahead of time)."""
        self._tables = {slot: list(t) for slot, t in tables.items()}
        self._table_tensors = tensors if tensors is not None else {
            slot: torch.tensor(t, dtype=torch.long, device=self.device) for slot, t in tables.items()}
        if tables:
            width = max(len(t) for t in tables.values())
            if width > self.max_blocks_per_slot:
                raise ValueError(f"a block table of {width} blocks exceeds max_blocks_per_slot "
                                 f"{self.max_blocks_per_slot}")
            padded = torch.tensor([list(t) + [0] * (width - len(t)) for t in tables.values()], dtype=torch.long)
            slots = torch.tensor(list(tables), dtype=torch.long)
            self.block_table[slots.to(self.device), :width] = padded.to(self.device)

    def fixed(self, key: str, name: str) -> torch.Tensor:
        return self._tensors[(key, name)]

    def _locate(self, key: str, name: str, slot: int, end: int) -> tuple[torch.Tensor, list[int], int]:
        per_block = self._rows_a_block(key, name)
        table = self._tables.get(slot, [])
        have = len(table) * per_block
        if end > have:
            raise ValueError(f"state field {key}.{name}: slot {slot} holds {have} rows, step touches rows up to "
                             f"{end} (the scheduler allocated too few blocks)")
        return self._tensors[(key, name)], table, per_block

    def read_rows(self, key: str, name: str, slot: int, start: int, end: int) -> torch.Tensor:
        pool, table, per_block = self._locate(key, name, slot, end)
        if end <= start:
            return pool.new_empty((0, *pool.shape[2:]))
        first, last = start // per_block, (end - 1) // per_block
        if first == last:  # one block: a view, like the dense cache
            return pool[table[first], start - first * per_block : end - first * per_block]
        rows = pool[self._table_tensors[slot][first : last + 1]].flatten(0, 1)
        return rows[start - first * per_block : end - first * per_block]

    def row_pool(self, key: str, name: str) -> torch.Tensor:
        return self._tensors[(key, name)].flatten(0, 1)

    def row_address(self, key: str, name: str, slots: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        per_block = self._rows_a_block(key, name)
        rows = rows.clamp(0, self.row_capacity(key, name) - 1)
        return self.block_table[slots.unsqueeze(-1), rows // per_block] * per_block + rows % per_block

    def row_capacity(self, key: str, name: str) -> int:
        return self.max_blocks_per_slot * self._rows_a_block(key, name)

    def row_blocks(self, key: str, name: str, slots: torch.Tensor) -> tuple[torch.Tensor, int]:
        return self.block_table[slots], self._rows_a_block(key, name)

    def _rows_a_block(self, key: str, name: str) -> int:
        return self.block_size // self._fields[(key, name)].ratio

    def write_rows(self, key: str, name: str, slot: int, start: int, rows: torch.Tensor) -> None:
        n = rows.shape[0]
        pool, _, per_block = self._locate(key, name, slot, start + n)
        if n == 0:
            return
        idx = torch.arange(start, start + n, device=self.device)
        pool[self._table_tensors[slot][idx // per_block], idx % per_block] = rows.to(pool.dtype)


class CacheManager:
    """Slots and blocks: allocate as sequences grow, free on finish, abort and preemption."""

    def __init__(self, spec: StateSpec, *, num_slots: int, num_blocks: int, block_size: int,
                 device: str | torch.device = "cpu", max_blocks_per_slot: int | None = None) -> None:
        self.spec, self.block_size = spec, block_size
        self.cache = PagedStateCache(spec, num_slots, num_blocks, block_size, device, max_blocks_per_slot)
        self._ratios = sorted({f.ratio for _, f in spec.fields() if f.kind == "rows"})
        self._free_slots: deque[int] = deque(range(num_slots))
        self._free_blocks: deque[int] = deque(range(num_blocks))
        self._tables: dict[int, list[int]] = {}  # slot -> blocks
        self.bytes_per_block = block_bytes(spec, block_size)
        self.bytes_per_slot = spec.bytes_per_seq()

    @classmethod
    def from_budget(cls, spec: StateSpec, *, num_slots: int, max_model_len: int, block_size: int,
                    budget_bytes: int, device: str | torch.device = "cpu") -> "CacheManager":
        """Size the pools: every slot's fixed state first, then as many blocks as the rest holds
        (capped at what ``num_slots`` sequences of ``max_model_len`` tokens can use)."""
        block_size = round_block_size(spec, block_size)
        per_block, per_slot = block_bytes(spec, block_size), spec.bytes_per_seq()
        per_seq_blocks = -(-max_model_len // block_size)
        cap = num_slots * per_seq_blocks
        left = budget_bytes - num_slots * per_slot
        num_blocks = cap if per_block == 0 else min(cap, max(left, 0) // per_block)
        if num_blocks < per_seq_blocks:
            need = num_slots * per_slot + per_seq_blocks * per_block
            raise ConfigError(
                f"state memory budget of {budget_bytes} bytes is too small: {num_slots} slots take "
                f"{num_slots * per_slot} bytes and one sequence of max_model_len={max_model_len} tokens needs "
                f"{per_seq_blocks} blocks of {per_block} bytes; give at least {need} bytes, or lower "
                "max_num_seqs or max_model_len", "state_memory_bytes")
        return cls(spec, num_slots=num_slots, num_blocks=num_blocks, block_size=block_size, device=device,
                   max_blocks_per_slot=per_seq_blocks)

    # ------------------------------------------------------------------ slots ----
    def allocate_slot(self) -> int | None:
        if not self._free_slots:
            return None
        slot = self._free_slots.popleft()
        self._tables[slot] = []
        return slot

    def free(self, slot: int) -> None:
        """Give back a slot and every block it holds."""
        self._free_blocks.extend(self._tables.pop(slot))
        self._free_slots.append(slot)

    # ----------------------------------------------------------------- blocks ----
    def blocks_for(self, num_tokens: int) -> int:
        """Blocks a sequence of ``num_tokens`` tokens needs (the largest over its rows fields)."""
        return max((-(-(num_tokens // r) // (self.block_size // r)) for r in self._ratios), default=0)

    def blocks_short(self, slot: int, num_tokens: int) -> int:
        """Blocks ``slot`` must still get to hold ``num_tokens`` tokens (0 when it has them)."""
        return max(0, self.blocks_for(num_tokens) - len(self._tables[slot]))

    def grow(self, slot: int, num_tokens: int) -> bool:
        """Allocate so ``slot`` holds ``num_tokens`` tokens; False (and nothing taken) when short."""
        need = self.blocks_short(slot, num_tokens)
        if need > len(self._free_blocks):
            return False
        self._tables[slot].extend(self._free_blocks.popleft() for _ in range(need))
        return True

    def reserve_padding_slot(self) -> int:
        """A slot and one block no request will ever get, for the padding rows of a captured
        decode step (standalone/cuda_graphs.py): every entry of its block table points at
        that block, so whatever row a padding row writes lands there."""
        slot = self.allocate_slot()
        if slot is None or not self.grow(slot, self.block_size):
            raise ConfigError("no free slot and block left to reserve for decode padding", "max_num_seqs")
        c = self.cache
        c.block_table[slot] = self._tables[slot][0]
        return slot

    def table(self, slot: int) -> list[int]:
        return list(self._tables[slot])

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_blocks)

    def usage(self) -> CacheUsage:
        c = self.cache
        return CacheUsage(block_size=self.block_size, num_blocks=c.num_blocks,
                          used_blocks=c.num_blocks - len(self._free_blocks), num_slots=c.num_slots,
                          used_slots=c.num_slots - len(self._free_slots), bytes_per_block=self.bytes_per_block,
                          bytes_per_slot=self.bytes_per_slot)


def state_budget_bytes(device: torch.device | str, cpu_bytes: int, gpu_memory_utilization: float) -> int:
    """CPU: the configured byte budget. GPU: what the process may still take of
    ``gpu_memory_utilization`` of the device once the model is loaded."""
    device = torch.device(device)
    if device.type != "cuda":
        return cpu_bytes
    total = torch.cuda.get_device_properties(device).total_memory
    return int(total * gpu_memory_utilization) - torch.cuda.memory_reserved(device)
