"""The compressors' softmax pooling kernel (kernels/triton_pool.py) under Triton's CPU
interpreter against the reference: fp32 sums in another order, so within a few ulps of
sum |kv p|; -inf rows (empty state) weigh nothing. (tests/gpu/test_pool_gpu.py: compiled.)"""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_pool
g = torch.Generator().manual_seed(0)
shapes = [(3, 4, 512), (2, 256, 40), (5, 2, 1024), (1, 1, 16), (4, 128, 96)]
for N, R, C in shapes:
    kv = torch.randn(N, R, C, generator=g)
    s = torch.randn(N, R, C, generator=g) * 4
    s[:, R // 2:, : C // 3] = float("-inf")  # rows of a state not filled yet
    got, want = triton_pool.softmax_pool(kv, s), reference.softmax_pool(kv, s)
    bound = 1e-6 * reference.softmax_pool(kv.abs(), s) + 1e-30
    nan = want.isnan()  # a column of -inf only (R = 1 here): NaN, as torch's softmax gives
    assert torch.equal(got.isnan(), nan) and bool(nan.any()) == (R == 1)
    assert got.shape == want.shape and bool(((got - want).abs()[~nan] <= bound[~nan]).all()), (N, R, C)
    # a strided view (the overlap compressor's concatenated halves are contiguous; slices are not)
    wide_kv = torch.randn(N, R, 2 * C, generator=g)
    assert torch.allclose(triton_pool.softmax_pool(wide_kv[..., :C], s), reference.softmax_pool(wide_kv[..., :C], s),
                          rtol=1e-5, atol=1e-6, equal_nan=True)
print("OK", len(shapes))
"""


def test_softmax_pool_kernel_matches_the_reference_under_the_interpreter():
    assert "OK 5" in run_interpreted(SCRIPT)
