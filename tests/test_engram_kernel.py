"""The Triton ``engram_gate`` (kernels/triton_engram.py) under Triton's CPU interpreter against the torch
reference (kernels.reference.engram_gate), fp32: the same operations but for the order of the three sums
over D, so the outputs agree to a few fp32 ulps; with and without a token mask (a masked token passes
through unchanged), a width that does not fill the kernel's power-of-two tile, and a control (the key of
another stream) that must differ. bf16 on the GPU: tests/gpu/test_engram_gpu.py."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels.reference import engram_gate as reference
from deepinfer_adapters.kernels.triton_engram import engram_gate

g = torch.Generator().manual_seed(0)
checked = 0
for T, hc, D, masked in ((3, 4, 64, False), (5, 2, 96, True), (1, 4, 256, False)):
    x = torch.randn(T, hc, D, generator=g) * 2
    kv = torch.randn(T, (hc + 1) * D, generator=g)
    qw, kw = torch.rand(hc, D, generator=g) + 0.5, torch.rand(hc, D, generator=g) + 0.5
    mask = torch.arange(T) % 2 == 0 if masked else None
    want, got = reference(x, kv, qw, kw, 1e-6, mask), engram_gate(x, kv, qw, kw, 1e-6, mask)
    assert got.shape == x.shape and got.dtype == x.dtype
    err = float((got - want).abs().max() / want.abs().max())  # a few fp32 ulps of the largest output
    assert err < 1e-6, (T, hc, D, err)
    assert not torch.equal(got, x)  # the gate adds something
    if masked:
        assert torch.equal(got[~mask], x[~mask])
    swapped = torch.cat([kv[:, D:2 * D], kv[:, :D], kv[:, 2 * D:]], 1)  # streams 0 and 1 trade keys
    assert (engram_gate(x, swapped, qw, kw, 1e-6, mask)[:, :2] - got[:, :2]).abs().max() > 1e-4
    checked += 1
print("OK", checked)
"""


def test_engram_gate_kernel_matches_the_reference_under_the_interpreter():
    assert run_interpreted(SCRIPT).split() == ["OK", "3"]
