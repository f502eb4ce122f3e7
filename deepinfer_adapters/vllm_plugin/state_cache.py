"""StateCache over the cache memory vLLM allocates for us.

vLLM sizes and allocates one paged tensor per attention-like layer from the
layer's ``KVCacheSpec``. We declare a single layer for the whole model (see
``state_layer.py``) whose pages are raw bytes: one page (one vLLM block) covers
``block_size`` tokens of every "rows" field of every layer, plus one copy of
every "fixed" field. Only the fixed region of a request's *first* block is
used, and the id of that block is the request's state slot, so ``fixed()`` is a
strided view ``[num_blocks, *shape]`` over all pages and the model indexes it
by slot exactly as it indexes the dense or paged caches.

The fixed region in the other blocks is unused: that is the price of fitting
per-sequence state into vLLM's full-attention accounting (see docs/vllm.md).
Nothing here allocates cache memory; ``bind`` takes the step's block tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from deepinfer_adapters.model_impl.state import StateCache, StateField, StateSpec

ALIGN = 16  # bytes; every field starts on this boundary so byte slices view as any dtype


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass(frozen=True)
class FieldPlace:
    field: StateField
    offset: int  # bytes from the page start
    nbytes: int  # bytes this field takes in one page
    per_block: int  # rows fields: rows per block; fixed fields: 0
    ratio: int = 1  # rows fields: tokens per row


@dataclass(frozen=True)
class PageLayout:
    """Where each state field lives inside one page of ``block_size`` tokens."""

    block_size: int
    page_bytes: int
    places: dict[tuple[str, str], FieldPlace]

    @classmethod
    def build(cls, spec: StateSpec, block_size: int) -> "PageLayout":
        places: dict[tuple[str, str], FieldPlace] = {}
        offset = 0
        for key, f in spec.fields():
            if f.kind == "rows":
                if block_size % f.ratio and f.ratio % block_size:
                    raise ValueError(f"block size {block_size} and {key}.{f.name}'s ratio {f.ratio}: one must "
                                     "divide the other")
                per_block = max(1, block_size // f.ratio)  # ratio > block size: one row every ratio/B blocks
                nbytes = per_block * f.nbytes
            else:
                per_block, nbytes = 0, f.nbytes
            places[(key, f.name)] = FieldPlace(f, offset, nbytes, per_block, f.ratio)
            offset = _align(offset + nbytes)
        return cls(block_size, max(offset, ALIGN), places)

    @property
    def rows_bytes(self) -> int:
        return sum(p.nbytes for p in self.places.values() if p.field.kind == "rows")

    @property
    def fixed_bytes(self) -> int:
        return sum(p.nbytes for p in self.places.values() if p.field.kind == "fixed")


def check_block_size(spec: StateSpec, block_size: int) -> None:
    """Every rows ratio must divide the block size or be a multiple of it."""
    for key, f in spec.fields():
        if f.kind == "rows" and block_size % f.ratio and f.ratio % block_size:
            raise ValueError(f"vLLM block size {block_size} does not fit state field {key}.{f.name} (one row per "
                             f"{f.ratio} tokens): use a block size that divides or is a multiple of {f.ratio}")


class VllmStateCache(StateCache):
    """The model's StateCache over a vLLM cache tensor ``[num_blocks, page_bytes]`` (uint8)."""

    def __init__(self, spec: StateSpec, layout: PageLayout, pages: torch.Tensor) -> None:
        if pages.dtype != torch.uint8 or pages.dim() != 2 or pages.shape[1] < layout.page_bytes:
            raise ValueError(f"expected a uint8 [num_blocks, >= {layout.page_bytes}] cache tensor, got "
                             f"{pages.dtype} {list(pages.shape)}")
        self.spec, self.layout, self.pages = spec, layout, pages
        self.num_blocks = pages.shape[0]
        self.device = pages.device
        self._views: dict[tuple[str, str], torch.Tensor] = {}
        for k, p in layout.places.items():
            raw = pages[:, p.offset : p.offset + p.nbytes].view(p.field.dtype)
            shape = p.field.shape if p.field.kind == "fixed" else (p.per_block, *p.field.shape)
            self._views[k] = raw.unflatten(1, shape)
        self._tables: dict[int, torch.Tensor] = {}
        self._lens: dict[int, int] = {}

    def bind(self, tables: dict[int, torch.Tensor]) -> None:
        """slot (= first block id) -> block ids of that request, for the step about to run."""
        self._tables = tables
        self._lens = {s: int(t.numel()) for s, t in tables.items()}

    def fixed(self, key: str, name: str) -> torch.Tensor:
        return self._views[(key, name)]

    def _pool(self, key: str, name: str, slot: int, end: int) -> tuple[torch.Tensor, torch.Tensor, FieldPlace]:
        p = self.layout.places[(key, name)]
        blocks = self._lens.get(slot, 0)
        if end > 0 and ((end - 1) * p.ratio) // self.layout.block_size >= blocks:
            raise ValueError(f"state field {key}.{name}: slot {slot} holds {blocks} vLLM blocks, the step touches "
                             f"row {end - 1} (token {(end - 1) * p.ratio})")
        return self._views[(key, name)], self._tables[slot], p

    def _index(self, p: FieldPlace, table: torch.Tensor, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        tok = torch.arange(start, end, device=self.device) * p.ratio
        B = self.layout.block_size
        return table[tok // B], (tok % B) // p.ratio

    def read_rows(self, key: str, name: str, slot: int, start: int, end: int) -> torch.Tensor:
        pool, table, p = self._pool(key, name, slot, end)
        if end <= start:
            return pool.new_empty((0, *pool.shape[2:]))
        if p.ratio <= self.layout.block_size and start // p.per_block == (end - 1) // p.per_block:
            first = start // p.per_block  # one block: a view, like the dense cache
            return pool[int(table[first]), start - first * p.per_block : end - first * p.per_block]
        blocks, offs = self._index(p, table, start, end)
        return pool[blocks, offs]

    def write_rows(self, key: str, name: str, slot: int, start: int, rows: torch.Tensor) -> None:
        n = rows.shape[0]
        pool, table, p = self._pool(key, name, slot, start + n)
        if n == 0:
            return
        blocks, offs = self._index(p, table, start, start + n)
        pool[blocks, offs] = rows.to(pool.dtype)
