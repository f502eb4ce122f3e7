"""The Triton ``hadamard`` (kernels/triton_hadamard.py) against
the torch reference on CUDA: bit for bit, bf16 and fp32, V4's index width (128) and others, from one
row to a prefill's worth."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels.reference import hadamard as reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("d", [32, 128, 512])
@pytest.mark.parametrize("rows", [1, 37, 64 * 33, 8192])
def test_hadamard_kernel_is_the_reference_bit_for_bit(rows, d, dtype):
    g = torch.Generator(device="cuda").manual_seed(rows + d)
    x = (torch.randn(rows, 2, d, device="cuda", generator=g) * 3).to(dtype)
    kernels.use_backend("hadamard", "triton")
    try:
        got = kernels.hadamard(x)
    finally:
        kernels.use_backend("hadamard", None)
    want = reference(x)
    assert kernels.chosen("hadamard", x) == "triton"  # the default on CUDA
    assert got.dtype == dtype and got.shape == x.shape
    assert torch.equal(got, want)
