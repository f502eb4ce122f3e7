"""``triton_index``'s kernel given each query's visible key count (the indexer's causal mask) under Triton's
CPU interpreter: the scores of the keys a query sees are the bits of the unmasked call, every other key is
-inf, whatever the key split, with shared or own keys. (The interpreter's bf16 products are not the GPU's,
so this checks the skipping and masking, not the values; the values: tests/gpu/test_index_scores_gpu.py.)"""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_index

g = torch.Generator().manual_seed(5)
H, D = 32, 128
for n, m, own, target in ((9, 300, False, 264), (9, 300, False, 1), (3, 130, True, 264), (6, 64, False, 264)):
    triton_index.TARGET_PROGRAMS = target  # 264: the keys split over programs here; 1: one range each
    q = torch.randn(n, H, D, generator=g).bfloat16()
    keys = torch.randn(*((n,) if own else ()), m, D, generator=g).bfloat16()
    w = torch.rand(n, H, generator=g).bfloat16()
    visible = torch.randint(0, m + 40, (n,), generator=g)  # in any order; 0 and past m included
    visible[0], visible[-1] = 0, m + 5
    full = triton_index.index_scores(q, keys, w)
    unseen = torch.arange(m) >= visible[:, None]
    masked = triton_index.index_scores(q, keys, w, visible)
    print(n, m, int(own), target, int(torch.equal(masked, full.masked_fill(unseen, -torch.inf))),
          int(bool(torch.isfinite(full).all())), int(bool(unseen.any() and (~unseen).any())))
"""


def test_visible_keys_keep_their_bits_and_the_rest_are_minus_inf():
    lines = [line.split() for line in run_interpreted(SCRIPT).strip().splitlines()]
    assert len(lines) == 4
    assert all(line[4:] == ["1", "1", "1"] for line in lines), lines


POOLED_SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_index
from deepinfer_adapters.kernels.pooled_rows import PooledRows

g = torch.Generator().manual_seed(6)
H, D = 32, 128
# (queries, rows a block, blocks a sequence, keys read): a paged table with shuffled blocks, a dense one (a slot one
# block), and a count that ends inside a block
for n, rows_a_block, blocks, m in ((3, 16, 9, 130), (2, 200, 1, 200), (4, 7, 5, 33)):
    pool = torch.randn(n * blocks * rows_a_block + 11, D, generator=g).bfloat16()
    table = torch.randperm(n * blocks, generator=g).view(n, blocks)
    rows = PooledRows(pool, table, rows_a_block, m)
    q = torch.randn(n, H, D, generator=g).bfloat16()
    w = torch.rand(n, H, generator=g).bfloat16()
    visible = torch.randint(1, m + 3, (n,), generator=g)
    got = triton_index.index_scores(q, rows, w, visible)
    want = triton_index.index_scores(q, rows.gather(), w, visible)
    ref = reference.index_scores(q, rows, w, visible)
    ref_gathered = reference.index_scores(q, rows.gather(), w, visible)
    print(n, m, int(torch.equal(got, want)), int(torch.equal(ref, ref_gathered)), int(got.shape == (n, m)))
"""


def test_pooled_keys_read_in_place_give_the_gathered_keys_bits():
    """``PooledRows`` keys (a decode step's index keys, read through the cache's block table): the bits of the same
    rows gathered first, on the kernel and on the reference."""
    lines = [line.split() for line in run_interpreted(POOLED_SCRIPT).strip().splitlines()]
    assert len(lines) == 3
    assert all(line[2:] == ["1", "1", "1"] for line in lines), lines


def test_pooled_rows_gather_through_the_block_table():
    import torch

    from deepinfer_adapters.kernels.pooled_rows import PooledRows

    pool = torch.arange(12.0).unsqueeze(-1)  # row i holds i
    rows = PooledRows(pool, torch.tensor([[2, 0], [1, 3]]), 3, 5)  # sequence 0: pool blocks 2 then 0, 3 rows each
    assert rows.shape == (2, 5, 1)
    assert rows.gather().squeeze(-1).tolist() == [[6, 7, 8, 0, 1], [3, 4, 5, 9, 10]]
    with pytest.raises(ValueError, match="block table holds"):
        PooledRows(pool, torch.tensor([[2, 0]]), 3, 7)
