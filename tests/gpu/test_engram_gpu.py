"""The Triton ``engram_gate`` (kernels/triton_engram.py) against the torch reference on CUDA, V4.1's
widths (4 streams x 5120): bf16 outputs round to the same value or its neighbour (the three sums over D
are added in another tree: a few fp32 ulps on the gate); fp32 within a few ulps of the largest value;
a masked token passes through unchanged."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels.reference import engram_gate as reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("T,masked", [(1, False), (8, True), (300, False)])
def test_engram_gate_kernel_matches_the_reference(T, masked, dtype):
    hc, D = 4, 5120
    g = torch.Generator(device="cuda").manual_seed(T)
    x = (torch.randn(T, hc, D, device="cuda", generator=g) * 2).to(dtype)
    kv = torch.randn(T, (hc + 1) * D, device="cuda", generator=g).to(dtype)
    qw = (torch.rand(hc, D, device="cuda", generator=g) + 0.5).bfloat16()
    kw = (torch.rand(hc, D, device="cuda", generator=g) + 0.5).bfloat16()
    mask = torch.arange(T, device="cuda") % 2 == 0 if masked else None
    assert kernels.chosen("engram_gate", x, kv, qw, kw, 1e-6, mask) == "triton"
    got = kernels.engram_gate(x, kv, qw, kw, 1e-6, mask)
    want = reference(x, kv, qw, kw, 1e-6, mask)
    assert got.dtype == dtype and got.shape == x.shape
    diff = (got.float() - want.float()).abs()
    print(f"REPORT engram_gate T={T} {dtype}: max abs {float(diff.max()):.2e}, differing {float((diff > 0).float().mean()):.1e}")
    if dtype == torch.bfloat16:
        torch.testing.assert_close(got.float(), want.float(), rtol=2.0**-7, atol=2.0**-7 * float(want.abs().max()) / 64)
    else:
        assert float(diff.max()) <= 1e-6 * float(want.float().abs().max())
    if masked:
        assert torch.equal(got[~mask], x[~mask])
