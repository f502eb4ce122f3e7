"""The packed-FP4 weight tile of the Triton GEMM (fp8_triton_jit.py ``e2m1_tile``: the MoE's
packed experts, unpacked in registers) under Triton's CPU interpreter: every byte value, both
nibbles, against ``quant.unpack_fp4``, bit for bit. (The whole MoE cannot run here: the
interpreter's FP8 casts, which the activation round trip uses, do not round as the GPU does.)
tests/gpu/test_moe_gpu.py runs the packed experts through the compiled MoE: the same bits as
the same experts converted to E4M3, and close to the reference."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
import triton
import triton.language as tl
from deepinfer_adapters.kernels.fp8_triton_jit import e2m1_tile
from deepinfer_adapters.model_impl.quant import unpack_fp4

@triton.jit
def unpack_kernel(W, OUT, N, stride_wn, stride_on, KSTEP: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    mask_n = cols < N
    kb = tl.program_id(0) * KSTEP
    w = e2m1_tile(W + cols[None, :] * stride_wn, kb, mask_n, KSTEP)  # [KSTEP, BLOCK_N]
    ks = kb + tl.arange(0, KSTEP)
    tl.store(OUT + cols[None, :] * stride_on + ks[:, None], w, mask=mask_n[None, :])

N, K, KSTEP = 8, 128, 64
packed = torch.arange(N * K // 2, dtype=torch.int64).remainder(256).to(torch.uint8).view(N, K // 2)
packed = packed[:, torch.randperm(K // 2, generator=torch.Generator().manual_seed(0))].contiguous()
assert packed.unique().numel() == 256  # every byte: both nibbles, every sign
out = torch.full((N, K), float("nan"))
unpack_kernel[(K // KSTEP,)](packed, out, N, packed.stride(0), out.stride(0), KSTEP=KSTEP, BLOCK_N=8)
want = unpack_fp4(packed)
assert torch.equal(out.view(torch.int32), want.view(torch.int32)), (out, want)  # -0.0 included
swapped = unpack_fp4(((packed & 0xF) << 4) | (packed >> 4))  # the nibble order matters: a control
assert not torch.equal(out, swapped)
print("OK", int((want == 0).sum()), int(want.lt(0).sum()))
"""


def test_e2m1_tile_unpacks_every_byte_as_unpack_fp4_under_the_interpreter():
    out = run_interpreted(SCRIPT)
    zeros, negative = (int(v) for v in out.split()[1:3])
    assert out.startswith("OK") and zeros > 0 and negative > 0
