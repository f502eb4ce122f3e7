"""Triton ``sparse_attn`` against the torch reference, on CUDA (skipped elsewhere).

Tolerance. The reference sums in fp64 and rounds once; the kernel sums exact
bf16 x bf16 products in fp32 and rounds p to bf16 at the same points (blocks of
64 indices against the same running max), see kernels/triton_sparse_attn.py. The
two fp32 results before the final cast differ by a few fp32 ulps, so after the
cast to bf16 an element either rounds to the same bf16 value or to its neighbour:
at most one bf16 ulp, 2^-8 of the value: rtol 2^-7. Besides, a probability p_k
whose fp32 score differs by an ulp can round to the neighbouring bf16 value, which
moves every output element of that head by up to 2^-8 p_k |kv_k| / denominator, an
absolute error on the scale of the output, not of the element (seen: 0.02% of the
elements of a [33, 64, 512] case off by ~1.5e-4 on values near 0): atol 2^-8 max|ref|.
Over a whole tensor only a small fraction of elements straddle a boundary, so
||out - ref|| / ||ref|| stays far under one ulp (seen ~2e-4): asserted <= 2e-3.
fp32 inputs take exact fp32 dots: rel <= 1e-5 with fp32 probabilities; with bf16
probabilities a p can still cross a bf16 boundary (seen 1.8e-5): rel <= 1e-4.

Split-K configs (``split_blocks``) round each p against the running max of its own
split instead of the reference's running max over all earlier blocks: the same
2^-9 relative rounding per p, at other points, like switching between bf16 and
fp32 probabilities (which moves outputs by ~2e-3 relative): rel <= 6e-3,
elementwise within 2^-6 of max|ref|.
"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")

BF16_ELEM_RTOL = 2.0**-7
BF16_NORM_RTOL = 2e-3
F32_NORM_RTOL = 1e-5
F32_BF16_PROBS_NORM_RTOL = 1e-4


CONFIGS = {  # the bf16 kernel's candidate block shapes (benchmarks/bench_sparse_attn.py)
    "default": None,
    "h16": (16, 4, 2, 0),
    "h64": (64, 8, 2, 0),
    "h16_split2": (16, 4, 2, 2),
    "h64_split2": (64, 8, 2, 2),
}


def _config(name):
    c = CONFIGS[name]
    return None if c is None else _tri().Config(c[0], c[1], c[2], split_blocks=c[3])


def _split(cfg):
    cfg = cfg or _tri().default_config(64, 512)
    return cfg.split_blocks > 0


def _tri():
    from deepinfer_adapters.kernels import triton_sparse_attn

    return triton_sparse_attn


def _inputs(S, H, d, N, K, dtype, seed, p_skip=0.2, empty_rows=(0,)):
    """Random inputs; ~p_skip of the indices are -1 and the rows ``empty_rows`` (when S > 1) all -1."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(S, H, d, device="cuda", generator=g).to(dtype)
    kv = torch.randn(N, d, device="cuda", generator=g).to(dtype)
    sink = torch.randn(H, device="cuda", generator=g) * 2
    idx = torch.randint(0, N, (S, K), device="cuda", generator=g, dtype=torch.int32)
    idx = torch.where(torch.rand(S, K, device="cuda", generator=g) < p_skip, -1, idx)
    for r in empty_rows:
        if r < S and S > 1:
            idx[r] = -1
    return q, kv, sink, idx


def _poisoned_call(fn, q, *args, **kwargs):
    """Fill the allocator's next block of the output's size with NaN first, so an
    element the kernel forgets to write shows up as NaN."""
    poison = torch.full_like(q, float("nan"))
    del poison
    return fn(q, *args, **kwargs)


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


