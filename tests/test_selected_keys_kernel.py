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
cases = 0
for B, W, k, d, R, wdt, pdt in [(1, 8, 16, 64, 40, torch.bfloat16, torch.bfloat16),
                                (3, 5, 7, 24, 30, torch.float32, torch.float32),
                                (2, 4, 3, 32, 10, torch.float32, torch.bfloat16),
                                (2, 0, 6, 16, 9, torch.float32, torch.float32),
                                (2, 6, 0, 16, 9, torch.bfloat16, torch.bfloat16)]:
    window = torch.randn(B, W, d, generator=g).to(wdt)
    valid = torch.rand(B, W, generator=g) > 0.3
    pool = torch.randn(R, d, generator=g).to(pdt)
    addr = torch.randint(0, R, (B, k), generator=g)
    seen = torch.rand(B, k, generator=g) > 0.4
    keys, index = triton_keys.selected_keys(window, valid, pool, addr, seen)
    ref_keys, ref_index = reference.selected_keys(window, valid, pool, addr, seen)
    assert keys.dtype == wdt and torch.equal(keys, ref_keys), (B, W, k, d)
    assert torch.equal(index, ref_index), (index, ref_index)
    cases += 1
# strided views (a window gathered from a ring, addresses a slice) take their strides
big = torch.randn(2, 10, 48, generator=g)
window, valid = big[:, 2:7, :32], torch.ones(2, 5, dtype=torch.bool)
addr = torch.randint(0, 6, (2, 9), generator=g)[:, :4]
pool, seen = torch.randn(6, 64, generator=g)[:, :32], torch.zeros(2, 4, dtype=torch.bool)
keys, index = triton_keys.selected_keys(window, valid, pool, addr, seen)
ref_keys, ref_index = reference.selected_keys(window, valid, pool, addr, seen)
assert torch.equal(keys, ref_keys) and torch.equal(index, ref_index) and (index[:, 5:] == -1).all()
print("OK", cases + 1)
"""


def test_selected_keys_kernel_matches_the_reference_under_the_interpreter():
    assert "OK 6" in run_interpreted(SCRIPT)


def test_reference_selected_keys_layout():
    """The reference itself on a hand-made case: keys in order, index b (W + k) + j where a key exists."""
    import torch

    from deepinfer_adapters.kernels import reference

    window = torch.tensor([[[1.0], [2.0]]])
    pool = torch.tensor([[10.0], [20.0], [30.0]])
    keys, index = reference.selected_keys(window, torch.tensor([[False, True]]), pool, torch.tensor([[2, 0]]),
                                          torch.tensor([[True, False]]))
    assert keys.flatten().tolist() == [1.0, 2.0, 30.0, 10.0]
    assert index.tolist() == [[-1, 1, 2, -1]]
