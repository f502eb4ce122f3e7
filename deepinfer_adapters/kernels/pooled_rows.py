"""Rows of a state cache's pool that a kernel reads in place: each sequence's first ``count`` rows, found through the
cache's block table (``StateCache.row_blocks``), instead of gathered into a tensor first (a decode step's index keys:
the gather was a launch of its own on the critical path of every layer that runs the indexer).

``index_scores`` takes one as its keys. ``gather`` gives the rows as a tensor, the reference's way; ``pool_addresses``
is the block table's formula, which the references of the ops that read rows in place share."""

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
        rows = torch.arange(self.count, device=self.pool.device).expand(self.table.shape[0], self.count)
        return self.pool[pool_addresses(self.table, self.rows_a_block, rows)]


def pool_addresses(table: torch.Tensor, rows_a_block: int, rows: torch.Tensor) -> torch.Tensor:
    """[B, n] pool rows of sequence b's rows ``rows[b, j]`` (each within the table's rows): ``table[b, r //
    rows_a_block] * rows_a_block + r % rows_a_block`` (``StateCache.row_blocks``)."""
    return table.gather(1, rows // rows_a_block) * rows_a_block + rows % rows_a_block
