"""``triton_index``'s kernel given each query's visible key count (the indexer's causal mask) under Triton's
CPU interpreter: the scores of the keys a query sees are the bits of the unmasked call, every other key is
-inf, whatever the key split, with shared or own keys. (The interpreter's bf16 products are not the GPU's,
so this checks the skipping and masking, not the values; the values: tests/gpu/test_index_scores_gpu.py.)"""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_index

g = torch.Generator().manual_seed(5)
H, D = 32, 128
for n, m, own, target in ((9, 300, False, 264), (9, 300, False, 1), (3, 130, True, 264), (6, 64, False, 264)):
    triton_index.TARGET_PROGRAMS = target  # 264: the keys split over programs here; 1: one range each
    q = torch.randn(n, H, D, generator=g).bfloat16()
    keys = torch.randn(*((n,) if own else ()), m, D, generator=g).bfloat16()
    w = torch.rand(n, H, generator=g).bfloat16()
    visible = torch.randint(0, m + 40, (n,), generator=g)  # in any order; 0 and past m included
    visible[0], visible[-1] = 0, m + 5
    full = triton_index.index_scores(q, keys, w)
    unseen = torch.arange(m) >= visible[:, None]
    masked = triton_index.index_scores(q, keys, w, visible)
    print(n, m, int(own), target, int(torch.equal(masked, full.masked_fill(unseen, -torch.inf))),
          int(bool(torch.isfinite(full).all())), int(bool(unseen.any() and (~unseen).any())))
"""


def test_visible_keys_keep_their_bits_and_the_rest_are_minus_inf():
    lines = [line.split() for line in run_interpreted(SCRIPT).strip().splitlines()]
    assert len(lines) == 4
    assert all(line[4:] == ["1", "1", "1"] for line in lines), lines
