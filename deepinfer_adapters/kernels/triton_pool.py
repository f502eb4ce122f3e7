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
from deepinfer_adapters.kernels.triton_support import FLOAT_DTYPES, interpreting, pdl_launch, triton_available

TILE = 8192  # values of a [R, BLOCK_C] tile (32 per thread at 8 warps)
MAX_ROWS = 1024
# ``ring_pool`` in one launch (``ring_pool_kernel``): a V4.1 ratio-2 compressor's decode step was two ring writes,
# two ring reads, this pooling and the cast after, ~20 us on a KV source's critical path at B=1 (H200, session 20's
# timeline). Measured in session 21 (H200, 5 alternating rounds each): B=1 2.104 vs 2.110 ms composed, B=8 4.832
# vs 4.861, logits bit-identical. Off: ``kernels`` composes torch's row copies and the ``softmax_pool`` kernel
RING_POOL = True


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start, _pool  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    if not interpreting():
        from triton.language.extra import libdevice

    @triton.jit
    def _pool(s, kv, INTERPRET: tl.constexpr):
        """[R_PAD, BLOCK_C] scores (-inf past the rows) and values -> each column's softmax-weighted sum."""
        if INTERPRET:
            e = tl.exp(s - tl.max(s, axis=0)[None, :])
        else:
            e = libdevice.exp(s - tl.max(s, axis=0)[None, :])
        p = tl.div_rn(e, tl.sum(e, axis=0)[None, :])
        return tl.sum(kv * p, axis=0)

    @triton.jit
    def softmax_pool_kernel(KV, S, OUT, R, C, stride_kn, stride_kr, stride_sn, stride_sr, stride_on,
                            R_PAD: tl.constexpr, BLOCK_C: tl.constexpr, INTERPRET: tl.constexpr):
        pdl_start()
        n = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        rows = tl.arange(0, R_PAD)
        mask = (rows < R)[:, None] & (cols < C)[None, :]
        s = tl.load(S + n * stride_sn + rows[:, None] * stride_sr + cols[None, :], mask=mask, other=float("-inf"))
        kv = tl.load(KV + n * stride_kn + rows[:, None] * stride_kr + cols[None, :], mask=mask, other=0.0)
        tl.store(OUT + n * stride_on + cols, _pool(s, kv, INTERPRET), mask=cols < C)

    @triton.jit
    def ring_pool_kernel(KV, S, KV_RING, S_RING, AT, GROUP, OUT, R, C, stride_kn, stride_sn, stride_kr, stride_sr,
                         stride_g, stride_on, R_PAD: tl.constexpr, BLOCK_C: tl.constexpr, INTERPRET: tl.constexpr):
        """``ring_pool``: token n's new row written to ring row AT[n], then its group's rows GROUP[n, :R] pooled
        as ``softmax_pool_kernel`` does, the new row taken from registers (no other program writes it)."""
        pdl_start()
        n = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        cmask = cols < C
        at = tl.load(AT + n)
        kv_new = tl.load(KV + n * stride_kn + cols, mask=cmask, other=0.0)
        s_new = tl.load(S + n * stride_sn + cols, mask=cmask, other=0.0)
        tl.store(KV_RING + at * stride_kr + cols, kv_new, mask=cmask)
        tl.store(S_RING + at * stride_sr + cols, s_new, mask=cmask)
        rows = tl.arange(0, R_PAD)
        ring_row = tl.load(GROUP + n * stride_g + rows, mask=rows < R, other=0)
        new = ((ring_row == at) & (rows < R))[:, None]
        old = (rows < R)[:, None] & cmask[None, :] & ~new
        s = tl.load(S_RING + ring_row[:, None] * stride_sr + cols[None, :], mask=old, other=float("-inf"))
        kv = tl.load(KV_RING + ring_row[:, None] * stride_kr + cols[None, :], mask=old, other=0.0)
        s = tl.where(new, s_new[None, :], s)
        kv = tl.where(new, kv_new[None, :], kv)
        tl.store(OUT + n * stride_on + cols, _pool(s, kv, INTERPRET).to(OUT.dtype.element_ty), mask=cmask)

    return triton, softmax_pool_kernel, ring_pool_kernel


