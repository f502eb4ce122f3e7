"""The V4.1 candidate pool (``IndexerV41._candidate_pool``) against a plain statement of model_spec.md's
rule: each block of ``candidate_block_size`` rows scores its best row; the block holding the query's newest
visible row is always kept; the best ``candidate_topk_blocks`` blocks with a visible row are kept. With
fewer blocks than that (every block a pick) there is no pool (None): the rule would drop only unseen rows."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.model_impl.layers.indexer_v41 import IndexerV41
from deepinfer_adapters.model_impl.numerics import Numerics


def _pool(pool_blocks: int, block_size: int) -> IndexerV41:
    indexer = IndexerV41.__new__(IndexerV41)
    torch.nn.Module.__init__(indexer)
    indexer.pool_blocks, indexer.pool_block_size = pool_blocks, block_size
    return indexer


def _expected(scores: torch.Tensor, visible: torch.Tensor, pool_blocks: int, bs: int) -> torch.Tensor:
    n, m = scores.shape
    keep = torch.zeros(n, m, dtype=torch.bool)
    for i in range(n):
        best = [(float(scores[i, b:b + bs].float().max()), b // bs) for b in range(0, m, bs)]
        newest = (int(visible[i]) - 1) // bs
        ranked = sorted(best, key=lambda vb: (vb[1] != newest, -vb[0], vb[1]))  # newest first, then by score
        for value, block in ranked[:pool_blocks]:
            if block == newest or value > -torch.inf:
                keep[i, block * bs:(block + 1) * bs] = True
    return keep


@pytest.mark.parametrize("pool_blocks", [3, 64], ids=["fewer_picks_than_blocks", "every_block_a_pick"])
@pytest.mark.parametrize("m", [37, 40])
def test_candidate_pool_keeps_the_best_blocks_with_visible_rows(pool_blocks, m):
    g = torch.Generator().manual_seed(m + pool_blocks)
    n, bs = 12, 4
    visible = torch.randint(1, m + 1, (n,), generator=g)
    scores = torch.randn(n, m, generator=g).bfloat16()  # distinct block maxima: no ties to rank
    scores = scores.masked_fill(torch.arange(m) >= visible[:, None], -torch.inf)
    keep = _pool(pool_blocks, bs)._candidate_pool(scores, visible, Numerics())
    expected = _expected(scores, visible, pool_blocks, bs)
    if pool_blocks * bs >= m:  # None: the pool would drop only unseen rows, -inf already
        assert keep is None
        assert torch.equal(scores.masked_fill(~expected, -torch.inf), scores)
    else:
        assert keep.shape == (n, m)
        assert torch.equal(keep, expected)
        assert not torch.equal(scores.masked_fill(~keep, -torch.inf), scores)  # this pool drops visible rows