CASES = [
    # S, H, d, N, K, dtype, probs_bf16
    (1, 64, 512, 700, 640, torch.bfloat16, True),  # decode: 128 window + 512 selected
    (33, 64, 512, 4000, 640, torch.bfloat16, True),
    (300, 64, 512, 3000, 128, torch.bfloat16, True),  # window only
    (5, 64, 512, 900, 200, torch.bfloat16, False),  # K not a multiple of 64, fp32 probabilities
    (17, 20, 48, 300, 130, torch.bfloat16, True),  # odd widths: head and dim masks
    (9, 16, 64, 100, 0, torch.bfloat16, True),  # no index at all
    (7, 64, 512, 800, 640, torch.float32, False),  # float32 numerics: exact fp32 dots
    (7, 24, 96, 200, 150, torch.float32, True),
]


@pytest.mark.parametrize("S,H,d,N,K,dtype,probs_bf16", CASES)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_matches_reference(S, H, d, N, K, dtype, probs_bf16, seed, config):
    if dtype != torch.bfloat16 and config != "default":
        pytest.skip("block shapes apply to the bf16 kernel")
    cfg = _config(config)
    q, kv, sink, idx = _inputs(S, H, d, N, K, dtype, seed * 1000 + S)
    scale = d**-0.5
    got = _poisoned_call(_tri().sparse_attn, q, kv, sink, idx, scale, probs_bf16, config=cfg)
    ref = reference.sparse_attn(q, kv, sink, idx, scale, probs_bf16)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert torch.isfinite(got).all(), "unwritten (NaN-poisoned) or non-finite output"
    if K and S > 1:
        assert (got[0] == 0).all(), "a row with no valid index must give 0"
    rel = _rel(got, ref)
    print(f"REPORT parity {config} S={S} H={H} d={d} K={K} {dtype} probs_bf16={probs_bf16}: rel={rel:.2e} "
          f"maxabs={float((got.float() - ref.float()).abs().max()):.2e}")
    if dtype == torch.float32:
        assert rel <= (F32_BF16_PROBS_NORM_RTOL if probs_bf16 else F32_NORM_RTOL)
    elif _split(cfg) and K > 64 * (cfg or _tri().default_config(H, d)).split_blocks:
        assert rel <= 6e-3
        torch.testing.assert_close(got.float(), ref.float(), rtol=2.0**-6, atol=2.0**-6 * float(ref.float().abs().max()))
    else:
        assert rel <= BF16_NORM_RTOL
        atol = 2.0**-8 * float(ref.float().abs().max())
        torch.testing.assert_close(got.float(), ref.float(), rtol=BF16_ELEM_RTOL, atol=atol)


def test_int64_index_and_noncontiguous_q():
    q, kv, sink, idx = _inputs(6, 64, 512, 1000, 640, torch.bfloat16, 7)
    qt = q.transpose(0, 1).contiguous().transpose(0, 1)  # [S, H, d] with head-major strides
    got = _tri().sparse_attn(qt, kv, sink, idx.long().cpu(), 512**-0.5)  # host index rows, as the model passes
    ref = reference.sparse_attn(q, kv, sink, idx, 512**-0.5)
    assert _rel(got, ref) <= BF16_NORM_RTOL


def test_dispatch_picks_triton_on_cuda():
    tri = _tri()
    assert "triton" in kernels.backends("sparse_attn")
    q, kv, sink, idx = _inputs(2, 16, 64, 50, 64, torch.bfloat16, 3)
    assert tri.supports(q, kv, sink, idx, 0.125)
    assert not tri.supports(q.cpu(), kv.cpu(), sink.cpu(), idx.cpu(), 0.125)
    torch.testing.assert_close(kernels.sparse_attn(q, kv, sink, idx, 0.125), tri.sparse_attn(q, kv, sink, idx, 0.125),
                               rtol=0, atol=0)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_batch_invariant(config):
    """A query's output does not depend on how many other queries share the call
    (bitwise): the engine's deterministic sampling relies on it."""
    cfg = _config(config)
    q, kv, sink, idx = _inputs(160, 64, 512, 5000, 640, torch.bfloat16, 11)
    full = _tri().sparse_attn(q, kv, sink, idx, 512**-0.5, config=cfg)
    for lo, hi in [(3, 4), (10, 18), (40, 72)]:
        part = _tri().sparse_attn(q[lo:hi], kv, sink, idx[lo:hi], 512**-0.5, config=cfg)
        assert torch.equal(part, full[lo:hi]), f"rows {lo}:{hi} differ alone vs in a batch of 160"


