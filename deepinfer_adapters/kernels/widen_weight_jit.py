"""One Triton kernel: a block-scaled E4M3 weight re-expressed under wider scales, for cuBLAS's block-scaled FP8 GEMM
(``fp8_blockwise``). Imported only to launch."""

from __future__ import annotations

import triton
import triton.language as tl

from deepinfer_adapters.kernels.fp8_triton_jit import pow2_reciprocal, weight_scale
from deepinfer_adapters.kernels.triton_pdl import pdl_start


@triton.jit
def widen_weight_kernel(W, S, Q, QS, N, K, stride_w, stride_s, stride_q, stride_qs, B0: tl.constexpr,
                        B1: tl.constexpr):
    """Program (128-row block, 128-column step) of W (E4M3 [N, K], E8M0 scale bytes S per (B0, B1) block): the
    tile's largest scale into QS (fp32 [N / 128, K / 128] at stride_qs a row), and each
    code times its scale's exact ratio to that one, rounded to E4M3 again, into Q. Only values falling below
    E4M3's normal range lose bits (``widen_scales``)."""
    pdl_start()
    rows = tl.program_id(0) * 128 + tl.arange(0, 128)
    cols = tl.program_id(1) * 128 + tl.arange(0, 128)
    mask = (rows < N)[:, None] & (cols < K)[None, :]
    w = tl.load(W + rows.to(tl.int64)[:, None] * stride_w + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    s = weight_scale(tl.load(S + (rows // B0).to(tl.int64)[:, None] * stride_s + (cols // B1)[None, :], mask=mask,
                             other=0), True)  # masked: 0, below any scale
    wide = tl.max(tl.max(s, 1), 0)
    tl.store(QS + tl.program_id(0) * stride_qs + tl.program_id(1), wide)
    q = (w * (s * pow2_reciprocal(wide))).to(tl.float8e4nv)
    tl.store(Q + rows.to(tl.int64)[:, None] * stride_q + cols[None, :], q, mask=mask)
