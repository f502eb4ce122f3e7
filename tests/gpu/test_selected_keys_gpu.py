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
def test_selected_keys_matches_reference(B, W, k, d, R, pool_dtype):
    g = torch.Generator(device="cuda").manual_seed(B + k)
    window = torch.randn(B, W, d, device="cuda", generator=g).bfloat16()
    valid = torch.rand(B, W, device="cuda", generator=g) > 0.2
    pool = torch.randn(R, d, device="cuda", generator=g).to(pool_dtype)
    addr = torch.randint(0, R, (B, k), device="cuda", generator=g)
    seen = torch.rand(B, k, device="cuda", generator=g) > 0.3
    assert kernels.chosen("selected_keys", window, valid, pool, addr, seen) == "triton"
    keys, index = kernels.selected_keys(window, valid, pool, addr, seen)
    ref_keys, ref_index = reference.selected_keys(window, valid, pool, addr, seen)
    assert torch.equal(keys, ref_keys) and torch.equal(index, ref_index)
