"""The Triton ``hc_post_norm`` (kernels/triton_norm_rope.py: a sublayer's output into the hc streams
and the next sublayer's input in one launch) under Triton's CPU interpreter: the same bits as the two
Triton kernels it replaces (``triton_hc.hc_post``, then ``hc_pre_norm`` on its output), within
rounding of the torch reference, rows of one and of many per program, with and without a norm
weight; a control (two tokens' post mixes swapped) must move both outputs. The H200 run:
tests/gpu/test_hc_norm_rope_gpu.py."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_hc, triton_norm_rope as nr

g = torch.Generator().manual_seed(0)
hc, eps = 4, 1e-6
cases = ((1, 64, torch.float32, True), (5, 96, torch.float32, False), (3, 128, torch.bfloat16, True),
         (9, 4096, torch.float32, True))  # 64 / 32 / 32 / 1 rows a program
for T, D, dtype, weighted in cases:
    y = torch.randn(T, D, generator=g).to(dtype)
    r = torch.randn(T, hc, D, generator=g).to(dtype)
    post = 2 * torch.rand(T, hc, generator=g)
    comb = torch.rand(T, hc, hc, generator=g)
    pre = 0.1 + torch.rand(T, hc, generator=g)
    w = 0.5 + torch.rand(D, generator=g) if weighted else None
    x, out = nr.hc_post_norm(y, r, post, comb, pre, w, eps)
    x2 = triton_hc.hc_post(y, r, post, comb)
    assert torch.equal(x, x2) and torch.equal(out, nr.hc_pre_norm(x2, pre, w, eps)), (T, D, dtype)
    x_ref, out_ref = reference.hc_post_norm(y, r, post, comb, pre, w, eps)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for got, want in ((x, x_ref), (out, out_ref)):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert float((got.float() - want.float()).abs().max()) <= tol * float(want.float().abs().max()), (T, D)
    if T > 1:  # a control
        swapped = post.clone()
        swapped[[0, 1]] = post[[1, 0]]
        x3, out3 = nr.hc_post_norm(y, r, swapped, comb, pre, w, eps)
        assert not torch.equal(x3[:2], x[:2]) and not torch.equal(out3[:2], out[:2]) and torch.equal(out3[2:], out[2:])
print("OK", len(cases))
"""


def test_hc_post_norm_kernel_is_hc_post_then_hc_pre_norm_under_the_interpreter():
    assert "OK 4" in run_interpreted(SCRIPT)
