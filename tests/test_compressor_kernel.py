"""The V4 compressor's decode kernel (kernels/triton_compressor.py) under Triton's CPU interpreter:
the pooling's rows and the updated state bit for bit the reference's (data movement and one fp32
add), with and without overlap, every place in a block (the completing one included), scrambled
slots and -inf score rows (tests/gpu/test_pool_gpu.py: compiled)."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import reference, triton_compressor
g = torch.Generator().manual_seed(0)
cases = 0
for ratio, overlap, w in [(4, True, 24), (8, False, 40), (4, True, 64)]:
    c = 2 if overlap else 1
    B, S = 2 * ratio, 2 * ratio + 3
    kv_state = torch.randn(S, c * ratio, c * w, generator=g)
    score_state = torch.randn(S, c * ratio, c * w, generator=g) * 3
    score_state[1::3, ratio // 2:] = float("-inf")  # rows not filled yet
    slots = torch.randperm(S, generator=g)[:B]
    at = torch.arange(B) % ratio  # every place, twice; at == ratio - 1 completes a block
    kv = torch.randn(B, c * w, generator=g)
    score = torch.randn(B, c * w, generator=g)
    ape = torch.randn(ratio, c * w, generator=g)
    want_state = (kv_state.clone(), score_state.clone())
    want = reference.compressor_v4_gather(kv, score, ape, *want_state, slots, at, ratio, overlap)
    got_state = (kv_state.clone(), score_state.clone())
    got = triton_compressor.compressor_v4_gather(kv, score, ape, *got_state, slots, at, ratio, overlap)
    for a, b in zip(got + got_state, want + want_state):
        assert a.shape == b.shape and torch.equal(a, b), (ratio, overlap, w)
    assert not torch.equal(got_state[0], kv_state) and not torch.equal(got_state[1], score_state)
    cases += 1
print("OK", cases)
"""


def test_compressor_v4_gather_kernel_matches_the_reference_under_the_interpreter():
    assert "OK 3" in run_interpreted(SCRIPT)
