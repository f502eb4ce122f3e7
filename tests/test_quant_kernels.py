"""The Triton FP4 round-trip kernel (kernels/fp8_triton_jit.py, used by kernels/triton_quant.py)
under Triton's CPU interpreter, bitwise against model_impl/quant.py: both scale formats, bf16 and
fp32, zeros of both signs, tiny and saturating blocks, E2M1 ties; rows contiguous as a whole (one long row)
and not. tests/gpu/test_quant_gpu.py runs the compiled kernels on the GPU."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.model_impl import quant
from deepinfer_adapters.kernels import triton_quant as tq
g = torch.Generator().manual_seed(0)
checked = 0
for dtype, bits in ((torch.float32, torch.int32), (torch.bfloat16, torch.int16)):
    x = torch.randn(7, 512, generator=g) * torch.logspace(-6, 4, 512)
    x[0, :16] = 0.0
    x[0, 16:32] = -0.0
    x[1, :32] = 1e-30
    x[2, ::7] = 0.25 * 2.0**-3
    x[3, :16] = 6 * 448 * 1.02
    x[4] = torch.arange(512) % 13 * 0.25 - 1.5  # many exact E2M1 ties
    x = x.to(dtype)
    for ref, fast, block in ((quant.fp4_roundtrip_e8m0, tq.fp4_roundtrip_e8m0, 32),
                             (quant.fp4_roundtrip_e4m3, tq.fp4_roundtrip_e4m3, 16)):
        r, f = ref(x, block), fast(x, block)
        assert torch.equal(r.view(bits), f.view(bits)), (dtype, block, (r.float() - f.float()).abs().max())
        checked += 1
# the indexer's query shape (rows of 128 taken as one long row, several programs), and rows that are not
# contiguous as a whole (taken row by row)
q = (torch.randn(3, 40, 128, generator=g) * torch.logspace(-3, 3, 128)).bfloat16()
strided = torch.randn(5, 256, generator=g).bfloat16()[:, :128]
for x in (q, strided):
    for ref, fast, block in ((quant.fp4_roundtrip_e8m0, tq.fp4_roundtrip_e8m0, 32),
                             (quant.fp4_roundtrip_e4m3, tq.fp4_roundtrip_e4m3, 16)):
        r, f = ref(x, block), fast(x, block)
        assert f.shape == x.shape and torch.equal(r.view(torch.int16), f.view(torch.int16)), (x.shape, block)
        checked += 1
print("OK", checked)
"""


def test_fp4_roundtrip_kernel_is_bitwise_the_reference_under_the_interpreter():
    assert "OK 8" in run_interpreted(SCRIPT)
