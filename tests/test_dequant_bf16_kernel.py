"""``dequant_bf16_kernel`` (one pass: E4M3 x block scale -> bf16, the prefill's dense-linear weights) under
Triton's CPU interpreter: with E8M0 scales (the checkpoints' kind: every product exact in bf16) the same bits
as the torch formula, for blocks that tile the weight and ones that do not (masked edges), 1 x 32 and
32 x 32 and 128 x 128 blocks. (Other fp32 scales round the product once to bf16; the interpreter's bf16 cast
does not round to nearest, so that case is checked on the GPU: tests/gpu/test_fp8_linear_gpu.py.)"""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_fp8_gemm as tg

g = torch.Generator().manual_seed(4)
for N, K, block in ((96, 256, (32, 32)), (70, 200, (32, 32)), (64, 256, (1, 32)), (130, 300, (128, 128))):
    w = (torch.randn(N, K, generator=g) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    exps = torch.randint(-12, 4, (-(-N // block[0]), -(-K // block[1])), generator=g)
    scale = (exps + 127).to(torch.uint8)  # E8M0 bytes
    want = tg.dequant_bf16(w, scale, block)  # CPU: the torch formula
    got = tg.dequant_bf16_triton(w, scale.view(torch.float8_e8m0fnu).float(), block)  # as dequant_bf16 on CUDA
    exact = w.double() * torch.pow(2.0, exps.double()).repeat_interleave(block[0], 0)[:N].repeat_interleave(block[1], 1)[:, :K]
    print(N, K, block[0], block[1], int(torch.equal(got, want)), int(torch.equal(got.double(), exact)))
"""


def test_dequant_kernel_gives_the_torch_bits_under_the_interpreter():
    lines = [line.split() for line in run_interpreted(SCRIPT).strip().splitlines()]
    assert len(lines) == 4
    assert all(line[4:] == ["1", "1"] for line in lines), lines
