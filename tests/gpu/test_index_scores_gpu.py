"""Triton ``index_scores`` against the torch reference, on CUDA (skipped elsewhere).

Tolerance: the kernel's q.k sums exact bf16 products in fp32 in another order than
cuBLAS, so a rounded q.k (and then its head's term) can land on the neighbouring bf16
value, and the head sum is a tree instead of torch's order: elementwise within 2^-7 of
the value plus 2^-7 of the largest score (a flipped term moves a sum by up to one bf16
ulp of that term), and a relative L2 difference far below that (asserted <= 4e-3).
"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.kernels import reference, triton_index

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


@pytest.mark.parametrize("n,m", [(1, 1), (1, 4096), (7, 100), (300, 2048)])
@pytest.mark.parametrize("shared", [True, False], ids=["shared_keys", "own_keys"])
def test_index_scores_matches_reference(n, m, shared):
    g = torch.Generator(device="cuda").manual_seed(n * 7 + m)
    H, D = 32, 128
    q = torch.randn(n, H, D, device="cuda", generator=g).bfloat16()
    keys = torch.randn(*(() if shared else (n,)), m, D, device="cuda", generator=g).bfloat16()
    w = (torch.randn(n, H, device="cuda", generator=g) * H**-0.5 * D**-0.5).bfloat16()
    assert triton_index.supports(q, keys, w)
    out = triton_index.index_scores(q, keys, w)
    ref = reference.index_scores(q, keys, w)
    assert out.dtype == torch.bfloat16 and out.shape == (n, m)
    rel = float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))
    print(f"REPORT index_scores n={n} m={m} shared={shared}: rel={rel:.2e} "
          f"exact={float((out == ref).float().mean()):.4f}")
    torch.testing.assert_close(out.float(), ref.float(), rtol=2**-7, atol=2**-7 * float(ref.float().abs().max()))
    assert rel <= 4e-3


def test_index_scores_rows_do_not_depend_on_the_batch():
    g = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(50, 32, 128, device="cuda", generator=g).bfloat16()
    keys = torch.randn(1000, 128, device="cuda", generator=g).bfloat16()
    w = torch.rand(50, 32, device="cuda", generator=g).bfloat16()
    full = triton_index.index_scores(q, keys, w)
    assert torch.equal(triton_index.index_scores(q[10:11], keys, w[10:11]), full[10:11])


@pytest.mark.parametrize("H", [32, 64])
def test_index_scores_own_keys_and_key_splits_give_the_same_bits(H):
    """A query's scores are the same bits with the keys shared by a block of queries or its own (decode:
    one query a product, the same product shape), and whatever the key range a program walks."""
    g = torch.Generator(device="cuda").manual_seed(H)
    n, m, D = 37, 1000, 128
    q = torch.randn(n, H, D, device="cuda", generator=g).bfloat16()
    keys = torch.randn(m, D, device="cuda", generator=g).bfloat16()
    w = torch.rand(n, H, device="cuda", generator=g).bfloat16()
    shared = triton_index.index_scores(q, keys, w)
    assert torch.equal(triton_index.index_scores(q, keys.expand(n, m, D).contiguous(), w), shared)
    old = triton_index.TARGET_PROGRAMS
    try:
        triton_index.TARGET_PROGRAMS = 1  # every program walks all its keys
        assert torch.equal(triton_index.index_scores(q, keys, w), shared)
    finally:
        triton_index.TARGET_PROGRAMS = old



@pytest.mark.parametrize("n,m,shared,causal", [(300, 2048, True, False), (37, 1000, False, False),
                                               (1024, 1024, True, True), (1000, 250, True, True)])
def test_index_scores_visible_keys_keep_their_bits_rest_minus_inf(n, m, shared, causal):
    """With each query's visible key count (the indexer's causal mask, prefill): the visible keys' scores
    are the unmasked call's bits and agree with the reference, every other key is -inf."""
    g = torch.Generator(device="cuda").manual_seed(n + m)
    H, D = 32, 128
    q = torch.randn(n, H, D, device="cuda", generator=g).bfloat16()
    keys = torch.randn(*(() if shared else (n,)), m, D, device="cuda", generator=g).bfloat16()
    w = (torch.randn(n, H, device="cuda", generator=g) * H**-0.5 * D**-0.5).bfloat16()
    if causal:  # query i at position i of a ratio-(n / m) source sees (i + 1) * m // n rows
        visible = (torch.arange(n, device="cuda") + 1) * m // n
    else:
        visible = torch.randint(0, m + 10, (n,), device="cuda", generator=g)
    unseen = torch.arange(m, device="cuda") >= visible[:, None]
    out = triton_index.index_scores(q, keys, w, visible)
    assert torch.equal(out, triton_index.index_scores(q, keys, w).masked_fill(unseen, -torch.inf))
    ref = reference.index_scores(q, keys, w, visible)
    assert torch.equal(torch.isinf(ref), unseen) and torch.equal(torch.isinf(out), unseen)
    seen = ~unseen
    torch.testing.assert_close(out[seen].float(), ref[seen].float(), rtol=2**-7,
                               atol=2**-7 * float(ref[seen].float().abs().max()))


@pytest.mark.parametrize("n,rows_a_block,blocks,m", [(1, 1026, 1, 1026), (8, 16, 65, 1026), (3, 64, 4, 200)])
def test_pooled_keys_read_in_place_give_the_gathered_keys_bits(n, rows_a_block, blocks, m):
    """A decode step's index keys read from the cache's pool through its block table (``PooledRows``: a dense
    cache's slot is one block; a paged cache's blocks shuffled): the bits of the same keys gathered first."""
    from deepinfer_adapters.kernels.pooled_rows import PooledRows

    g = torch.Generator(device="cuda").manual_seed(n + m)
    H, D = 32, 128
    pool = torch.randn(n * blocks * rows_a_block + 5, D, device="cuda", generator=g).bfloat16()
    table = torch.randperm(n * blocks, device="cuda", generator=g).view(n, blocks)
    rows = PooledRows(pool, table, rows_a_block, m)
    q = torch.randn(n, H, D, device="cuda", generator=g).bfloat16()
    w = torch.rand(n, H, device="cuda", generator=g).bfloat16()
    visible = torch.randint(1, m + 1, (n,), device="cuda", generator=g)
    assert triton_index.supports(q, rows, w, visible)
    got = triton_index.index_scores(q, rows, w, visible)
    assert torch.equal(got, triton_index.index_scores(q, rows.gather(), w, visible))
