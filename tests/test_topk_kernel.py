"""The Triton top-k kernel's algorithm (kernels/triton_topk.py) under Triton's CPU interpreter,
against the reference sort: ties to the lower index, -0.0 tying with 0.0, -inf rows, bf16.
(tests/gpu/test_topk_gpu.py runs the compiled kernel on the GPU.)"""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_topk
g = torch.Generator().manual_seed(0)
cases = []
for n, m, k in [(3, 100, 7), (2, 4096, 512), (1, 33, 33), (4, 1000, 1), (2, 17, 0)]:
    s = torch.randn(n, m, generator=g)
    s[:, ::5] = float("-inf")
    s[:, 1::7] = 0.5
    cases.append((s, k))
cases.append((torch.full((2, 50), float("-inf")), 10))
cases.append((torch.tensor([[0.0, -0.0, 0.0, -0.0, -1.0, 2.0]]), 3))
b = torch.randn(2, 300, generator=g).bfloat16()
b[:, ::3] = 1.0
cases.append((b, 40))
for s, k in cases:
    i1, v1 = reference.topk_lowest_index(s, k)
    i2, v2 = triton_topk.topk_lowest_index(s, k)
    assert torch.equal(i1, i2) and torch.equal(v1, v2), (tuple(s.shape), k, i1, i2)
assert reference.topk_lowest_index(cases[-2][0], 3)[0].tolist() == [[0, 1, 5]]
print("OK", len(cases))
"""


def test_topk_kernel_matches_the_reference_sort_under_the_interpreter():
    assert "OK 8" in run_interpreted(SCRIPT)


SORT_SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_topk
g = torch.Generator().manual_seed(1)
shapes = [(3, 512), (1, 7), (2, 3, 100), (4, 1)]
for shape in shapes:
    x = torch.stack([torch.randperm(5000, generator=g)[:shape[-1]] for _ in range(int(torch.tensor(shape[:-1]).prod()))])
    x = x.view(shape)
    assert torch.equal(triton_topk.sort_rows(x), reference.sort_rows(x)), shape
print("OK", len(shapes))
"""


def test_sort_rows_kernel_matches_torch_sort_under_the_interpreter():
    """The reference tie rule's top-k picks (distinct indices) put in ascending order."""
    assert "OK 4" in run_interpreted(SORT_SCRIPT)
