"""``window_store_gather`` (a decode step's new KV row stored into its window ring, the window's keys gathered):
the Triton kernel (kernels/triton_window.py) under Triton's CPU interpreter gives the reference's ring and keys
-- the new row rounded to the ring's dtype and read back as the key, every other key the ring's row, rows no
sequence writes untouched -- with the step's rows from ``WindowSlots`` (padding sequences sharing one slot, a
sequence near its start; the write rows also as a strided view); and ``window_slots``, the step's rows, from one
launch as the reference's torch ops give them. tests/gpu/test_window_gpu.py runs both compiled, with the rounding
to bf16."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.kernels import reference
from tests.triton_interpreter import run_interpreted

# WindowSlots' rows for a batch without a model: positions, slots, ring size and window as a decode step has them
ROWS = r"""
import torch
from deepinfer_adapters.model_impl.batch import DecodeBatch
from deepinfer_adapters.model_impl.layers.attention_common import WindowSlots


def step_rows(positions, slots, size, window, n_slots):
    batch = DecodeBatch(torch.zeros(len(positions), dtype=torch.long), torch.tensor(positions), torch.tensor(slots),
                        max(positions) + 1)
    return WindowSlots.of(batch, size, window)
"""

SCRIPT = ROWS + r"""
from deepinfer_adapters.kernels import reference, triton_window
g = torch.Generator().manual_seed(0)
cases = 0
for positions, slots, size, window, d, ring_dtype, kv_dtype in [
        ([40], [0], 12, 8, 64, torch.float32, torch.bfloat16),
        ([3, 17, 0, 0], [1, 0, 3, 3], 10, 8, 48, torch.bfloat16, torch.bfloat16),  # slot 3: two padding rows
        ([5, 30], [2, 0], 8, 8, 32, torch.float32, torch.float32)]:
    ws = step_rows(positions, slots, size, window, 4)
    # (the interpreter's fp32 -> bf16 cast is not round-to-nearest: an fp32 ring under bf16 keys holds bf16 values)
    ring = torch.randn(4 * size, d, generator=g).to(kv_dtype).to(ring_dtype)
    kv = torch.randn(len(positions), d, generator=g).to(kv_dtype)
    kv[torch.tensor(slots) == 3] = kv[-1].clone()  # padding (slot 3): one row written with one value, as in a graph
    got_ring, want_ring = ring.clone(), ring.clone()
    got = triton_window.window_store_gather(got_ring, ws.write_rows, ws.read_rows, kv)
    want = reference.window_store_gather(want_ring, ws.write_rows, ws.read_rows, kv)
    assert got.dtype == kv.dtype and got.shape == (len(positions) * window, d)
    assert torch.equal(got_ring, want_ring) and torch.equal(got, want)
    assert int((got_ring != ring).any(1).sum()) == len(set(ws.write_rows.tolist()))  # the written rows only
    strided = ws.read_rows.view(len(positions), window)[:, -1]  # the same rows through a strided view
    again = ring.clone()
    assert torch.equal(triton_window.window_store_gather(again, strided, ws.read_rows, kv), want)
    assert torch.equal(again, want_ring)
    cases += 1
print("OK", cases)
"""


def test_window_kernel_stores_and_gathers_as_the_reference_under_the_interpreter():
    pytest.importorskip("triton")
    assert "OK 3" in run_interpreted(SCRIPT)


def test_window_reference_reads_the_new_row_back_rounded():
    """The reference by hand: the new row lands in its ring slot rounded to the ring's dtype and comes back as the
    window's last key (in kv's dtype); the keys before it are the ring's rows, oldest first."""
    ring = torch.arange(12.0).view(6, 2).to(torch.bfloat16)
    kv = torch.tensor([[1.0 + 2.0**-10, 5.0]])
    keys = reference.window_store_gather(ring, torch.tensor([4]), torch.tensor([2, 3, 4]), kv)
    assert torch.equal(ring[4], torch.tensor([1.0, 5.0], dtype=torch.bfloat16))
    assert keys.dtype == torch.float32
    assert torch.equal(keys, torch.tensor([[4.0, 5.0], [6.0, 7.0], [1.0, 5.0]]))


SLOTS_SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_window
cases = 0
for positions, slots, size, window in [([4096], [0], 136, 128), ([3, 17, 0, 0], [1, 0, 3, 3], 10, 8),
                                       ([5, 30, 2], [2, 0, 1], 8, 6)]:
    args = (torch.tensor(positions), torch.tensor(slots), size, window)
    got, want = triton_window.window_slots(*args), reference.window_slots(*args)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), (positions, a, b)
    cases += 1
print("OK", cases)
"""


def test_window_slots_kernel_matches_the_reference_under_the_interpreter():
    pytest.importorskip("triton")
    assert "OK 3" in run_interpreted(SLOTS_SCRIPT)


def test_window_slots_reference_by_hand():
    """Two sequences, rings of 5 rows a slot, a window of 3: sequence 0 at position 1 in slot 1 (its window starts
    before the sequence: one position missing), sequence 1 at position 7 in slot 0 (the ring wrapped)."""
    write, read, valid, index = reference.window_slots(torch.tensor([1, 7]), torch.tensor([1, 0]), 5, 3)
    assert write.tolist() == [6, 2]
    assert read.tolist() == [5 + 4, 5 + 0, 5 + 1, 0, 1, 2]  # position -1 wraps to the slot's last row (unused)
    assert valid.tolist() == [[False, True, True], [True, True, True]]
    assert index.tolist() == [[-1, 1, 2], [3, 4, 5]]
