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


TORCH_ORDER_SCRIPT = r"""
import math
import torch
from deepinfer_adapters.kernels import triton_topk


def rule(row, k):
    # torch's CUDA top-k set, stated: rank by value with -0.0 below +0.0 and NaN above all,
    # the lower index first among equal ranks; the picks in index order
    rank = lambda v: (1, 0.0, 0) if math.isnan(v) else (0, v, math.copysign(1.0, v) > 0)  # noqa: E731
    order = sorted(range(len(row)), key=lambda i: rank(row[i]), reverse=True)  # stable: ties keep index order
    return sorted(order[:k])


g = torch.Generator().manual_seed(2)
cases = []
for n, m, k in [(3, 100, 7), (2, 1024, 512), (1, 33, 33), (2, 17, 0)]:
    s = torch.randn(n, m, generator=g)
    s[:, ::5] = float("-inf")
    s[:, 1::7] = 0.5
    s[:, 2::11] = 0.0
    s[:, 3::11] = -0.0
    cases.append((s, k))
cases.append((torch.tensor([[0.0, -0.0, 0.0, -0.0, -1.0, 2.0]]), 3))
cases.append((torch.tensor([[1.0, float("nan"), float("inf"), -float("nan"), 1.0]]), 3))
b = torch.randn(2, 300, generator=g).bfloat16()
b[:, ::3] = 1.0
b[:, 1::4] = -0.0
cases.append((b, 40))
for s, k in cases:
    idx, val = triton_topk.topk_torch_order(s, k)
    want = [rule(row.float().tolist(), k) for row in s]
    assert idx.tolist() == want, (tuple(s.shape), k)
    assert torch.equal(val.view(torch.int16 if s.dtype == torch.bfloat16 else torch.int32),
                       s.gather(-1, idx).view(torch.int16 if s.dtype == torch.bfloat16 else torch.int32))
assert triton_topk.topk_torch_order(cases[4][0], 3)[0].tolist() == [[0, 2, 5]]  # +0.0 above -0.0
assert triton_topk.topk_torch_order(cases[5][0], 3)[0].tolist() == [[1, 2, 3]]  # both NaNs above inf
print("OK", len(cases))
"""


def test_topk_torch_order_kernel_follows_the_stated_cuda_rule_under_the_interpreter():
    """The rule the kernel states for torch's CUDA top-k (tests/gpu/test_topk_gpu.py checks it
    against torch.topk itself): -0.0 below +0.0, NaN above all, the lower index among ties."""
    assert "OK 7" in run_interpreted(TORCH_ORDER_SCRIPT)


@pytest.mark.parametrize("m", [1, 7, 32, 33, 65, 1000, 1026, 1300, 4104, 8192, 16383, 16384])
@pytest.mark.parametrize("split", [False, True])
def test_gluon_topk_shape_covers_the_row_in_powers_of_two(monkeypatch, m, split):
    """The Gluon kernel's program shape (it cannot run in the interpreter: tests/gpu/test_topk_gpu.py runs it):
    warps x 32 lanes x (scores a thread in the first part + in the second) covers the row, all powers of two, at
    most MAX_WARPS warps, never more lanes than one power-of-two block (32 at least); one part without
    ``SPLIT_ROW``, and with it a row just past a power of two in fewer lanes than the block."""
    from deepinfer_adapters.kernels import gluon_topk

    monkeypatch.setattr(gluon_topk, "SPLIT_ROW", split)
    warps, per, tail = gluon_topk.shape(m)
    block = max(32, 1 << (m - 1).bit_length())
    covered = 32 * warps * (per + tail)
    assert m <= covered <= block
    assert all(v & (v - 1) == 0 for v in (warps, per, tail)) and 1 <= warps <= gluon_topk.MAX_WARPS and per >= 1
    assert tail == 0 if not split else (tail < per and 32 * warps * per == block // 2) or tail == 0
    if split and m in (1026, 4104):
        assert covered <= 0.625 * block


def test_gluon_topk_is_not_picked_off_the_gpu():
    import torch

    from deepinfer_adapters import kernels

    assert kernels.chosen("topk_lowest_index", torch.zeros(2, 64), 8) != "gluon"
    assert kernels.chosen("topk_torch_order", torch.zeros(2, 64), 8) != "gluon"
