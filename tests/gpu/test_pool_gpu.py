"""The compressors' softmax pooling (kernels/triton_pool.py) on CUDA against the torch reference,
at the V4 HCA / CSA and V4.1 compressor shapes."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


@pytest.mark.parametrize("N,R,C", [(32, 128, 512), (32, 8, 1024), (1, 2, 512), (300, 4, 128), (7, 256, 64)])
def test_softmax_pool_matches_reference(N, R, C):
    g = torch.Generator(device="cuda").manual_seed(N + R)
    kv = torch.randn(N, R, C, device="cuda", generator=g)
    s = torch.randn(N, R, C, device="cuda", generator=g) * 4
    s[:, R // 2 + 1:, : C // 3] = float("-inf")
    assert kernels.chosen("softmax_pool", kv, s) == "triton"
    got, want = kernels.softmax_pool(kv, s), reference.softmax_pool(kv, s)
    bound = 1e-6 * reference.softmax_pool(kv.abs(), s)
    ratio = float(((got - want).abs() / bound).max())
    print(f"REPORT pool N={N} R={R} C={C}: max |err| / (1e-6 sum |kv p|) = {ratio:.2f}")
    assert ratio <= 1.0
    if N > 1:  # an entry alone == batched
        assert torch.equal(kernels.softmax_pool(kv[1:2], s[1:2]), got[1:2])
