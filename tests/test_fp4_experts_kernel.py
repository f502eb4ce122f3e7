"""The packed-FP4 weight tile of the Triton GEMM (fp8_triton_jit.py ``e2m1_halves``: the MoE's
packed experts, unpacked in registers) under Triton's CPU interpreter: every byte value, both
nibbles, in the span layout (quant.to_span_pairs), against ``quant.unpack_fp4`` of the stored
bytes, bit for bit: the integer unpack (the GPU runs the PTX one, ``_E2M1_LOW_PTX``, which the
GPU MoE test checks). (The whole MoE cannot run here: the interpreter's FP8 casts, which the
activation round trip uses, do not round as the GPU does.) tests/gpu/test_moe_gpu.py runs the
packed experts through the compiled MoE: the same bits as the same experts converted to E4M3,
and close to the reference."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
import triton
import triton.language as tl
from deepinfer_adapters.kernels.fp8_triton_jit import e2m1_halves
from deepinfer_adapters.model_impl.quant import fp4_span, from_span_pairs, to_span_pairs, unpack_fp4

@triton.jit
def unpack_kernel(W, OUT, N, stride_wn, stride_on, KSTEP: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    mask_n = cols < N
    kb = tl.program_id(0) * KSTEP
    lo, hi = e2m1_halves(W + cols[None, :] * stride_wn + kb // 2, mask_n, KSTEP, 1)  # [KSTEP / 2, BLOCK_N] each
    kh = kb + tl.arange(0, KSTEP // 2)
    tl.store(OUT + cols[None, :] * stride_on + kh[:, None], lo, mask=mask_n[None, :])
    tl.store(OUT + cols[None, :] * stride_on + (kh + KSTEP // 2)[:, None], hi, mask=mask_n[None, :])

checked = 0
for K in (256, 96):  # spans of 64, and of 32 where 64 does not divide K
    N, span = 6, fp4_span(K)
    stored = torch.arange(N * K // 2, dtype=torch.int64).remainder(256).to(torch.uint8).view(N, K // 2)
    stored = stored[:, torch.randperm(K // 2, generator=torch.Generator().manual_seed(K))].contiguous()
    assert K < 256 or stored.unique().numel() == 256  # every byte: both nibbles, every sign
    packed = to_span_pairs(stored)
    assert torch.equal(from_span_pairs(packed), stored)
    out = torch.full((N, K), float("nan"))
    unpack_kernel[(K // span,)](packed, out, N, packed.stride(0), out.stride(0), KSTEP=span, BLOCK_N=8)
    want = unpack_fp4(stored)
    assert torch.equal(out.view(torch.int32), want.view(torch.int32)), (K, out, want)  # -0.0 included
    plain = torch.full((N, K), float("nan"))  # a control: the stored layout read as the span layout
    unpack_kernel[(K // span,)](stored, plain, N, stored.stride(0), plain.stride(0), KSTEP=span, BLOCK_N=8)
    assert not torch.equal(plain, want)
    checked += 1
print("OK", checked, int((want == 0).sum()), int(want.lt(0).sum()))
"""


def test_e2m1_halves_unpack_every_byte_as_unpack_fp4_under_the_interpreter():
    out = run_interpreted(SCRIPT)
    checked, zeros, negative = (int(v) for v in out.split()[1:4])
    assert out.startswith("OK") and checked == 2 and zeros > 0 and negative > 0
