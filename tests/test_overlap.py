"""model_impl/overlap.py off the GPU: the side part runs first, in place, and ``aside``'s join
hands back its value without running it again (the GPU's streams: tests/gpu/test_overlap_gpu.py)."""

from __future__ import annotations

import torch

from deepinfer_adapters.model_impl import overlap


def test_side_by_side_runs_side_then_main_off_the_gpu():
    order = []
    a, b = overlap.side_by_side(torch.zeros(2, 3), lambda: order.append("main") or 1,
                                lambda: order.append("side") or 2)
    assert (a, b, order) == (1, 2, ["side", "main"])
    assert not overlap._STREAMS


def test_aside_runs_once_and_join_returns_its_value():
    calls = []
    join = overlap.aside(torch.zeros(2, 3), lambda: calls.append(1) or torch.ones(2))
    assert calls == [1]  # started (here: run) before join
    first, second = join(), join()
    assert first is second and calls == [1] and not overlap._live

