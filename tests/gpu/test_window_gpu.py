"""``window_store_gather`` on CUDA: the Triton kernel stores the new KV rows and gathers the window's keys as the
torch reference does, bit for bit, at V4.1's decode shapes (window 128, head dim 512), with the rows of
``WindowSlots`` (from ``window_slots``' kernel, equal to the reference's), an fp32 or bf16 ring and bf16 keys
(rounded to nearest even, as torch's cast), and a graph's padding sequences writing one row."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference
from deepinfer_adapters.model_impl.batch import DecodeBatch
from deepinfer_adapters.model_impl.layers.attention_common import WindowSlots

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


@pytest.mark.parametrize("positions,slots", [([4096], [0]),
                                            ([4096, 7, 300, 129, 0, 0, 0, 0], [0, 1, 2, 3, 8, 8, 8, 8])])
@pytest.mark.parametrize("ring_dtype", [torch.float32, torch.bfloat16])
def test_window_kernel_matches_reference(positions, slots, ring_dtype):
    B, size, window, d = len(positions), 136, 128, 512
    batch = DecodeBatch(torch.zeros(B, dtype=torch.long, device="cuda"), torch.tensor(positions, device="cuda"),
                        torch.tensor(slots, device="cuda"), max(positions) + 1)
    ws = WindowSlots.of(batch, size, window)
    assert kernels.chosen("window_slots", batch.positions, batch.slots, size, window) == "triton"
    for got, want in zip(kernels.window_slots(batch.positions, batch.slots, size, window),
                         reference.window_slots(batch.positions, batch.slots, size, window)):
        assert got.dtype == want.dtype and torch.equal(got, want)
    g = torch.Generator(device="cuda").manual_seed(B)
    ring = torch.randn(9 * size, d, device="cuda", generator=g).to(ring_dtype)
    kv = torch.randn(B, d, device="cuda", generator=g).bfloat16()
    kv[torch.tensor(slots, device="cuda") == 8] = kv[-1].clone()  # padding: one row, one value
    assert kernels.chosen("window_store_gather", ring, ws.write_rows, ws.read_rows, kv) == "triton"
    got_ring, want_ring = ring.clone(), ring.clone()
    got = kernels.window_store_gather(got_ring, ws.write_rows, ws.read_rows, kv)
    want = reference.window_store_gather(want_ring, ws.write_rows, ws.read_rows, kv)
    assert torch.equal(got_ring, want_ring) and torch.equal(got, want)
    assert got.shape == (B * window, d) and got.dtype == torch.bfloat16
    assert torch.equal(got.view(B, window, d)[:, -1], kv.to(ring_dtype).bfloat16())  # the new rows come back