def softmax_pool(kv: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """See ``reference.softmax_pool``: kv, score [N, R, C] fp32 -> [N, C] fp32."""
    triton, kernel, _ = _kernel()
    N, R, C = kv.shape
    kv = kv if kv.stride(-1) == 1 else kv.contiguous()
    score = score if score.stride(-1) == 1 else score.contiguous()
    out = torch.empty(N, C, device=kv.device, dtype=torch.float32)
    if N and C:
        r_pad, block_c = _tile(R, C)
        kernel[(N, triton.cdiv(C, block_c))](
            kv, score, out, R, C, kv.stride(0), kv.stride(1), score.stride(0), score.stride(1), out.stride(0),
            R_PAD=r_pad, BLOCK_C=block_c, INTERPRET=interpreting(), num_warps=8, enable_fp_fusion=False, **pdl_launch())
    return out


def _tile(R: int, C: int) -> tuple[int, int]:
    """(R_PAD, BLOCK_C) of both kernels: by the group's rows and the channels only."""
    import triton

    r_pad = triton.next_power_of_2(max(R, 1))
    return r_pad, max(16, min(triton.next_power_of_2(C), TILE // r_pad))


def ring_pool(kv: torch.Tensor, score: torch.Tensor, kv_ring: torch.Tensor, score_ring: torch.Tensor,
              at: torch.Tensor, group: torch.Tensor, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """See ``reference.ring_pool``: one launch for the rings' writes, their reads, the pooling and the rounding to
    ``out_dtype`` (where ``RING_POOL``), each column pooled as ``softmax_pool`` pools it, so the same bits."""
    triton, _, kernel = _kernel()
    (B, C), R = kv.shape, group.shape[1]
    out = torch.empty(B, C, device=kv.device, dtype=out_dtype)
    if B and C:
        r_pad, block_c = _tile(R, C)
        kernel[(B, triton.cdiv(C, block_c))](
            kv, score, kv_ring, score_ring, at, group, out, R, C, kv.stride(0), score.stride(0), kv_ring.stride(0),
            score_ring.stride(0), group.stride(0), out.stride(0), R_PAD=r_pad, BLOCK_C=block_c,
            INTERPRET=interpreting(), num_warps=8, enable_fp_fusion=False, **pdl_launch())
    return out


def supports_ring_pool(kv: torch.Tensor, score: torch.Tensor, kv_ring: torch.Tensor, score_ring: torch.Tensor,
                       at: torch.Tensor, group: torch.Tensor, out_dtype: torch.dtype = torch.float32) -> bool:
    fp32_rows = all(t.is_cuda and t.dim() == 2 and t.dtype == torch.float32 and t.stride(1) == 1
                    for t in (kv, score, kv_ring, score_ring))
    return (RING_POOL and fp32_rows and out_dtype in FLOAT_DTYPES
            and kv.shape == score.shape and kv_ring.shape == score_ring.shape and kv.shape[1] == kv_ring.shape[1]
            and at.dtype == group.dtype == torch.long and at.shape == kv.shape[:1] and group.dim() == 2
            and group.shape[0] == kv.shape[0] and group.stride(1) == 1 and at.stride(0) == 1
            and 0 < group.shape[1] <= MAX_ROWS and triton_available())


def supports(kv: torch.Tensor, score: torch.Tensor) -> bool:
    return (kv.is_cuda and score.is_cuda and kv.dim() == 3 and kv.shape == score.shape
            and kv.dtype == score.dtype == torch.float32 and 0 < kv.shape[1] <= MAX_ROWS and triton_available())


register("softmax_pool", "triton", softmax_pool, supports=supports, priority=10)
register("ring_pool", "triton", ring_pool, supports=supports_ring_pool, priority=10)
