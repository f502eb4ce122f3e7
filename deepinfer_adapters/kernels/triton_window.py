"""Triton backends of ``window_store_gather`` and ``window_slots`` (CUDA; registered as "triton"): a decode step's
new KV row stored into its window ring and the window's keys gathered, in one launch; and the step's ring rows
(``WindowSlots``), in one launch where torch's integer ops were ~7 at the first layer that reads a window.

Why: in torch these are an ``index_copy_`` and an ``index_select`` (~3-5 and ~2-2.6 us at B=1 on the H200, the
s25check timeline), two launches that take no part in programmatic dependent launch, between the KV projection
and the sparse attention of every layer. One program a key row: the row's last key is its sequence's new one,
taken from kv (rounded to the ring's dtype, as the store rounds it) while the same program stores it; every
other key is a ring row no program of the launch writes (``reference.window_store_gather``' contract), so no
program waits for another.

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
    def window_store_gather_kernel(ROWS, WRITE, READ, KV, KEYS, W, d, stride_r, stride_w, stride_kv, stride_k,
                                   BLOCK_D: tl.constexpr):
        pdl_start()
        i = tl.program_id(0)
        b = i // W
        cols = tl.arange(0, BLOCK_D)
        mask = cols < d
        if i % W == W - 1:  # the sequence's new key: stored, and kept as the ring holds it
            value = tl.load(KV + b.to(tl.int64) * stride_kv + cols, mask=mask).to(ROWS.dtype.element_ty)
            tl.store(ROWS + tl.load(WRITE + b * stride_w) * stride_r + cols, value, mask=mask)
        else:
            value = tl.load(ROWS + tl.load(READ + i) * stride_r + cols, mask=mask)
        tl.store(KEYS + i.to(tl.int64) * stride_k + cols, value.to(KEYS.dtype.element_ty), mask=mask)

    @triton.jit
    def window_slots_kernel(POS, SLOTS, WRITE, READ, VALID, INDEX, size, W, W_PAD: tl.constexpr):
        pdl_start()
        b = tl.program_id(0).to(tl.int64)
        j = tl.arange(0, W_PAD)
        inside = j < W
        p = tl.load(POS + b)
        pos = p - W + 1 + j
        base = tl.load(SLOTS + b) * size
        read = pos % size
        read = tl.where(read < 0, read + size, read)  # a floored modulo, as torch's (C's keeps the sign)
        tl.store(READ + b * W + j, base + read, mask=inside)
        tl.store(VALID + b * W + j, (pos >= 0).to(tl.int8), mask=inside)
        tl.store(INDEX + b * W + j, tl.where(pos >= 0, b * W + j, -1), mask=inside)
        tl.store(WRITE + b, base + p % size)

    return triton, window_store_gather_kernel, window_slots_kernel


def window_store_gather(rows: torch.Tensor, write_rows: torch.Tensor, read_rows: torch.Tensor,
                        kv: torch.Tensor) -> torch.Tensor:
    """See ``reference.window_store_gather``."""
    triton, kernel, _ = _kernel()
    B, d = kv.shape
    keys = torch.empty(read_rows.numel(), d, device=kv.device, dtype=kv.dtype)
    if B:
        # write_rows may be a strided view (e.g. the last column of the read rows viewed [B, W])
        kernel[(read_rows.numel(),)](rows, write_rows, read_rows, kv, keys, read_rows.numel() // B, d, rows.stride(0),
                                     write_rows.stride(0), kv.stride(0), keys.stride(0),
                                     BLOCK_D=triton.next_power_of_2(d), num_warps=4, **pdl_launch())
    return keys


def supports(rows: torch.Tensor, write_rows: torch.Tensor, read_rows: torch.Tensor, kv: torch.Tensor) -> bool:
    B = kv.shape[0] if kv.dim() == 2 else 0
    return (rows.is_cuda and rows.dim() == 2 and kv.dim() == 2 and kv.shape[1] == rows.shape[1]
            and rows.stride(1) == 1 and kv.stride(1) == 1 and rows.dtype in FLOAT_DTYPES and kv.dtype in FLOAT_DTYPES
            and write_rows.dtype == read_rows.dtype == torch.long and write_rows.shape == (B,)
            and read_rows.dim() == 1 and B > 0 and read_rows.numel() % B == 0
            and read_rows.is_contiguous() and triton_available())


def window_slots(positions: torch.Tensor, slots: torch.Tensor, size: int,
                 window: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """See ``reference.window_slots``: one program a sequence."""
    triton, _, kernel = _kernel()
    B, device = positions.shape[0], positions.device
    write = torch.empty(B, device=device, dtype=torch.long)
    read = torch.empty(B * window, device=device, dtype=torch.long)
    valid = torch.empty(B, window, device=device, dtype=torch.bool)
    index = torch.empty(B, window, device=device, dtype=torch.long)
    if B:
        kernel[(B,)](positions, slots, write, read, valid.view(torch.int8), index, size, window,
                     W_PAD=triton.next_power_of_2(window), num_warps=4, **pdl_launch())
    return write, read, valid, index


def supports_slots(positions: torch.Tensor, slots: torch.Tensor, size: int, window: int) -> bool:
    return (positions.is_cuda and positions.dim() == 1 and slots.shape == positions.shape
            and positions.dtype == slots.dtype == torch.long and positions.is_contiguous() and slots.is_contiguous()
            and window > 0 and size > 0 and triton_available())


register("window_store_gather", "triton", window_store_gather, supports=supports, priority=10)
register("window_slots", "triton", window_slots, supports=supports_slots, priority=10)
