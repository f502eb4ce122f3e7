"""What the MoE GPU tests share: random routing (route weights and distinct experts per token), optionally
skewed, and the check that a sort kernel's routing tables are the torch route's."""

from __future__ import annotations

import torch


def routing(T: int, E: int, k: int, seed: int, skew: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(route weights [T, k] in [0, 1.5), expert ids [T, k]) on CUDA; ``skew``: most tokens share a few
    experts, many experts get none."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    scores = torch.rand(T, E, device="cuda", generator=g)
    if skew:
        scores[:, :k] += 10
        scores[: T // 4] = torch.rand(T // 4, E, device="cuda", generator=g)
    ids = scores.topk(k, dim=-1).indices
    w = torch.rand(T, k, device="cuda", generator=g) * 1.5
    return w, ids


def assert_route_equals_torch(ids: torch.Tensor, E: int, bm: int, monkeypatch) -> None:
    """``triton_moe.route`` (whichever sort kernel takes these pairs) against its torch ops: the same order,
    row indices, combine positions and active tiles."""
    from deepinfer_adapters.kernels import triton_moe, triton_moe_sort

    order, tiles, positions = triton_moe.route(ids, E, bm)
    monkeypatch.setattr(triton_moe_sort, "MAX_PAIRS", 0)
    monkeypatch.setattr(triton_moe_sort, "fits_blocked", lambda *a: False)
    o2, t2, p2 = triton_moe.route(ids, E, bm)
    active = t2.expert >= 0
    assert torch.equal(order, o2) and torch.equal(positions, p2) and torch.equal(tiles.row_idx, t2.row_idx)
    assert torch.equal(tiles.expert >= 0, active)
    for a, b in ((tiles.expert, t2.expert), (tiles.row0, t2.row0), (tiles.row1, t2.row1)):
        assert torch.equal(a[active], b[active])
