"""``sparse_attn_selected`` (kernels/triton_sparse_attn.py, ``SELECTED_IN_PLACE``): a V4.1 compressed layer's decode
attention reading its window keys and its picked compressed rows where they are (the pool through a paged block
table) reads the tiles of the composed op -- ``selected_keys``' copy, then the split attention over it with the
output rotated back -- so it has its bits: for bf16 pools (a pool of another dtype is copied first), picks past the capacity, below 0 and
unseen, a window with missing keys and a pick count that leaves a block part-filled -- its tiles checked here under
the CPU interpreter, the whole attention on the GPU (tests/gpu/test_sparse_attn_gpu.py); and the dispatch copies
first wherever the in-place path is off or does not apply (the CPU: "torch" answers False)."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
import triton
import triton.language as tl
from deepinfer_adapters.kernels import triton_keys, triton_sparse_attn as tri

tri._kernels()
selected_tile = tri.selected_tile  # the attention kernel's tile load, in a kernel of the test's own
tri.tl = tl  # called from outside its closure, the interpreter looks for triton.language in its module


@triton.jit
def tiles(WIN, VALID, POOL, PICKS, VISIBLE, TABLE, OUT, EXISTS, K, D, W, rows_a_block, capacity, stride_wb, stride_ww,
          stride_vb, stride_pool, stride_pk, stride_tb, BLOCK_K: tl.constexpr, D_PAD: tl.constexpr):
    s = tl.program_id(0).to(tl.int64)
    kk = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, D_PAD)
    mask_d = offs_d < D
    kv, valid = selected_tile(WIN, VALID, POOL, PICKS, VISIBLE, TABLE, s, kk, K, offs_d, mask_d, W, rows_a_block,
                              capacity, stride_wb, stride_ww, stride_vb, stride_pool, stride_pk, stride_tb)
    tl.store(OUT + (s * K + kk)[:, None] * D + offs_d[None, :], kv, mask=(kk < K)[:, None] & mask_d[None, :])
    tl.store(EXISTS + s * K + kk, valid.to(tl.int8), mask=kk < K)


g = torch.Generator().manual_seed(3)
for B, W, k, d, rab, cap, R, pdt in [(1, 64, 100, 64, 4, 40, 60, torch.bfloat16), (2, 64, 70, 48, 3, 30, 90, torch.bfloat16),
                                     (3, 32, 40, 32, 5, 25, 80, torch.bfloat16), (2, 0, 10, 16, 2, 8, 20, torch.bfloat16)]:
    window = torch.randn(B, W, d, generator=g).bfloat16()
    valid = torch.rand(B, W, generator=g) > 0.2
    pool = torch.randn(R, d, generator=g).to(pdt)
    picked = torch.randint(-1, cap + 3, (B, k), generator=g)
    visible = torch.randint(cap // 2, cap + 1, (B,), generator=g)
    picked[:, -2:] = visible.unsqueeze(1) - torch.tensor([1, 0])  # the last seen row and the first unseen one
    table = torch.randperm(R // rab, generator=g)[: B * -(-cap // rab)].view(B, -1)
    keys, index = triton_keys.selected_keys(window, valid, pool, picked, visible, table, rab, cap)
    K = W + k
    out = torch.full((B, K, d), float("nan"), dtype=torch.bfloat16)
    exists = torch.full((B, K), 7, dtype=torch.int8)
    tiles[(B, triton.cdiv(K, 64))](window, valid, pool, picked, visible, table, out, exists, K, d, W, rab, cap,
                                   window.stride(0), window.stride(1), valid.stride(0), pool.stride(0),
                                   picked.stride(0), table.stride(0), BLOCK_K=64, D_PAD=triton.next_power_of_2(d))
    want = torch.where((index >= 0).unsqueeze(-1), keys, torch.zeros((), dtype=keys.dtype))
    print(B, int(torch.equal(exists.bool(), index >= 0)), int(torch.equal(out, want)),
          int(0 < int((index >= 0).sum()) < B * K))
"""


def test_the_in_place_tiles_are_the_copys_rows_under_the_interpreter():
    """``selected_tile`` -- the one new piece of the attention kernel's in-place mode -- gives each block of 64 keys
    the rows ``selected_keys`` copies (0 where a key does not exist) and which exist (its index >= 0), in blocks
    over the window, the picks, across the two and at a ragged end; picks past the capacity,
    below 0, the last seen row and the first unseen one, no window. (The attention around it is the kernel that
    ``sparse_attn`` runs, tested on the GPU: Triton's interpreter multiplies bf16 tiles wrongly on this machine.)"""
    lines = run_interpreted(SCRIPT).strip().splitlines()
    assert lines == ["1 1 1 1", "2 1 1 1", "3 1 1 1", "2 1 1 1"]


def test_the_cpu_copies_first():
    """Off the GPU no backend reads the rows in place: the model copies them (``selected_keys``) and attends the
    copy (``SelectedKeys`` never reaches ``sparse_attn_selected``'s in-place backend)."""
    window, picked = torch.zeros(1, 4, 8, dtype=torch.bfloat16), torch.zeros(1, 2, dtype=torch.long)
    assert kernels.selected_in_place(window, picked) is False
    assert kernels.chosen("selected_in_place", window, picked) == "torch"
