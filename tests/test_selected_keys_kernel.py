"""``selected_keys``' Triton kernel (kernels/triton_keys.py) under Triton's CPU interpreter against the
reference: window keys then the pool's rows at the addresses, cast to the window's dtype; the index over the
keys that exist. Mixed dtypes here only upcast: the interpreter rounds fp32 -> bf16 toward zero, the GPU to
nearest (tests/gpu/test_selected_keys_gpu.py runs the compiled kernel, the downcast included)."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_keys
g = torch.Generator().manual_seed(0)


def tables(B, rows_a_block, capacity, R):
    # a block table of distinct pool blocks per sequence, as a paged cache's (R rows in the pool)
    blocks = -(-capacity // rows_a_block)
    return torch.randperm(R // rows_a_block, generator=g)[: B * blocks].view(B, blocks)


cases = 0
# (B, W, k, d, rows a block, capacity, pool rows, window dtype, pool dtype): paged tables, a dense one (one block a
# slot), picks past the capacity and below 0 (clamped), none seen, no window, no picks
for B, W, k, d, rab, cap, R, wdt, pdt in [(1, 8, 16, 64, 4, 20, 40, torch.bfloat16, torch.bfloat16),
                                          (3, 5, 7, 24, 2, 8, 30, torch.float32, torch.float32),
                                          (2, 4, 3, 32, 10, 10, 20, torch.float32, torch.bfloat16),
                                          (2, 0, 6, 16, 3, 9, 18, torch.float32, torch.float32),
                                          (2, 6, 0, 16, 3, 9, 18, torch.bfloat16, torch.bfloat16)]:
    window = torch.randn(B, W, d, generator=g).to(wdt)
    valid = torch.rand(B, W, generator=g) > 0.3
    pool = torch.randn(R, d, generator=g).to(pdt)
    picked = torch.randint(-1, cap + 3, (B, k), generator=g)
    visible = torch.randint(0, cap + 1, (B,), generator=g)
    table = tables(B, rab, cap, R)
    keys, index = triton_keys.selected_keys(window, valid, pool, picked, visible, table, rab, cap)
    ref_keys, ref_index = reference.selected_keys(window, valid, pool, picked, visible, table, rab, cap)
    assert keys.dtype == wdt and torch.equal(keys, ref_keys), (B, W, k, d)
    assert torch.equal(index, ref_index), (index, ref_index)
    cases += 1
# strided views (a window gathered from a ring, picks a slice) take their strides; a dense table (slots, one block)
big = torch.randn(2, 10, 48, generator=g)
window, valid = big[:, 2:7, :32], torch.ones(2, 5, dtype=torch.bool)
picked = torch.randint(0, 3, (2, 9), generator=g)[:, :4]
pool, visible = torch.randn(6, 64, generator=g)[:, :32], torch.zeros(2, dtype=torch.long)
table = torch.tensor([1, 0]).unsqueeze(-1)
keys, index = triton_keys.selected_keys(window, valid, pool, picked, visible, table, 3, 3)
ref_keys, ref_index = reference.selected_keys(window, valid, pool, picked, visible, table, 3, 3)
assert torch.equal(keys, ref_keys) and torch.equal(index, ref_index) and (index[:, 5:] == -1).all()
print("OK", cases + 1)
"""


def test_selected_keys_kernel_matches_the_reference_under_the_interpreter():
    assert "OK 6" in run_interpreted(SCRIPT)


def test_reference_selected_keys_layout():
    """The reference itself on a hand-made case: keys in order, each pick found through the block table (2 rows a
    block: row 3 of the sequence is row 1 of its block 1, pool block 0 -> pool row 1; row 0 -> pool block 2, row 4),
    index b (W + k) + j where a key exists (a window key valid, a pick below ``visible``)."""
    import torch

    from deepinfer_adapters.kernels import reference

    window = torch.tensor([[[1.0], [2.0]]])
    pool = torch.tensor([[10.0], [20.0], [30.0], [40.0], [50.0], [60.0]])
    keys, index = reference.selected_keys(window, torch.tensor([[False, True]]), pool, torch.tensor([[3, 0]]),
                                          torch.tensor([2]), torch.tensor([[2, 0]]), 2, 4)
    assert keys.flatten().tolist() == [1.0, 2.0, 20.0, 50.0]
    assert index.tolist() == [[-1, 1, -1, 3]]
