"""``gluon_moe.scale_steps`` (E8M0 expert scales [E, N, K / 128] -> fp32 [E, K / 128, N], the FP8 prefill MoE
kernel's layout) under Triton's CPU interpreter: every byte's value, as ``quant.e8m0_to_float`` gives it, in its
transposed place, for widths that fill the kernel's blocks and ones that do not."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import gluon_moe
from deepinfer_adapters.model_impl.quant import e8m0_to_float

g = torch.Generator().manual_seed(3)
for E, N, KB in ((2, 128, 40), (3, 200, 18), (1, 64, 1)):
    s = torch.randint(0, 256, (E, N, KB), generator=g, dtype=torch.uint8)
    s[0, 0, 0], s[-1, -1, -1] = 0, 255  # the subnormal 2^-127 and NaN
    got = gluon_moe.scale_steps(s)
    want = e8m0_to_float(s).transpose(1, 2)
    print(E, N, KB, int(tuple(got.shape) == (E, KB, N)), int(torch.equal(got.isnan(), want.isnan())),
          int(torch.equal(got.nan_to_num(), want.nan_to_num())), int(got[0, 0, 0].item() == 2.0 ** -127))
"""


def test_scale_steps_gives_every_scale_in_its_place_under_the_interpreter():
    lines = [line.split() for line in run_interpreted(SCRIPT).strip().splitlines()]
    assert len(lines) == 3
    assert all(line[3:] == ["1", "1", "1", "1"] for line in lines), lines


def test_scale_steps_in_torch_matches_its_definition():
    """Without Triton's interpreter on the CPU: the torch fallback, the same layout and values."""
    import torch

    from deepinfer_adapters.kernels import gluon_moe

    s = torch.arange(2 * 3 * 4, dtype=torch.uint8).view(2, 3, 4) + 100
    got = gluon_moe.scale_steps(s)
    assert got.shape == (2, 4, 3)
    assert got[1, 2, 0].item() == 2.0 ** (int(s[1, 0, 2]) - 127)


def test_tile_scales_reads_one_scale_per_128_rows_or_refuses():
    """``gluon_moe.tile_scales``: scales one per 128 rows (each row a copy) as fp32 [E, N / 128, K / 128]; None where
    one row of a tile differs, or N is no multiple of 128; asked again after an in-place change, answered anew."""
    import torch

    from deepinfer_adapters.kernels import gluon_moe
    from deepinfer_adapters.model_impl.quant import e8m0_to_float

    g = torch.Generator().manual_seed(5)
    per_tile = torch.randint(100, 150, (3, 2, 5), generator=g, dtype=torch.uint8)
    s = per_tile.repeat_interleave(128, dim=1).view(torch.float8_e8m0fnu)  # [3, 256, 5]
    table = gluon_moe.tile_scales(s)
    assert table is not None and table.dtype == torch.float32 and table.shape == (3, 2, 5)
    assert torch.equal(table, e8m0_to_float(per_tile))
    assert gluon_moe.tile_scales(s) is table  # known: no second check
    s.view(torch.uint8)[2, 255, 4] += 1  # the last row of the last tile
    assert gluon_moe.tile_scales(s) is None
    s.view(torch.uint8)[2, 255, 4] -= 1
    assert torch.equal(gluon_moe.tile_scales(s), table)
    assert gluon_moe.tile_scales(torch.full((1, 192, 2), 127, dtype=torch.uint8)) is None  # N not a multiple of 128
