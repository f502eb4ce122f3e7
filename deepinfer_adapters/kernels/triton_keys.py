"""Triton backend of ``selected_keys`` (CUDA; registered as "triton"): a V4.1 compressed layer's decode keys --
its window keys, then the compressed rows the step's selections pick from the pool -- and their attention index,
in one launch.

Why: in torch that was a gather of the picked rows, two concatenations (keys; which keys exist) and the index's
``where`` with its fill, five small kernels on the critical path of every layer that runs the indexer (~2 us
each at B=1 on the H200, session 20's timeline). One program copies BLOCK_J keys of one sequence (a window key
or a pool row, cast to the window's dtype: a copy, so the same bits) and writes their index entries.

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
    def selected_keys_kernel(WIN, VALID, POOL, ADDR, SEEN, KEYS, INDEX, W, k, d, stride_wb, stride_ww, stride_vb,
                             stride_p, stride_ab, stride_sb, stride_kb, stride_kj, BLOCK_J: tl.constexpr,
                             BLOCK_D: tl.constexpr):
        pdl_start()
        b = tl.program_id(0).to(tl.int64)
        j = tl.program_id(1) * BLOCK_J + tl.arange(0, BLOCK_J)
        K = W + k
        inside = j < K
        in_window = j < W
        jw = tl.where(in_window, j, 0)
        jp = tl.where(in_window, 0, j - W)
        from_pool = inside & (j >= W)
        addr = tl.load(ADDR + b * stride_ab + jp, mask=from_pool, other=0)
        exists = tl.where(in_window, tl.load(VALID + b * stride_vb + jw, mask=inside & in_window, other=0) != 0,
                          tl.load(SEEN + b * stride_sb + jp, mask=from_pool, other=0) != 0)
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


def selected_keys(window: torch.Tensor, window_valid: torch.Tensor, pool: torch.Tensor, addr: torch.Tensor,
                  seen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``reference.selected_keys``."""
    triton, kernel = _kernel()
    B, W, d = window.shape
    k = addr.shape[1]
    keys = torch.empty(B, W + k, d, device=window.device, dtype=window.dtype)
    index = torch.empty(B, W + k, device=window.device, dtype=torch.long)
    if B and W + k:
        block_d = triton.next_power_of_2(d)
        block_j = max(1, TILE // block_d)
        kernel[(B, triton.cdiv(W + k, block_j))](
            window, window_valid, pool, addr, seen, keys, index, W, k, d, window.stride(0), window.stride(1),
            window_valid.stride(0), pool.stride(0), addr.stride(0), seen.stride(0), keys.stride(0), keys.stride(1),
            BLOCK_J=block_j, BLOCK_D=block_d, num_warps=4, **pdl_launch())
    return keys, index


def supports(window: torch.Tensor, window_valid: torch.Tensor, pool: torch.Tensor, addr: torch.Tensor,
             seen: torch.Tensor) -> bool:
    return (window.is_cuda and window.dim() == 3 and pool.dim() == 2 and pool.shape[1] == window.shape[2]
            and window.stride(2) == 1 and pool.stride(1) == 1 and addr.dtype == torch.long and addr.dim() == 2
            and window_valid.dtype == seen.dtype == torch.bool and window_valid.shape == window.shape[:2]
            and seen.shape == addr.shape and addr.shape[0] == window.shape[0]
            and window_valid.stride(1) == 1 and seen.stride(1) == 1 and addr.stride(1) == 1
            and window.dtype in FLOAT_DTYPES and triton_available())


register("selected_keys", "triton", selected_keys, supports=supports, priority=10)
