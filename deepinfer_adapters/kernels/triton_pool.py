"""Triton backend of ``softmax_pool`` (CUDA fp32; registered as "triton"): the compressors'
softmax-weighted sum over a block's rows, one kernel.

The torch version is a softmax over the rows (dim 1 of [N, R, C]: PyTorch's strided
"spatial" softmax, 90 us for the V4 HCA compressor's [32, 128, 512] at a 32-token decode
step, H200 profile, session 6), a product and a sum; this kernel took 12.8 us there. Here one program per (entry, block of
channels) holds the [R, BLOCK_C] tile: the column maxima, exp (libdevice expf, torch's),
the column sums, one division per value (as torch's softmax divides), then the weighted
sum -- each column alone, with tile shapes set by R and C only, so an entry's result never
depends on the others (batch-invariant; the decode and forward paths pool with the same
per-column arithmetic). The sums run in another order than torch's: fp32 ulps.

Triton is imported lazily (importing ``deepinfer_adapters`` needs no GPU stack).
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.triton_support import interpreting, pdl_launch, triton_available

TILE = 8192  # values of a [R, BLOCK_C] tile (32 per thread at 8 warps)
MAX_ROWS = 1024


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    if not interpreting():
        from triton.language.extra import libdevice

    @triton.jit
    def softmax_pool_kernel(KV, S, OUT, R, C, stride_kn, stride_kr, stride_sn, stride_sr, stride_on,
                            R_PAD: tl.constexpr, BLOCK_C: tl.constexpr, INTERPRET: tl.constexpr):
        pdl_start()
        n = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        rows = tl.arange(0, R_PAD)
        mask = (rows < R)[:, None] & (cols < C)[None, :]
        s = tl.load(S + n * stride_sn + rows[:, None] * stride_sr + cols[None, :], mask=mask, other=float("-inf"))
        if INTERPRET:
            e = tl.exp(s - tl.max(s, axis=0)[None, :])
        else:
            e = libdevice.exp(s - tl.max(s, axis=0)[None, :])
        p = tl.div_rn(e, tl.sum(e, axis=0)[None, :])
        kv = tl.load(KV + n * stride_kn + rows[:, None] * stride_kr + cols[None, :], mask=mask, other=0.0)
        tl.store(OUT + n * stride_on + cols, tl.sum(kv * p, axis=0), mask=cols < C)

    return triton, softmax_pool_kernel


def softmax_pool(kv: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """See ``reference.softmax_pool``: kv, score [N, R, C] fp32 -> [N, C] fp32."""
    triton, kernel = _kernel()
    N, R, C = kv.shape
    kv = kv if kv.stride(-1) == 1 else kv.contiguous()
    score = score if score.stride(-1) == 1 else score.contiguous()
    out = torch.empty(N, C, device=kv.device, dtype=torch.float32)
    if N and C:
        r_pad = triton.next_power_of_2(max(R, 1))
        block_c = max(16, min(triton.next_power_of_2(C), TILE // r_pad))
        kernel[(N, triton.cdiv(C, block_c))](
            kv, score, out, R, C, kv.stride(0), kv.stride(1), score.stride(0), score.stride(1), out.stride(0),
            R_PAD=r_pad, BLOCK_C=block_c, INTERPRET=interpreting(), num_warps=8, enable_fp_fusion=False, **pdl_launch())
    return out


def supports(kv: torch.Tensor, score: torch.Tensor) -> bool:
    return (kv.is_cuda and score.is_cuda and kv.dim() == 3 and kv.shape == score.shape
            and kv.dtype == score.dtype == torch.float32 and 0 < kv.shape[1] <= MAX_ROWS and triton_available())


register("softmax_pool", "triton", softmax_pool, supports=supports, priority=10)
