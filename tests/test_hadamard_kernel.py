"""The Triton ``hadamard`` (kernels/triton_hadamard.py) under Triton's CPU interpreter: the same fp32
bits as the torch reference (kernels.reference.hadamard) for widths 2-1024, row counts that do not fill
the last program, 3-D inputs, and bf16 inputs (whose transform runs in fp32, so the reference's bf16
result is the kernel's fp32 result rounded); a control feeds it a permuted input. The interpreter's own
fp32 -> bf16 cast does not round to nearest even, so the bf16 output is checked bit for bit on the GPU
(tests/gpu/test_hadamard_gpu.py)."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels.reference import hadamard as reference
from deepinfer_adapters.kernels.triton_hadamard import hadamard

g = torch.Generator().manual_seed(0)
checked = 0
for d, shape, dtype in ((2, (3,), torch.float32), (32, (5, 3), torch.bfloat16), (128, (37,), torch.bfloat16),
                        (128, (2, 7), torch.float32), (1024, (9,), torch.bfloat16)):
    x = (torch.randn(*shape, d, generator=g) * 3).to(dtype)
    want, got = reference(x), hadamard(x.float())
    assert got.dtype == torch.float32 and got.shape == x.shape
    assert torch.equal(got.to(dtype).view(torch.uint8), want.view(torch.uint8)), (d, shape, dtype)
    assert torch.equal(got.view(torch.int32), reference(x.float()).view(torch.int32)), (d, shape, dtype)
    assert hadamard(x).dtype == dtype
    assert not torch.equal(hadamard(x.flip(-1).float()), got)  # a control: the order of the inputs matters
    checked += 1
print("OK", checked)
"""


def test_hadamard_kernel_is_the_reference_bit_for_bit_under_the_interpreter():
    assert run_interpreted(SCRIPT).split() == ["OK", "5"]
