"""Triton backend of ``hadamard`` (V4's indexer queries and keys; registered as "triton").

The torch reference is one add, one subtract and one stack per butterfly stage, 3 x log2(d) launches
per call (21 at d = 128); V4-Flash runs it twice in each CSA layer of a decode step (~20 layers).
Here one program holds BLOCK_R rows in registers and runs the same stages in the same order: each
stage views a row as [d / 2h, 2, h], splits the pair axis and writes (a + b, a - b) back in place of
(a, b), in fp32, then the scale d^-1/2 (fp32) and the cast. Every value is computed by the same fp32
operations as the reference's, so the bits are the same (tests/test_hadamard_kernel.py under Triton's
interpreter; tests/gpu/test_hadamard_gpu.py on the GPU). Rows are independent: batch-invariant.

H200 (session 10): bit-equal to the reference, bf16 and fp32, d = 32-512, 1-8192 rows
(tests/gpu/test_hadamard_gpu.py); the V4-Flash-width decode step 2.9% faster at B = 8 and 1.8% at
B = 32 (2.841 -> 2.758 ms, 5.122 -> 5.030 ms, one graph each in one run: bench_v4_width.py --ab-pin).
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.triton_support import pdl_launch, triton_available

ENABLED = True
MAX_WIDTH = 1024
TILE = 4096  # values a program holds


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def hadamard_kernel(X, OUT, R, stride_x, stride_o, scale, D: tl.constexpr, LOG_D: tl.constexpr,
                        BLOCK_R: tl.constexpr):
        """Rows [pid * BLOCK_R, +BLOCK_R) of X [R, D] -> their normalised Walsh-Hadamard transform."""
        pdl_start()
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        mask = (rows < R)[:, None]
        cols = tl.arange(0, D)[None, :]
        y = tl.load(X + rows.to(tl.int64)[:, None] * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        for i in tl.static_range(LOG_D):  # stride h = D / 2, D / 4, ..., 1, as the reference: [D / 2h, 2, h]
            pairs = tl.permute(tl.reshape(y, [BLOCK_R, 1 << i, 2, D >> (i + 1)]), [0, 1, 3, 2])
            a, b = tl.split(pairs)
            y = tl.reshape(tl.permute(tl.join(a + b, a - b), [0, 1, 3, 2]), [BLOCK_R, D])
        out = (y * scale).to(OUT.dtype.element_ty)
        tl.store(OUT + rows.to(tl.int64)[:, None] * stride_o + cols, out, mask=mask)

    return triton, hadamard_kernel


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """See ``reference.hadamard``."""
    triton, kernel = _kernel()
    d = x.shape[-1]
    x2 = x.reshape(-1, d)
    x2 = x2 if x2.stride(-1) == 1 else x2.contiguous()
    out = torch.empty_like(x2)
    R = x2.shape[0]
    if R:
        block_r = max(1, TILE // d)
        # the scale as the reference applies it: Python's d ** -0.5 rounded to fp32 once
        kernel[(triton.cdiv(R, block_r),)](x2, out, R, x2.stride(0), out.stride(0), float(d**-0.5), D=d,
                                          LOG_D=d.bit_length() - 1, BLOCK_R=block_r, num_warps=4, **pdl_launch())
    return out.view(x.shape)


def supports(x: torch.Tensor) -> bool:
    d = x.shape[-1]
    return (ENABLED and x.is_cuda and x.dtype in (torch.bfloat16, torch.float32) and 2 <= d <= MAX_WIDTH
            and d & (d - 1) == 0 and triton_available())


register("hadamard", "triton", hadamard, supports=supports, priority=10)
