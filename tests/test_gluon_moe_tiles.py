"""``gluon_moe.absorb_tails`` (torch ops; the Gluon kernel itself runs only on Hopper: tests/gpu/test_gluon_moe_gpu.py):
joining each expert's short last tile to the full tile before it keeps every sorted row in exactly one active
tile of its own expert, no tile over 128 + 32 rows, and joins exactly the tiles it should."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.kernels import gluon_moe
from deepinfer_adapters.kernels.triton_moe import route


@pytest.mark.parametrize("T,E,skew", [(1, 8, False), (40, 8, False), (700, 16, False), (1400, 32, False),
                                      (1400, 32, True), (3000, 24, False)])
def test_joined_tiles_cover_every_row_once(T, E, skew, monkeypatch):
    from deepinfer_adapters.kernels import triton_moe_sort

    monkeypatch.setattr(triton_moe_sort, "fits", lambda *a: False)  # route's torch ops (no GPU here)
    monkeypatch.setattr(triton_moe_sort, "fits_blocked", lambda *a: False)
    g = torch.Generator().manual_seed(T + E)
    scores = torch.rand(T, E, generator=g)
    if skew:
        scores[:, :2] += 10
    ids = scores.topk(6, dim=-1).indices
    _, tiles, _ = route(ids, E, 128)
    joined = gluon_moe.absorb_tails(tiles)
    order_expert = ids.flatten().sort(stable=True).values  # the expert of each sorted row
    covered = torch.zeros(T * 6, dtype=torch.int64)
    for e, r0, r1 in zip(joined.expert.tolist(), joined.row0.tolist(), joined.row1.tolist()):
        if e < 0:
            continue
        # the rows moe_bf16_kernel computes: up to 160 where the expert ends by then, else 128
        end = r1 if r1 - r0 <= gluon_moe.TILE + gluon_moe.TAIL else r0 + gluon_moe.TILE
        assert (order_expert[r0:end] == e).all()
        covered[r0:end] += 1
    assert (covered == 1).all()
    # joined: exactly the experts whose rows leave a last tile of 1..32 rows after at least one full tile
    counts = torch.bincount(ids.flatten(), minlength=E)
    want = int(((counts > gluon_moe.TILE) & ((counts - 1) % gluon_moe.TILE < gluon_moe.TAIL)).sum())
    assert int((tiles.expert >= 0).sum()) - int((joined.expert >= 0).sum()) == want
    assert torch.equal(joined.row_idx, tiles.row_idx)
