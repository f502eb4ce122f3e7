"""One Triton kernel: E8M0 weight scales per (1, 128) from the experts' layout [E, N, K / 128] to fp32 in the
step-major layout [E, K / 128, N] that ``gluon_moe.grouped_gemm_fp8`` copies a step's row of into its ring.
Imported only to launch (``gluon_moe.scale_steps``)."""

from __future__ import annotations

import triton
import triton.language as tl

from deepinfer_adapters.kernels.triton_pdl import pdl_start


@triton.jit
def e8m0_steps_kernel(S, OUT, N, KB, BLOCK_N: tl.constexpr, BLOCK_KB: tl.constexpr):
    """Program (expert, n block): OUT[e, kb, n] = 2^(S[e, n, kb] - 127) for the block's BLOCK_N columns and every
    step kb: the block's bytes read along their rows, the values written along the columns."""
    pdl_start()
    e = tl.program_id(0)
    n0 = tl.program_id(1) * BLOCK_N
    ns = n0 + tl.arange(0, BLOCK_N)
    kbs = tl.arange(0, BLOCK_KB)
    mask = (ns[:, None] < N) & (kbs[None, :] < KB)
    base = e.to(tl.int64) * N * KB
    byte = tl.load(S + base + ns[:, None] * KB + kbs[None, :], mask=mask, other=127)
    # the byte in the exponent field: 2^(byte - 127), exactly (0 the fp32 subnormal 2^-127; 255 NaN)
    value = tl.where(byte == 0, 2.0 ** -127, (byte.to(tl.int32) << 23).to(tl.float32, bitcast=True))
    value = tl.where(byte == 255, float("nan"), value)
    tl.store(OUT + base + kbs[None, :] * N + ns[:, None], value, mask=mask)
