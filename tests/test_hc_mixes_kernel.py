"""The Triton ``hc_mixes`` (kernels/triton_hc.py: hc_mix_logits' partials, then one launch per token that
merges them and runs the Sinkhorn passes) under Triton's CPU interpreter: the same bits as the two launches
it replaces (``hc_mix_logits`` then ``hc_split_sinkhorn``), with the K split (few tokens) and without
(one split); within fp32 rounding of the torch reference; a control (another token's partials) must
differ. The H200 run: tests/gpu/test_hc_norm_rope_gpu.py."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_hc

triton_hc.sm_count = lambda device: 132  # the H200's, for mix_config (no GPU here)
g = torch.Generator().manual_seed(0)
hc, iters, eps = 4, 20, 1e-6
checked = 0
for T, D in ((1, 64), (3, 96), (70, 8)):  # the last: K = 32, one split
    x = torch.randn(T, hc, D, generator=g)
    fn = torch.randn((2 + hc) * hc, hc * D, generator=g) / (hc * D) ** 0.5
    scale, base = 0.5 + torch.rand(3, generator=g), torch.randn((2 + hc) * hc, generator=g) * 0.1
    split = triton_hc.mix_config(T, hc * D, False, 132).splits > 1
    got = triton_hc.hc_mixes(x, fn, 1e-6, scale, base, hc, iters, eps)
    two = triton_hc.hc_split_sinkhorn(triton_hc.hc_mix_logits(x, fn, 1e-6), scale, base, hc, iters, eps)
    want = reference.hc_mixes(x, fn.double(), 1e-6, scale, base, hc, iters, eps)
    for a, b, c in zip(got, two, want):
        assert a.shape == c.shape and torch.equal(a, b), (T, D)
        assert float((a - c).abs().max()) < 1e-4, (T, D, float((a - c).abs().max()))
    if T > 1:  # a control: token 0's streams swapped with token 1's move their mixes
        x2 = x.clone()
        x2[[0, 1]] = x[[1, 0]]
        assert not torch.equal(triton_hc.hc_mixes(x2, fn, 1e-6, scale, base, hc, iters, eps)[2], got[2])
    checked += split
print("OK", checked)
"""


def test_hc_mixes_kernel_is_the_two_launches_bit_for_bit_under_the_interpreter():
    assert run_interpreted(SCRIPT).split() == ["OK", "2"]
