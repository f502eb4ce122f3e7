"""``hc_post_pre_norm``: its Triton kernel (kernels/triton_hc_post_norm.py) against the torch reference under
Triton's CPU interpreter, in float32 (the interpreter's fp32 -> bf16 casts do not round to nearest even, so the
bf16 bits are checked on the GPU: tests/gpu/test_hc_post_norm_gpu.py, against the two kernels it replaces); the
model's dispatch of the op on the CPU."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference
from tests.triton_interpreter import run_interpreted

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import arrival_counters, reference, triton_hc_post_norm as fused
arrival_counters.MIN_COUNTERS = 80  # small sets: the last case outgrows them at a few tokens
g = torch.Generator().manual_seed(0)
U = 2.0 ** -24
# up to 64 tokens: slices of 256 values (triton_hc.block_d; 320: a slice partly past D; 96: one slice wider than
# D; 1024: four slices); 70 tokens: slices of 1024
for T, D, weighted in [(1, 320, True), (3, 96, False), (2, 1024, True), (70, 64, True)]:
    y = torch.randn(T, D, generator=g) * 2
    residual = torch.randn(T, 4, D, generator=g)
    post = 2 * torch.sigmoid(torch.randn(T, 4, generator=g))
    comb = torch.softmax(torch.randn(T, 4, 4, generator=g), -1)
    pre = torch.sigmoid(torch.randn(T, 4, generator=g))
    w = 0.5 + torch.rand(D, generator=g) if weighted else None
    x, h = fused.hc_post_pre_norm(y, residual, post, comb, pre, w, 1e-6)
    x_ref, h_ref = reference.hc_post_pre_norm(y, residual, post, comb, pre, w, 1e-6)
    # the streams: five products added (another order in torch's sum): 4 u of the terms' absolute sum
    S = post.unsqueeze(-1) * y.unsqueeze(1).abs() + (comb.unsqueeze(-1) * residual.unsqueeze(-2).abs()).sum(1)
    assert x.shape == x_ref.shape and bool(((x - x_ref).abs() <= 4 * U * S).all()), (T, D, "streams")
    # the norm of the kernel's own streams (the next op's input): within 2^-19 relative, the rms_norm kernels' bound
    h_own = reference.hc_pre_norm(x, pre, w, 1e-6)
    assert h.shape == h_ref.shape and bool(((h - h_own).abs() <= 2.0 ** -19 * h_own.abs() + 1e-30).all()), (T, D)
    assert bool(((h - h_ref).abs() <= 2.0 ** -17 * h_ref.abs().clamp_min(1e-3)).all()), (T, D, "normed")
# each token's last program re-armed its counter (every case above reused the same set)
small = arrival_counters.counters(torch.device("cpu"), 1)
assert not small.any()
# a call with more tokens than the set holds gets a larger one; the smaller stays referenced (a captured graph's)
T = small.numel() + 1
y, residual = torch.randn(T, 32, generator=g), torch.randn(T, 4, 32, generator=g)
post, pre, comb = torch.rand(T, 4, generator=g), torch.rand(T, 4, generator=g), torch.rand(T, 4, 4, generator=g)
x, h = fused.hc_post_pre_norm(y, residual, post, comb, pre, None, 1e-6)
assert torch.allclose(h, reference.hc_pre_norm(x, pre, None, 1e-6), rtol=2.0 ** -19, atol=1e-30)
assert arrival_counters.counters(torch.device("cpu"), 1).numel() >= T
assert any(t is small for t in arrival_counters._OUTGROWN)
print("OK")
"""


def test_kernel_matches_the_reference_under_the_interpreter():
    pytest.importorskip("triton")
    assert "OK" in run_interpreted(SCRIPT)


def test_cpu_dispatch_composes_the_two_ops():
    """On the CPU the op runs as its two ops on their own backends (the kernel takes CUDA tensors only); the
    reference's answer is those two ops."""
    g = torch.Generator().manual_seed(1)
    y, residual = torch.randn(2, 64, generator=g), torch.randn(2, 4, 64, generator=g)
    post, pre = torch.rand(2, 4, generator=g), torch.rand(2, 4, generator=g)
    comb, w = torch.rand(2, 4, 4, generator=g), torch.rand(64, generator=g)
    assert kernels.chosen("hc_post_pre_norm", y, residual, post, comb, pre, w, 1e-6) == "composed"
    x, h = kernels.hc_post_pre_norm(y, residual, post, comb, pre, w, 1e-6)
    assert torch.equal(x, reference.hc_post(y, residual, post, comb))
    assert torch.equal(h, reference.hc_pre_norm(x, pre, w, 1e-6))
