"""The compressors' softmax pooling (kernels/triton_pool.py) on CUDA against the torch reference,
at the V4 HCA / CSA and V4.1 compressor shapes."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


@pytest.mark.parametrize("N,R,C", [(32, 128, 512), (32, 8, 1024), (1, 2, 512), (300, 4, 128), (7, 256, 64)])
def test_softmax_pool_matches_reference(N, R, C):
    g = torch.Generator(device="cuda").manual_seed(N + R)
    kv = torch.randn(N, R, C, device="cuda", generator=g)
    s = torch.randn(N, R, C, device="cuda", generator=g) * 4
    s[:, R // 2 + 1:, : C // 3] = float("-inf")
    assert kernels.chosen("softmax_pool", kv, s) == "triton"
    got, want = kernels.softmax_pool(kv, s), reference.softmax_pool(kv, s)
    bound = 1e-6 * reference.softmax_pool(kv.abs(), s)
    ratio = float(((got - want).abs() / bound).max())
    print(f"REPORT pool N={N} R={R} C={C}: max |err| / (1e-6 sum |kv p|) = {ratio:.2f}")
    assert ratio <= 1.0
    if N > 1:  # an entry alone == batched
        assert torch.equal(kernels.softmax_pool(kv[1:2], s[1:2]), got[1:2])


@pytest.mark.parametrize("ratio,overlap,w,B", [(4, True, 512, 32), (128, False, 512, 32), (4, True, 128, 3),
                                              (128, False, 512, 1)])
def test_compressor_v4_gather_matches_reference_bit_for_bit(ratio, overlap, w, B):
    """The V4 compressor's decode step (kernels/triton_compressor.py): the pooling's rows and the
    updated state the same bits as the torch reference, at V4's CSA (ratio 4, overlap) and HCA
    (ratio 128) shapes, every place in a block."""
    c = 2 if overlap else 1
    g = torch.Generator(device="cuda").manual_seed(ratio + B)
    S = B + 5
    kv_state = torch.randn(S, c * ratio, c * w, device="cuda", generator=g)
    score_state = torch.randn(S, c * ratio, c * w, device="cuda", generator=g) * 3
    score_state[::2, ratio // 2:] = float("-inf")
    slots = torch.randperm(S, device="cuda", generator=g)[:B]
    at = (torch.arange(B, device="cuda") * 7 + ratio - 1) % ratio  # the first completes its block
    kv, score = (torch.randn(B, c * w, device="cuda", generator=g) for _ in range(2))
    ape = torch.randn(ratio, c * w, device="cuda", generator=g)
    args = (kv, score, ape)
    got_state, want_state = (kv_state.clone(), score_state.clone()), (kv_state.clone(), score_state.clone())
    assert kernels.chosen("compressor_v4_gather", *args, *got_state, slots, at, ratio, overlap) == "triton"
    got = kernels.compressor_v4_gather(*args, *got_state, slots, at, ratio, overlap)
    want = reference.compressor_v4_gather(*args, *want_state, slots, at, ratio, overlap)
    same = [torch.equal(a, b) for a, b in zip(got + got_state, want + want_state)]
    print(f"REPORT compressor_v4_gather r={ratio} overlap={overlap} w={w} B={B}: bit-equal {same}")
    assert all(same)


@pytest.mark.parametrize("B,r,C", [(1, 2, 512), (8, 2, 512), (8, 4, 512), (5, 3, 40)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_ring_pool_one_launch_is_the_composed_path(monkeypatch, B, r, C, out_dtype):
    """``ring_pool`` in one launch (``triton_pool.RING_POOL``) writes the rings and pools the groups with the
    bits of the composed path (torch's row copies and gathers around the ``softmax_pool`` kernel, then the
    cast)."""
    from deepinfer_adapters.kernels import triton_pool

    g = torch.Generator(device="cuda").manual_seed(B * r)
    size, slots = r + 2, B + 1
    rings = (torch.randn(slots * size, C, device="cuda", generator=g),
             torch.randn(slots * size, C, device="cuda", generator=g))
    kv, s = torch.randn(B, C, device="cuda", generator=g), torch.randn(B, C, device="cuda", generator=g)
    slot = torch.randperm(slots, device="cuda", generator=g)[:B]
    pos = torch.randint(0, 100, (B,), device="cuda", generator=g)
    at = slot * size + pos % size
    group = slot[:, None] * size + (pos - pos % r)[:, None].add(torch.arange(r, device="cuda")) % size
    fused = (kv, s, *(t.clone() for t in rings), at, group, out_dtype)
    assert kernels.chosen("ring_pool", *fused) == "triton"  # on by default
    got = kernels.ring_pool(*fused)
    monkeypatch.setattr(triton_pool, "RING_POOL", False)
    args = (kv, s, *(t.clone() for t in rings), at, group, out_dtype)
    assert kernels.chosen("ring_pool", *args) == "composed"
    want = kernels.ring_pool(*args)
    assert got.dtype == out_dtype and torch.equal(got, want)
    assert torch.equal(fused[2], args[2]) and torch.equal(fused[3], args[3])
