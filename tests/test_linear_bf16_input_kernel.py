"""``triton_linear``'s kernel given a bf16 x (the MoE gate's input, for an fp32 result) under Triton's CPU
interpreter: the same output as for x.float() -- hi is x and lo is 0 either way. (The interpreter's bf16
products are not the GPU's, so this checks that the two inputs take the same arithmetic, not the values;
the values against the reference: tests/gpu/test_linear_gpu.py.) And a bf16 result (``BF16_RESULTS``, on since
session 28): the fp32 result rounded once, unsplit (stored by the kernel) and K-split (by the split sum), within the
interpreter's bf16 cast (it truncates: one bf16 ulp)."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_linear

g = torch.Generator().manual_seed(2)
for M, N, K in ((1, 384, 512), (16, 96, 300), (40, 200, 256)):
    x = torch.randn(M, K, generator=g).bfloat16()
    w = (torch.randn(N, K, generator=g) / K**0.5).bfloat16()
    a, b = triton_linear.linear(x, w), triton_linear.linear(x.float(), w)
    print(M, N, K, int(a.dtype == torch.float32), int(torch.equal(a, b)), int(bool(torch.isfinite(a).all())))
"""


def test_bf16_input_takes_the_arithmetic_of_its_fp32_copy():
    lines = [line.split() for line in run_interpreted(SCRIPT).strip().splitlines()]
    assert len(lines) == 3
    assert all(line[3:] == ["1", "1", "1"] for line in lines), lines


BF16_SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_linear

g = torch.Generator().manual_seed(3)
for M, N, K in ((1, 512, 2048), (3, 384, 256), (16, 70, 96)):  # K split (16 splits), unsplit, a partial tile
    x = torch.randn(M, K, generator=g).bfloat16()
    w = (torch.randn(N, K, generator=g) / K**0.5).bfloat16()
    got, fp32 = triton_linear.linear(x, w, out_dtype=torch.bfloat16), triton_linear.linear(x, w)
    ulp = torch.ldexp(torch.ones_like(fp32), torch.frexp(fp32)[1] - 8)
    close = bool(((got.float() - fp32).abs() <= ulp).all())
    print(M, N, K, int(got.dtype == torch.bfloat16), int(got.shape == fp32.shape), int(close))
"""


def test_bf16_result_is_the_fp32_result_rounded_once():
    lines = [line.split() for line in run_interpreted(BF16_SCRIPT).strip().splitlines()]
    assert len(lines) == 3
    assert all(line[3:] == ["1", "1", "1"] for line in lines), lines
