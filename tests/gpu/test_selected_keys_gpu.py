"""``selected_keys`` on CUDA: the Triton kernel against the torch reference, bit for bit (a copy and an index),
at V4.1's decode shapes and with a pool in another dtype than the window (the cast rounds as torch's)."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


@pytest.mark.parametrize("B,W,k,d,R", [(1, 128, 512, 512, 4104), (8, 128, 512, 512, 8 * 2052), (3, 7, 5, 40, 17)])
@pytest.mark.parametrize("pool_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("paged", [False, True])
def test_selected_keys_matches_reference(B, W, k, d, R, pool_dtype, paged):
    """A dense cache's table (a slot is one block of R // B rows) and a paged one (blocks of up to 16 rows,
    shuffled); picks up to past the capacity (clamped) and sequences that have seen only some of them."""
    g = torch.Generator(device="cuda").manual_seed(B + k)
    window = torch.randn(B, W, d, device="cuda", generator=g).bfloat16()
    valid = torch.rand(B, W, device="cuda", generator=g) > 0.2
    pool = torch.randn(R, d, device="cuda", generator=g).to(pool_dtype)
    capacity = R // B
    if paged:
        rows_a_block = min(16, capacity)
        blocks = capacity // rows_a_block
        table = torch.randperm(R // rows_a_block, device="cuda", generator=g)[: B * blocks].view(B, blocks)
        capacity = blocks * rows_a_block
    else:
        rows_a_block, table = capacity, torch.randperm(B, device="cuda", generator=g).unsqueeze(-1)
    picked = torch.randint(0, capacity + 4, (B, k), device="cuda", generator=g).sort(-1).values
    visible = torch.randint(0, capacity + 1, (B,), device="cuda", generator=g)
    args = (window, valid, pool, picked, visible, table, rows_a_block, capacity)
    assert kernels.chosen("selected_keys", *args) == "triton"
    keys, index = kernels.selected_keys(*args)
    ref_keys, ref_index = reference.selected_keys(*args)
    assert torch.equal(keys, ref_keys) and torch.equal(index, ref_index)
