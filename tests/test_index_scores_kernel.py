"""The Triton ``index_scores`` reading keys through row addresses (``key_rows``: a decode step's keys where
the cache pool holds them) under Triton's CPU interpreter: the same bits as the kernel on the gathered
keys, for row counts that leave the last key block partly masked; a control (other rows) must differ.
fp32 inputs (the interpreter's bf16 dots are wrong; the kernel's bf16 roundings are the same on both
sides). The bf16 run on the H200: tests/gpu/test_index_scores_gpu.py."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels.triton_index import index_scores

g = torch.Generator().manual_seed(0)
H, D, P = 16, 32, 300
checked = 0
for n, m in ((1, 5), (3, 70), (2, 128)):
    q = torch.randn(n, H, D, generator=g)
    pool = torch.randn(P, D, generator=g)
    rows = torch.randint(0, P, (n, m), generator=g)
    w = torch.randn(n, H, generator=g) / 16
    got = index_scores(q, pool, w, rows)
    assert got.shape == (n, m)
    assert torch.equal(got, index_scores(q, pool[rows], w)), (n, m)
    assert not torch.equal(index_scores(q, pool, w, (rows + 1) % P), got), (n, m)
    checked += 1
print("OK", checked)
"""


def test_addressed_index_keys_are_the_gathered_keys_under_the_interpreter():
    assert run_interpreted(SCRIPT).split() == ["OK", "3"]
