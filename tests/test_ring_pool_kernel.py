"""``ring_pool`` (a V4.1 ratio-r compressor's decode step: ring writes, then the group's pooling): the Triton
kernel (kernels/triton_pool.py ``ring_pool_kernel``) under Triton's CPU interpreter gives the bits of the path
it replaces -- torch's row copies and gathers around the ``softmax_pool`` kernel -- and writes the same rings;
both within fp32 rounding of the reference. (tests/gpu/test_pool_gpu.py runs the compiled kernel.)"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference
from tests.triton_interpreter import run_interpreted

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_pool
g = torch.Generator().manual_seed(0)
cases = 0
for B, r, C, size, slots in [(1, 2, 512, 4, 2), (3, 4, 40, 6, 4), (2, 1, 16, 3, 3), (4, 2, 24, 2, 4), (3, 3, 24, 5, 3)]:
    kv_ring = torch.randn(slots * size, C, generator=g)
    s_ring = torch.randn(slots * size, C, generator=g)
    kv, s = torch.randn(B, C, generator=g), torch.randn(B, C, generator=g)
    slot = torch.randperm(slots, generator=g)[:B]
    pos = torch.randint(0, 50, (B,), generator=g)
    if r == 3:  # a padded group (R_PAD 4) whose new row is ring row 0, the padding rows' load default
        slot[0], pos[0] = 0, 5
    start = pos - pos % r
    at = slot * size + pos % size
    group = slot[:, None] * size + (start[:, None] + torch.arange(r)) % size
    rings = (kv_ring.clone(), s_ring.clone())
    got = triton_pool.ring_pool(kv, s, *rings, at, group)
    want_rings = (kv_ring.clone(), s_ring.clone())
    want = triton_pool.softmax_pool(*reference.ring_rows(kv, s, *want_rings, at, group))
    assert torch.equal(got, want), (B, r, C, (got - want).abs().max())
    assert torch.equal(rings[0], want_rings[0]) and torch.equal(rings[1], want_rings[1])
    cases += 1
print("OK", cases)
"""


def test_ring_pool_kernel_gives_the_composed_paths_bits_under_the_interpreter():
    pytest.importorskip("triton")
    assert "OK 5" in run_interpreted(SCRIPT)


def test_ring_pool_writes_the_rows_and_pools_the_group():
    """The reference and the default (composed) backend on a hand-made ring: the new row lands at ``at``, and
    the pooled value is the softmax-weighted sum of the group's rows, the new one included."""
    kv_ring, s_ring = torch.zeros(4, 2), torch.full((4, 2), -1.0)
    kv, s = torch.tensor([[2.0, 4.0]]), torch.tensor([[0.0, 1.0]])
    at, group = torch.tensor([1]), torch.tensor([[0, 1]])
    for fn in (reference.ring_pool, kernels.ring_pool):
        rings = (kv_ring.clone(), s_ring.clone())
        out = fn(kv, s, *rings, at, group)
        assert torch.equal(rings[0][1], kv[0]) and torch.equal(rings[1][1], s[0])
        w = torch.softmax(torch.tensor([[-1.0, 0.0], [-1.0, 1.0]]), dim=1)  # per column: row 0, then the new row
        torch.testing.assert_close(out, torch.stack([w[0, 1] * 2.0, w[1, 1] * 4.0])[None], rtol=1e-6, atol=1e-6)
    assert kernels.chosen("ring_pool", kv, s, kv_ring, s_ring, at, group) == "composed"
    rounded = [fn(kv, s, kv_ring.clone(), s_ring.clone(), at, group, torch.bfloat16)
               for fn in (reference.ring_pool, kernels.ring_pool)]
    assert rounded[0].dtype == torch.bfloat16 and torch.equal(rounded[0], rounded[1])
    assert torch.equal(rounded[0], out.bfloat16())
