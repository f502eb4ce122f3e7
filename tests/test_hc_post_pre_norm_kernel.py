"""``hc_post_pre_norm``'s one-launch Triton kernel (kernels/triton_norm_rope.py ``post_pre_norm``) under Triton's
CPU interpreter: the same streams and the same normed input, bit for bit, as ``triton_hc.hc_post`` followed by
``hc_pre_norm``'s kernel (tests/gpu/test_hc_norm_rope_gpu.py checks the same on the GPU); and the composed op,
what the model calls, equal to the reference's two ops on the CPU."""

from __future__ import annotations

import pytest
import torch

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_hc, triton_norm_rope
g = torch.Generator().manual_seed(0)
for dtype in (torch.float32, torch.bfloat16):
    for T, hc, D, weighted in [(1, 4, 5120, True), (3, 4, 96, True), (2, 2, 64, False), (5, 4, 4096, True)]:
        y = (torch.randn(T, D, generator=g) * 2).to(dtype)
        res = torch.randn(T, hc, D, generator=g).to(dtype)
        post = torch.rand(T, hc, generator=g) * 2
        comb = torch.rand(T, hc, hc, generator=g)
        pre = torch.rand(T, hc, generator=g)
        w = torch.rand(D, generator=g) + 0.5 if weighted else None
        streams, h = triton_norm_rope.hc_post_pre_norm(y, res, post, comb, pre, w, 1e-6)
        want_streams = triton_hc.hc_post(y, res, post, comb)
        want_h = triton_norm_rope.hc_pre_norm(want_streams, pre, w, 1e-6)
        assert streams.dtype == dtype and h.shape == (T, D), (streams.dtype, h.shape)
        assert torch.equal(streams, want_streams), (dtype, T, hc, D)
        assert torch.equal(h, want_h), (dtype, T, hc, D)
print("OK")
"""


def test_one_launch_gives_the_two_kernels_bits_under_the_interpreter():
    assert "OK" in run_interpreted(SCRIPT)


def test_composed_op_is_the_references_two_ops():
    from deepinfer_adapters import kernels
    from deepinfer_adapters.kernels import reference

    g = torch.Generator().manual_seed(1)
    y, res = torch.randn(3, 256, generator=g).bfloat16(), torch.randn(3, 4, 256, generator=g).bfloat16()
    post, comb, pre = torch.rand(3, 4, generator=g), torch.rand(3, 4, 4, generator=g), torch.rand(3, 4, generator=g)
    w = torch.rand(256, generator=g)
    assert kernels.chosen("hc_post_pre_norm", y, res, post, comb, pre, w, 1e-6) == "composed"  # CPU: no fused kernel
    streams, h = kernels.hc_post_pre_norm(y, res, post, comb, pre, w, 1e-6)
    want = reference.hc_post(y, res, post, comb)
    assert torch.equal(streams, want)
    assert torch.equal(h, reference.hc_pre_norm(want, pre, w, 1e-6))
    assert not torch.equal(h, reference.hc_pre_norm(res, pre, w, 1e-6))  # the norm reads the new streams
