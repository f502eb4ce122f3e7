"""The MoE pair sort (kernels/triton_moe_sort.py) under Triton's CPU interpreter against the
torch route it replaces: the same order, tiles and combine positions. (tests/gpu/test_moe_gpu.py
runs the compiled kernel through the whole MoE on the GPU.)"""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

# both sort scripts' reference: the torch route, and their routing tables against it
AGAINST_TORCH = r"""
import torch
from deepinfer_adapters.kernels import triton_moe, triton_moe_sort


def same_as_torch_route(order, tiles, pos, ids, E, bm):
    '''(order, row indices and active tiles equal to the torch route's, combine positions equal). With a
    token's experts repeated, torch's argsort of them is not stable: the positions compared as sets there.'''
    kernels = triton_moe_sort.fits, triton_moe_sort.fits_blocked
    triton_moe_sort.fits = triton_moe_sort.fits_blocked = lambda *a: False
    o2, t2, p2 = triton_moe.route(ids, E, bm)
    triton_moe_sort.fits, triton_moe_sort.fits_blocked = kernels
    active = t2.expert >= 0
    same = torch.equal(order, o2) and torch.equal(tiles.row_idx, t2.row_idx) and torch.equal(tiles.expert >= 0, active)
    for a, b in ((tiles.expert, t2.expert), (tiles.row0, t2.row0), (tiles.row1, t2.row1)):
        same = same and a.shape == b.shape and torch.equal(a[active], b[active])
    repeats = bool((ids.sort(1).values.diff(dim=1) == 0).any())
    return same, torch.equal(pos.sort(1).values, p2.sort(1).values) if repeats else torch.equal(pos, p2)
"""

SCRIPT = AGAINST_TORCH + r"""
g = torch.Generator().manual_seed(0)
cases = []
for T, k, E, bm in [(1, 6, 384, 16), (8, 6, 384, 16), (32, 6, 256, 16), (5, 2, 4, 2), (100, 8, 64, 64),
                    (682, 6, 384, 128)]:
    ids = torch.rand(T, E, generator=g).topk(k, dim=1).indices  # distinct experts per token
    cases.append((ids, E, bm))
cases.append((torch.arange(6).repeat(40, 1), 384, 16))  # every token the same experts (full tiles)
cases.append((torch.tensor([[3, 1]]), 4, 1))
for ids, E, bm in cases:
    assert triton_moe_sort.fits(ids, E)
    order, tiles, pos = triton_moe_sort.sort_pairs(ids, E, bm)
    assert same_as_torch_route(order, tiles, pos, ids, E, bm) == (True, True), (ids.shape, E, bm)
print("OK", len(cases))
"""


def test_pair_sort_kernel_matches_the_torch_route_under_the_interpreter():
    assert "OK 8" in run_interpreted(SCRIPT)


PAIR_SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_moe
g = torch.Generator().manual_seed(1)
cases = [torch.rand(T, E, generator=g).topk(k, dim=1).indices for T, k, E in [(1, 6, 384), (3, 6, 256), (2, 8, 64),
                                                                             (1, 2, 4), (4, 1, 16)]]
cases.append(torch.tensor([[5, 1, 5, 0, 1, 2]]))  # repeated experts: pair order among them (stable)
for ids in cases:
    w = torch.rand(ids.shape, generator=g)
    triton_moe.PAIR_SORT_KERNEL = True
    tiles, rw = triton_moe.pair_route(ids, w)
    triton_moe.PAIR_SORT_KERNEL = False
    t2, rw2 = triton_moe.pair_route(ids, w)
    assert tiles.expert.dtype == t2.expert.dtype == torch.int32 and rw.dtype == torch.float32
    assert torch.equal(tiles.expert, t2.expert) and torch.equal(rw, rw2), (ids, tiles.expert, t2.expert)
    assert bool((tiles.expert.view(ids.shape).diff(dim=1) >= 0).all())
print("OK", len(cases))
"""


def test_per_token_pair_sort_kernel_matches_torch_under_the_interpreter():
    """``pair_route``'s one-launch sort (one token's pairs by expert, their weights along) gives
    torch's stable sort and gather, repeated experts included."""
    assert "OK 6" in run_interpreted(PAIR_SCRIPT)


BLOCKED = AGAINST_TORCH + r"""
g = torch.Generator().manual_seed(1)
cases = [(torch.rand(T, E, generator=g).topk(k, dim=1).indices, E, bm)
         for T, k, E, bm in [(1, 6, 384, 16), (700, 6, 384, 128), (1500, 6, 384, 128), (300, 8, 64, 64),
                             (2000, 6, 16, 128)]]
skewed = torch.rand(1200, 384, generator=g)
skewed[:, :3] += 10  # three experts take most pairs: many full tiles of one expert, most experts idle
cases.append((skewed.topk(6, dim=1).indices, 384, 128))
cases.append((torch.randint(0, 5, (900, 4), generator=g), 5, 64))  # a token's experts repeat
for ids, E, bm in cases:
    order, tiles, pos = triton_moe_sort.sort_pairs_blocked(ids, E, bm)
    same, same_pos = same_as_torch_route(order, tiles, pos, ids, E, bm)
    print(int(same), int(same_pos), int(bool((pos.diff(dim=1) > 0).all())))
"""


def test_blocked_pair_sort_matches_the_torch_route_under_the_interpreter():
    """``sort_pairs_blocked`` (any number of pairs, three launches) against the torch route: the same stable
    order, tiles and combine positions; each token's rows ascending."""
    lines = [line.split() for line in run_interpreted(BLOCKED).strip().splitlines()]
    assert len(lines) == 7
    assert all(line == ["1", "1", "1"] for line in lines), lines


SORT_QUANTIZE_SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_moe_sort
from deepinfer_adapters.kernels.triton_fp8_gemm import act_quant
g = torch.Generator().manual_seed(3)
checked = 0
for T, k, E, D in ((1, 6, 384, 5120), (3, 6, 16, 96), (2, 8, 64, 4096 + 64)):
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)])
    w = torch.rand(T, k, generator=g)
    x = (torch.randn(T, D, generator=g) * torch.logspace(-3, 2, D)).bfloat16()
    experts, rw = triton_moe_sort.sort_each_token(ids, w)
    e2, rw2, q, s = triton_moe_sort.sort_each_token_and_quantize(ids, w, x, 32)
    want_q, want_s = act_quant(x, 32)
    assert torch.equal(e2, experts) and torch.equal(rw2, rw)
    assert torch.equal(experts.view(T, k), ids.sort(1).values.int())  # ascending experts, each token
    assert q.shape == (T, D) and s.shape == want_s.shape
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8)) and torch.equal(s, want_s)
    assert (q.float() != 0).float().mean() > 0.5  # codes written, not left as the allocation's
    checked += 1
print("OK", checked)
"""


def test_sort_each_token_quantizes_in_the_same_launch_as_act_quant():
    """``sort_each_token_and_quantize`` (the one-token MoE's sort with the experts' input quantized by the launch's
    later programs, ``triton_moe.SORT_QUANTIZES``): the sort's experts and route weights, and ``act_quant``'s codes
    and scales bit for bit -- one token at the real width (two chunks of 128 blocks), several tokens, a width that
    ends mid-chunk."""
    assert "OK 3" in run_interpreted(SORT_QUANTIZE_SCRIPT)
