"""``hc_mix_logits`` with bf16 x given its weight as three bf16 pieces loaded from memory (``PRESPLIT_FN``,
``fn_pieces``) instead of split in every program's every step: the pieces sum to the fp32 weight exactly;
under Triton's CPU interpreter both forms take the same arithmetic where the split is the same (a weight
exact in bf16: the interpreter's fp32 -> bf16 cast truncates where the GPU's and torch's round to nearest)
and both stay within fp32 rounding of the reference otherwise. (The interpreter's bf16 products are not the
GPU's: the values on the H200 are tests/gpu/test_hc_norm_rope_gpu.py's.)"""

from __future__ import annotations

import pytest
import torch

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_hc

triton_hc.sm_count = lambda device: 132  # the H200's, for mix_config (no GPU here)
g = torch.Generator().manual_seed(1)
hc = 4
for T, D, bf16_exact in ((70, 64, True), (130, 96, False)):
    x = torch.randn(T, hc, D, generator=g).bfloat16()
    fn = torch.randn(24, hc * D, generator=g) / (hc * D) ** 0.5
    fn = fn.bfloat16().float() if bf16_exact else fn
    triton_hc.PRESPLIT_FN = False
    inline = triton_hc.hc_mix_logits(x, fn, 1e-6)
    triton_hc.PRESPLIT_FN = True
    loaded = triton_hc.hc_mix_logits(x, fn, 1e-6)
    again = triton_hc.hc_mix_logits(x, fn, 1e-6)  # the cached pieces
    ref = reference.hc_mix_logits(x.double(), fn.double(), 1e-6)
    near = max(float((r - ref).abs().max() / ref.abs().max()) for r in (inline, loaded)) < 1e-5
    print(T, int(torch.equal(inline, loaded) or not bf16_exact), int(torch.equal(loaded, again)), int(near))
"""


def test_loaded_pieces_take_the_arithmetic_of_the_inline_split():
    lines = [line.split() for line in run_interpreted(SCRIPT).strip().splitlines()]
    assert len(lines) == 2 and all(line[1:] == ["1", "1", "1"] for line in lines), lines


def test_pieces_sum_to_the_fp32_weight_and_are_cached_per_tensor():
    from deepinfer_adapters.kernels import triton_hc

    fn = torch.randn(24, 640, dtype=torch.float64) * 3
    pieces = triton_hc.fn_pieces(fn)
    assert pieces.shape == (3, 24, 640) and pieces.dtype == torch.bfloat16
    assert torch.equal(pieces.double().sum(0), fn.float().double())  # exact, no rounding left
    assert triton_hc.fn_pieces(fn) is pieces
    fn.mul_(2)  # written to: split again
    assert torch.equal(triton_hc.fn_pieces(fn).double().sum(0), fn.float().double())
