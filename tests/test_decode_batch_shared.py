"""``DecodeBatch.shared`` and ``shared_ahead``: values built once a step, and values built ahead (on a side stream on
the GPU; inline here) returned to every later reader without building them again."""

from __future__ import annotations

import torch

from deepinfer_adapters.model_impl.batch import DecodeBatch


def test_shared_builds_once_a_step():
    batch = DecodeBatch.build([5, 6], [3, 9], [0, 1])
    calls = []
    first = batch.shared("k", lambda: calls.append(1) or batch.positions + 1)
    again = batch.shared("k", lambda: calls.append(2) or batch.positions * 0)
    assert calls == [1] and again is first
    batch.scratch.clear()  # a new step builds again
    batch.shared("k", lambda: calls.append(3) or batch.positions)
    assert calls == [1, 3]


def test_values_built_ahead_are_read_without_building_again():
    batch = DecodeBatch.build([5, 6], [3, 9], [0, 1])
    calls = []

    def prepare():
        batch.shared("rows", lambda: calls.append("rows") or batch.positions // 2)
        batch.visible_rows(4)  # nested: builds ("context_len") too

    join = batch.shared_ahead(prepare)
    assert calls == ["rows"]
    assert torch.equal(batch.shared("rows", lambda: calls.append("again") or batch.positions), torch.tensor([1, 4]))
    assert torch.equal(batch.visible_rows(4), torch.tensor([1, 2]))
    assert torch.equal(batch.shared("context_len", lambda: None), torch.tensor([4, 10]))
    assert calls == ["rows"]
    join()  # the step's end joins the side part (inline here: nothing to wait for)
    assert batch.shared("new", lambda: 7) == 7  # keys not built ahead build as before
