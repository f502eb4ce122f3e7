"""Triton backend of ``selected_keys`` (CUDA; registered as "triton"): a V4.1 compressed layer's decode keys --
its window keys, then the compressed rows the step's selections pick from the pool -- and their attention index,
in one launch.

Why: in torch that was a gather of the picked rows, two concatenations (keys; which keys exist) and the index's
``where`` with its fill, five small kernels on the critical path of every layer that runs the indexer (~2 us
each at B=1 on the H200, session 20's timeline). One program copies BLOCK_J keys of one sequence (a window key
or a pool row, cast to the window's dtype: a copy, so the same bits) and writes their index entries. It finds a
pick's pool row from the cache's block table and masks the picks a sequence has not seen (after the top-k, in
torch: a compare, a clamp and an add, three more launches on the critical path).

Triton is imported lazily (importing ``deepinfer_adapters`` needs no GPU stack).
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.triton_support import FLOAT_DTYPES, pdl_launch, triton_available

TILE = 4096  # key values a program


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def selected_keys_kernel(WIN, VALID, POOL, PICKED, VISIBLE, TABLE, KEYS, INDEX, W, k, d, rows_a_block, capacity,
                             stride_wb, stride_ww, stride_vb, stride_p, stride_pb, stride_tb, stride_kb, stride_kj,
                             BLOCK_J: tl.constexpr, BLOCK_D: tl.constexpr):
        pdl_start()
        b = tl.program_id(0).to(tl.int64)
        j = tl.program_id(1) * BLOCK_J + tl.arange(0, BLOCK_J)
        K = W + k
        inside = j < K
        in_window = j < W
        jw = tl.where(in_window, j, 0)
        jp = tl.where(in_window, 0, j - W)
        from_pool = inside & (j >= W)
        picked = tl.load(PICKED + b * stride_pb + jp, mask=from_pool, other=0)
        row = tl.minimum(tl.maximum(picked, 0), capacity - 1)
        block = tl.load(TABLE + b * stride_tb + row // rows_a_block, mask=from_pool, other=0)
        addr = block * rows_a_block + row % rows_a_block
        seen = picked < tl.load(VISIBLE + b)
        exists = tl.where(in_window, tl.load(VALID + b * stride_vb + jw, mask=inside & in_window, other=0) != 0,
                          seen)
        tl.store(INDEX + b * K + j, tl.where(exists, b * K + j, -1), mask=inside)
        cols = tl.arange(0, BLOCK_D)[None, :]
        cmask = cols < d
        win = tl.load(WIN + b * stride_wb + jw[:, None] * stride_ww + cols, mask=(inside & in_window)[:, None] & cmask,
                      other=0.0)
        row = tl.load(POOL + addr[:, None] * stride_p + cols, mask=from_pool[:, None] & cmask, other=0.0)
        dt = KEYS.dtype.element_ty
        keys = tl.where(in_window[:, None], win.to(dt), row.to(dt))  # a downcast rounds to nearest, as torch's
        tl.store(KEYS + b * stride_kb + j[:, None] * stride_kj + cols, keys, mask=inside[:, None] & cmask)

    return triton, selected_keys_kernel


def selected_keys(window: torch.Tensor, window_valid: torch.Tensor, pool: torch.Tensor, picked: torch.Tensor,
                  visible: torch.Tensor, table: torch.Tensor, rows_a_block: int,
                  capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``reference.selected_keys``."""
    triton, kernel = _kernel()
    B, W, d = window.shape
    k = picked.shape[1]
    keys = torch.empty(B, W + k, d, device=window.device, dtype=window.dtype)
    index = torch.empty(B, W + k, device=window.device, dtype=torch.long)
    if B and W + k:
        block_d = triton.next_power_of_2(d)
        block_j = max(1, TILE // block_d)
        kernel[(B, triton.cdiv(W + k, block_j))](
            window, window_valid, pool, picked, visible, table, keys, index, W, k, d, rows_a_block, capacity,
            window.stride(0), window.stride(1), window_valid.stride(0), pool.stride(0), picked.stride(0),
            table.stride(0), keys.stride(0), keys.stride(1), BLOCK_J=block_j, BLOCK_D=block_d, num_warps=4,
            **pdl_launch())
    return keys, index


def supports(window: torch.Tensor, window_valid: torch.Tensor, pool: torch.Tensor, picked: torch.Tensor,
             visible: torch.Tensor, table: torch.Tensor, rows_a_block: int, capacity: int) -> bool:
    B = window.shape[0]
    return (window.is_cuda and window.dim() == 3 and pool.dim() == 2 and pool.shape[1] == window.shape[2]
            and window.stride(2) == 1 and pool.stride(1) == 1 and window.dtype in FLOAT_DTYPES
            and window_valid.dtype == torch.bool and window_valid.shape == window.shape[:2]
            and window_valid.stride(1) == 1
            and picked.dtype == visible.dtype == table.dtype == torch.long and picked.dim() == 2
            and picked.shape[0] == B and picked.stride(1) == 1 and visible.shape == (B,) and visible.is_contiguous()
            and table.dim() == 2 and table.shape[0] == B and table.stride(1) == 1
            and rows_a_block >= 1 and capacity >= 1 and triton_available())


register("selected_keys", "triton", selected_keys, supports=supports, priority=10)
