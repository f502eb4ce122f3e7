"""Triton ``topk_lowest_index`` on CUDA against the reference sort: the same indices and values."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


@pytest.mark.parametrize("n,m,k", [(1, 2048, 512), (8, 4096, 512), (300, 1000, 64), (3, 16384, 2048), (5, 7, 7)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_topk_matches_reference(n, m, k, dtype):
    g = torch.Generator(device="cuda").manual_seed(n + m)
    s = torch.randn(n, m, device="cuda", generator=g).to(dtype)
    s[:, ::9] = float("-inf")
    s[:, 1::13] = 0.25
    assert kernels.chosen("topk_lowest_index", s, k) == "triton"
    idx, val = kernels.topk_lowest_index(s, k)
    ref_idx, ref_val = reference.topk_lowest_index(s, k)
    assert torch.equal(idx, ref_idx) and torch.equal(val, ref_val)


@pytest.mark.parametrize("shape", [(1, 512), (8, 512), (300, 1024), (5, 3)])
def test_sort_rows_equals_torch_sort(shape):
    g = torch.Generator(device="cuda").manual_seed(shape[0])
    x = torch.stack([torch.randperm(70000, device="cuda", generator=g)[:shape[1]] for _ in range(shape[0])])
    assert kernels.chosen("sort_rows", x) == "triton"
    assert torch.equal(kernels.sort_rows(x), torch.sort(x, dim=-1).values)
