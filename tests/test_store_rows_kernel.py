"""``store_rows`` (a decode step's compressed rows stored where the token completes its group): the Triton kernel
(kernels/triton_store.py) under Triton's CPU interpreter writes exactly the reference's pool -- kept rows
copied (to fp32 or in the value's own dtype), the rest untouched. (tests/gpu/test_store_rows_gpu.py runs the
compiled kernel, with the rounding to bf16.)"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference
from tests.triton_interpreter import run_interpreted

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_store
g = torch.Generator().manual_seed(0)
cases = 0
for B, R, C, value_dtype, pool_dtype, with_keep in [(1, 9, 128, torch.float32, torch.float32, True),
                                                     (5, 40, 40, torch.bfloat16, torch.bfloat16, True),
                                                     (4, 12, 24, torch.bfloat16, torch.float32, True),
                                                     (3, 7, 16, torch.float32, torch.float32, False)]:
    pool = torch.randn(R, C, generator=g).to(pool_dtype)
    addr = torch.randperm(R, generator=g)[:B]
    value = torch.randn(B, C, generator=g).to(value_dtype)
    keep = torch.arange(B) % 2 == 0 if with_keep else None
    got, want = pool.clone(), pool.clone()
    triton_store.store_rows(got, addr, value, keep)
    reference.store_rows(want, addr, value, keep)
    changed = (got != pool).any(1)
    assert torch.equal(got, want), (B, C, (got.float() - want.float()).abs().max())
    assert changed.sum() == (B if keep is None else int(keep.sum()))  # kept rows written, nothing else
    cases += 1
print("OK", cases)
"""


def test_store_rows_kernel_writes_the_references_pool_under_the_interpreter():
    pytest.importorskip("triton")
    assert "OK 4" in run_interpreted(SCRIPT)


def test_store_rows_writes_kept_rows_only():
    """The reference and the default backend on a hand-made pool: row 3 takes the kept value, rounded to the
    pool's dtype; row 0 (not kept) keeps its content; without ``keep`` every row is written."""
    value = torch.tensor([[1.0, 2.0], [1.0 + 2.0**-10, -3.0]])
    addr, keep = torch.tensor([0, 3]), torch.tensor([False, True])
    for fn in (reference.store_rows, kernels.store_rows):
        pool = torch.full((4, 2), 7.0, dtype=torch.bfloat16)
        fn(pool, addr, value, keep)
        assert torch.equal(pool[0], torch.tensor([7.0, 7.0], dtype=torch.bfloat16))
        assert torch.equal(pool[3], torch.tensor([1.0, -3.0], dtype=torch.bfloat16))  # 1 + 2^-10 rounds to 1
        assert torch.equal(pool[1:3], torch.full((2, 2), 7.0, dtype=torch.bfloat16))
        fn(pool, addr, value)
        assert torch.equal(pool[0], torch.tensor([1.0, 2.0], dtype=torch.bfloat16))
