"""The cache round trips' Triton kernels (kernels/triton_quant.py) on CUDA, bitwise against
model_impl/quant.py, and chosen by the dispatcher where they apply."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.model_impl import quant

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


def _x(shape, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(*shape, device="cuda", generator=g) * torch.logspace(-6, 4, shape[-1], device="cuda")
    flat = x.view(-1, shape[-1])
    flat[0, :16] = 0.0
    flat[0, 16:32] = -0.0
    flat[-1, :32] = 6 * 448 * 1.02
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(1, 512), (3, 5, 128), (300, 512)])
@pytest.mark.parametrize("op,block", [("fp8_roundtrip", 32), ("fp8_roundtrip", 64), ("fp4_roundtrip_e8m0", 32),
                                      ("fp4_roundtrip_e4m3", 16)])
def test_round_trip_kernels_are_bitwise_the_reference(op, block, shape, dtype):
    x = _x(shape, dtype, sum(shape) + block)
    assert kernels.chosen(op, x, block) == "triton"
    fast = getattr(kernels, op)(x, block)
    ref = getattr(quant, op)(x, block)
    bits = torch.int16 if dtype == torch.bfloat16 else torch.int32
    assert fast.shape == ref.shape and torch.equal(fast.view(bits), ref.view(bits))


def test_fp8_round_trip_with_dims_keeps_the_reference():
    x = _x((4, 512), torch.bfloat16, 1)
    assert kernels.chosen("fp8_roundtrip", x, 64, slice(0, 448)) == "torch"