def test_decode_split_only_for_few_queries_outside_invariant_mode():
    """Up to DECODE_SPLIT_QUERIES queries outside batch-invariant mode the dispatcher takes the split
    decode config (its result within the split-K tolerance of the reference); more queries, or
    batch-invariant mode, never (a split query's bits differ from a recomputing prefill's)."""
    from deepinfer_adapters.kernels import invariance

    tri = _tri()
    n = tri.DECODE_SPLIT_QUERIES
    assert n > 0
    q, kv, sink, idx = _inputs(n + 1, 64, 512, 3000, 640, torch.bfloat16, 5, empty_rows=())
    scale = 512**-0.5
    few = (q[:n], kv, sink, idx[:n], scale)
    assert tri.supports_decode_split(*few) and not tri.supports_decode_split(q, kv, sink, idx, scale)
    split = tri.sparse_attn(*few, config=tri.DECODE_SPLIT_CONFIG)
    assert kernels.chosen("sparse_attn", *few) == "triton_decode_split"
    assert kernels.chosen("sparse_attn", q, kv, sink, idx, scale) != "triton_decode_split"
    assert torch.equal(kernels.sparse_attn(*few), split)
    ref = reference.sparse_attn(*few)
    assert _rel(split, ref) <= 6e-3
    with invariance.batch_invariant(True):
        assert kernels.chosen("sparse_attn", *few) != "triton_decode_split"


@pytest.mark.parametrize("S,H,d,K", [(1, 64, 512, 640), (3, 64, 512, 200), (2, 20, 48, 130)])
@pytest.mark.parametrize("merge_d", [16, 64, 128])
def test_split_merge_over_output_dims_gives_the_bits_of_one_program_for_all(monkeypatch, S, H, d, K, merge_d):
    """``MERGE_BLOCK_D``: split-K's merge with its output dims over programs (each recomputing its heads' max and
    denominator) against one program for all of d: the same bits, odd widths and padded dims included, with no
    output element left unwritten (the output's memory poisoned with NaN first)."""
    tri = _tri()
    q, kv, sink, idx = _inputs(S, H, d, 900, K, torch.bfloat16, 7 + S)
    monkeypatch.setattr(tri, "MERGE_BLOCK_D", 0)
    whole = _poisoned_call(tri.sparse_attn, q, kv, sink, idx, d**-0.5, config=tri.DECODE_SPLIT_CONFIG)
    monkeypatch.setattr(tri, "MERGE_BLOCK_D", merge_d)
    split = _poisoned_call(tri.sparse_attn, q, kv, sink, idx, d**-0.5, config=tri.DECODE_SPLIT_CONFIG)
    assert torch.isfinite(split).all()
    assert torch.equal(split, whole)


@pytest.mark.parametrize("S,H,d,K", [(1, 64, 512, 640), (3, 64, 512, 200), (2, 20, 48, 130), (1, 64, 512, 1100)])
def test_split_merge_unrolled_gives_the_loops_bits(monkeypatch, S, H, d, K):
    """``MERGE_LOADS``: the merge's partials added split by split in a loop over the runtime count or in one of a
    constant trip count, which the compiler unrolls: the same sums in the same order, the same bits (odd widths,
    several split counts, no unwritten output)."""
    tri = _tri()
    q, kv, sink, idx = _inputs(S, H, d, 1200, K, torch.bfloat16, 11 + S)
    monkeypatch.setattr(tri, "MERGE_LOADS", "loop")
    looped = _poisoned_call(tri.sparse_attn, q, kv, sink, idx, d**-0.5, config=tri.DECODE_SPLIT_CONFIG)
    monkeypatch.setattr(tri, "MERGE_LOADS", "unrolled")
    got = _poisoned_call(tri.sparse_attn, q, kv, sink, idx, d**-0.5, config=tri.DECODE_SPLIT_CONFIG)
    assert torch.isfinite(got).all() and torch.equal(got, looped)


