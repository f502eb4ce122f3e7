"""E4M3 experts held in 128 x 128 tiles (quant.to_e4m3_tiles) through the grouped Triton GEMM
(fp8_triton_jit.py ``e4m3_step_ptr``) under Triton's CPU interpreter: on the FP8 path, with
activation blocks of 32 (four 32-deep steps inside each tile) and 128, the same bits as the plain
rows and within float32 rounding of a float64 sum; a control reads the tiles as plain rows. (The
interpreter's bf16 dots are wrong, so the bf16 path is checked on the GPU:
tests/gpu/test_moe_gpu.py ``test_e4m3_tiles_are_the_plain_experts_bit_for_bit``.)"""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_fp8_gemm as tg
from deepinfer_adapters.model_impl.quant import to_e4m3_tiles

g = torch.Generator().manual_seed(3)
E, N, K, R = 2, 256, 256, 5
row_idx = torch.tensor([4, 1, 0, 3, 2], dtype=torch.int32)
groups = tg.Groups(expert=torch.tensor([1, 0, -1], dtype=torch.int32), row0=torch.tensor([0, 2, 5], dtype=torch.int32),
                   row1=torch.tensor([2, 5, 5], dtype=torch.int32), row_idx=row_idx)
w = (torch.randn(E, N, K, generator=g) * 30).to(torch.float8_e4m3fn)
tiles = to_e4m3_tiles(w)
exps = torch.randint(-6, 4, (E, N, K // 128), generator=g)
scale = (exps + 127).to(torch.uint8)
for a_block in (32, 128):
    a = (torch.randn(R, K, generator=g) * 50).to(torch.float8_e4m3fn)
    sa = torch.pow(2.0, torch.randint(-8, 3, (R, K // a_block), generator=g).float())
    av = a.double() * sa.double().repeat_interleave(a_block, 1)
    want = torch.zeros(R, N, dtype=torch.float64)
    for e, r0, r1 in ((1, 0, 2), (0, 2, 5)):
        we = w[e].double() * torch.pow(2.0, exps[e].double()).repeat_interleave(128, 1)
        want[r0:r1] = av[row_idx[r0:r1].long()] @ we.T
    cfg = tg.GemmConfig(16, 128, 128 // a_block, 4, 2)
    run = lambda weight: tg.gemm(a, sa, a_block, weight, scale, (1, 128), torch.float32, rows=R, groups=groups,
                                 config=cfg)
    plain, tiled, misread = run(w), run(tiles), run(tiles.view(E, N, K))
    rel = ((tiled.double() - want).abs().max() / want.abs().max()).item()
    print(a_block, int(torch.equal(plain, tiled)), int(torch.equal(misread, plain)), f"{rel:.3e}")
"""


def test_e4m3_tiles_on_the_fp8_path_are_the_plain_rows_under_the_interpreter():
    lines = [line.split() for line in run_interpreted(SCRIPT).strip().splitlines()]
    assert [line[0] for line in lines] == ["32", "128"]
    for _, equal, misread_equal, rel in lines:
        assert equal == "1" and misread_equal == "0" and float(rel) < 1e-6


def test_e4m3_tiles_reject_what_the_kernel_cannot_read():
    """Tiles need a grouped GEMM with 128-row N tiles and K steps inside a tile: a typed error
    names the layout otherwise (before anything launches)."""
    import torch

    from deepinfer_adapters.kernels import triton_fp8_gemm as tg
    from deepinfer_adapters.model_impl.quant import to_e4m3_tiles

    tiles = to_e4m3_tiles(torch.zeros(2, 256, 256).to(torch.float8_e4m3fn))
    scale = torch.full((2, 256, 2), 127, dtype=torch.uint8)
    a = torch.zeros(4, 256).to(torch.float8_e4m3fn)
    sa = torch.ones(4, 8)
    groups = tg.Groups(*(torch.zeros(1, dtype=torch.int32) for _ in range(3)))
    with pytest.raises(ValueError, match="tiles take a grouped GEMM"):
        tg.gemm(a, sa, 32, tiles, scale, (1, 128), torch.float32)
    with pytest.raises(ValueError, match="tiles take a grouped GEMM"):
        tg.gemm(a, sa, 32, tiles, scale, (1, 128), torch.float32, rows=4, groups=groups,
                config=tg.GemmConfig(16, 64, 4, 4, 3))
    with pytest.raises(ValueError, match="K steps dividing 128"):
        tg.gemm(a.bfloat16(), None, 0, tiles, scale, (1, 128), torch.float32, rows=4, groups=groups, kstep=256,
                config=tg.GemmConfig(16, 128, 1, 4, 3))
