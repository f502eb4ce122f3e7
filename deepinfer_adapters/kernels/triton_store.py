"""Triton backend of ``store_rows`` (CUDA; registered as "triton"): a decode step's compressed rows written into
their pool where the token completes its group, in one launch.

Why: in torch the masked store is a gather of the rows there, a ``where`` and an ``index_put``, three index
kernels of ~4-5 us each at B=1 on the H200 (session 21's timeline), and a ratio-r source's index keys are on
the critical path of the layers that run the indexer. One program copies one row (cast to the pool's dtype:
rounded to nearest, as torch's) or, where it is not kept, writes nothing.

Triton is imported lazily (importing ``deepinfer_adapters`` needs no GPU stack).
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.triton_support import FLOAT_DTYPES, pdl_launch, triton_available


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def store_rows_kernel(POOL, ADDR, VALUE, KEEP, C, stride_p, stride_v, HAS_KEEP: tl.constexpr,
                          BLOCK_C: tl.constexpr):
        pdl_start()
        b = tl.program_id(0)
        cols = tl.arange(0, BLOCK_C)
        mask = cols < C
        if HAS_KEEP:
            mask = mask & (tl.load(KEEP + b + 0 * cols) != 0)  # the row's flag, as a block
        row = tl.load(ADDR + b)
        value = tl.load(VALUE + b.to(tl.int64) * stride_v + cols, mask=mask)
        tl.store(POOL + row * stride_p + cols, value.to(POOL.dtype.element_ty), mask=mask)

    return triton, store_rows_kernel


def store_rows(pool: torch.Tensor, addr: torch.Tensor, value: torch.Tensor, keep: torch.Tensor | None = None) -> None:
    """See ``reference.store_rows``."""
    triton, kernel = _kernel()
    B, C = value.shape
    if B:
        kernel[(B,)](pool, addr, value, value if keep is None else keep, C, pool.stride(0), value.stride(0),
                     HAS_KEEP=keep is not None, BLOCK_C=triton.next_power_of_2(C), num_warps=4, **pdl_launch())


def supports(pool: torch.Tensor, addr: torch.Tensor, value: torch.Tensor, keep: torch.Tensor | None = None) -> bool:
    return (pool.is_cuda and pool.dim() == 2 and value.dim() == 2 and value.shape[1] == pool.shape[1]
            and pool.stride(1) == 1 and value.stride(1) == 1
            and pool.dtype in FLOAT_DTYPES and value.dtype in FLOAT_DTYPES
            and addr.dtype == torch.long and addr.shape == value.shape[:1] and addr.is_contiguous()
            and (keep is None or (keep.dtype == torch.bool and keep.shape == addr.shape and keep.is_contiguous()))
            and triton_available())


register("store_rows", "triton", store_rows, supports=supports, priority=10)
