"""Rows of a state cache's pool that a kernel reads in place: each sequence's first ``count`` rows, found through the
cache's block table (``StateCache.row_blocks``), instead of gathered into a tensor first (a decode step's index keys:
the gather was a launch of its own on the critical path of every layer that runs the indexer).

``index_scores`` takes one as its keys. ``gather`` gives the rows as a tensor, the reference's way."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PooledRows:
    """Sequence b's rows 0 .. count - 1: row r at ``pool[table[b, r // rows_a_block] * rows_a_block + r %
    rows_a_block]``. pool [P, d]; table [B, blocks] int64; count at most the table's rows (blocks x rows_a_block)."""

    pool: torch.Tensor
    table: torch.Tensor
    rows_a_block: int
    count: int

    def __post_init__(self) -> None:
        if self.count > self.table.shape[1] * self.rows_a_block:
            raise ValueError(f"{self.count} rows a sequence, but its block table holds "
                             f"{self.table.shape[1]} x {self.rows_a_block}")

    @property
    def shape(self) -> tuple[int, int, int]:
        """The gathered rows' shape, [B, count, d]."""
        return self.table.shape[0], self.count, self.pool.shape[-1]

    def gather(self) -> torch.Tensor:
        """[B, count, d]: the rows, in the pool's dtype."""
        rows = torch.arange(self.count, device=self.pool.device)
        return self.pool[self.table[:, rows // self.rows_a_block] * self.rows_a_block + rows % self.rows_a_block]