@pytest.mark.parametrize("S,H,d,K,rd,merge_d", [(1, 64, 512, 640, 64, 64), (4, 64, 512, 1100, 64, 128),
                                                (2, 20, 48, 130, 16, 16), (3, 20, 48, 200, 8, 16),
                                                (2, 64, 512, 50, 64, 64)])
def test_merge_inverse_rope_gives_the_rope_kernels_bits(monkeypatch, S, H, d, K, rd, merge_d):
    """``sparse_attn(..., out_freqs=)``: the output rotated back in split-K's merge (rotated dims inside one of its
    programs, over several, or where no merge runs: K <= 64) against the merge's output rotated by the RoPE kernel
    after it: the same bits, every element written. The dispatcher's fused op takes it for a few decode queries only
    (``MERGE_INVERSE_ROPE``), and where it does not the composed op gives the same bits."""
    tri = _tri()
    monkeypatch.setattr(tri, "MERGE_BLOCK_D", merge_d)
    q, kv, sink, idx = _inputs(S, H, d, 1200, K, torch.bfloat16, 31 + S)
    g = torch.Generator(device="cuda").manual_seed(S)
    freqs = torch.polar(torch.ones(S, rd // 2, device="cuda"), torch.rand(S, rd // 2, device="cuda", generator=g) * 6)
    plain = tri.sparse_attn(q, kv, sink, idx, d**-0.5, config=tri.DECODE_SPLIT_CONFIG)
    want = kernels.apply_rope(plain.clone(), freqs, inverse=True)
    assert not torch.equal(want, plain)  # the rotation moves something
    got = _poisoned_call(tri.sparse_attn, q, kv, sink, idx, d**-0.5, config=tri.DECODE_SPLIT_CONFIG, out_freqs=freqs)
    assert torch.isfinite(got).all() and torch.equal(got, want)
    args = (q, kv, sink, idx, d**-0.5, freqs)
    assert kernels.chosen("sparse_attn_inverse_rope", *args) == "triton_decode_split"
    assert torch.equal(kernels.sparse_attn_inverse_rope(*args), want)
    monkeypatch.setattr(tri, "MERGE_INVERSE_ROPE", False)
    assert kernels.chosen("sparse_attn_inverse_rope", *args) == "composed"
    assert torch.equal(kernels.sparse_attn_inverse_rope(*args), want)


def test_merge_inverse_rope_not_for_many_queries_or_in_invariant_mode():
    """Past ``DECODE_SPLIT_QUERIES`` queries, or in batch-invariant mode, the fused op is not chosen (sparse_attn
    would not split there): the composed op, attention then the RoPE kernel."""
    from deepinfer_adapters.kernels import invariance

    q, kv, sink, idx = _inputs(_tri().DECODE_SPLIT_QUERIES + 1, 64, 512, 900, 640, torch.bfloat16, 5)
    freqs = torch.polar(torch.ones(q.shape[0], 32, device="cuda"), torch.ones(q.shape[0], 32, device="cuda"))
    assert kernels.chosen("sparse_attn_inverse_rope", q, kv, sink, idx, 0.05, freqs) == "composed"
    few = (q[:1], kv, sink, idx[:1], 0.05, freqs[:1])
    assert kernels.chosen("sparse_attn_inverse_rope", *few) == "triton_decode_split"
    with invariance.batch_invariant(True):
        assert kernels.chosen("sparse_attn_inverse_rope", *few) == "composed"
