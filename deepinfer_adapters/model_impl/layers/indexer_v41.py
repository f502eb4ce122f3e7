"""V4.1 indexer (model_spec.md 2.4): which compressed rows each query attends to.

KV-source layers publish index keys ``k = k_norm(wk latent)``, RoPE'd at the
group's first position and FP4 round-tripped. Index-source layers score
``sum_h w_h relu(q_h . k_t)`` over the latest source's keys, mask what the query
cannot see yet (row t is visible from position p iff t < (p+1) // ratio), and
keep the top ``index_topk``. The candidate-source layer also picks the best
``candidate_topk_blocks`` blocks of ``candidate_block_size`` rows (the block
holding the newest visible row always kept); later index sources score only
inside that pool. Scores are rounded where the reference's tensors are bf16.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from deepinfer_adapters import kernels
from deepinfer_adapters.config import AttnRole, LayerSpec, ModelConfig
from deepinfer_adapters.model_impl.layers.linear import Linear
from deepinfer_adapters.model_impl.layers.norm import RMSNorm
from deepinfer_adapters.model_impl.layers.topk import topk_select
from deepinfer_adapters.model_impl.numerics import Numerics

INDEX_FP4_BLOCK = 32


def unseen_rows(visible: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """[n, m] True where row ``rows[j]`` is past the ``visible[i]`` rows query i can see."""
    return rows >= visible.unsqueeze(-1)


class IndexerV41(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: LayerSpec) -> None:
        super().__init__()
        self.n_heads, self.head_dim, self.topk = cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk
        self.weight_scale = self.head_dim**-0.5 * self.n_heads**-0.5
        self.is_candidate_source = layer.attn is AttnRole.CANDIDATE_SOURCE
        self.uses_pool = layer.attn is AttnRole.REINDEX and layer.uses_candidate_pool
        self.pool_blocks, self.pool_block_size = cfg.candidate_topk_blocks, cfg.candidate_block_size
        if layer.is_kv_source:
            self.wk = Linear(cfg.head_dim, self.head_dim, quantized=False)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        if layer.has_indexer_query:
            self.wq_b = Linear(cfg.q_lora_rank, self.n_heads * self.head_dim, quantized=True,
                               act_block=cfg.quant.fp8_block[1])
            self.weights_proj = Linear(cfg.hidden_size, self.n_heads, quantized=False)

    def index_keys(self, latent: torch.Tensor, freqs: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        """Latents [m, head_dim] (pre-RoPE) -> index keys [m, index_head_dim]."""
        k = kernels.apply_rope(self.k_norm(self.wk(latent, numerics)), freqs)
        return kernels.fp4_roundtrip_e8m0(k, INDEX_FP4_BLOCK) if numerics.kv_quant else k

    def scores(self, x: torch.Tensor, qr: torch.Tensor, freqs: torch.Tensor, keys: torch.Tensor,
               numerics: Numerics, visible: torch.Tensor | None = None) -> torch.Tensor:
        """[n, m] index scores of n queries against m keys [m, dk]; keys [n, m, dk]: each query
        its own m keys (batched decode). ``visible`` [n]: the rows each query can see; the others
        come back -inf (``select(..., masked=True)``), else nothing is masked yet."""
        return self.scores_of(*self.queries(x, qr, freqs, numerics), keys, visible)

    def queries(self, x: torch.Tensor, qr: torch.Tensor, freqs: torch.Tensor,
                numerics: Numerics) -> tuple[torch.Tensor, torch.Tensor]:
        """The scores' query side, which needs no keys: (index queries [n, H, dk], head weights [n, H]), both
        in the activation dtype."""
        return self.index_queries(qr, freqs, numerics), self.head_weights(x, numerics)

    def index_queries(self, qr: torch.Tensor, freqs: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        """``queries``' first part, from the query latent: [n, H, dk]."""
        q = self.wq_b(qr, numerics).unflatten(-1, (self.n_heads, self.head_dim))
        q = kernels.apply_rope(q, freqs, overwrite=True)  # q is this call's own, as in AttentionBase.query_heads
        if numerics.kv_quant:
            q = kernels.fp4_roundtrip_e8m0(q, INDEX_FP4_BLOCK)
        return q.to(numerics.dtype)

    def head_weights(self, x: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        """``queries``' second part, from the layer's input alone: [n, H]."""
        return (self.weights_proj(x, numerics) * self.weight_scale).to(numerics.dtype)

    @staticmethod
    def scores_of(q: torch.Tensor, w: torch.Tensor, keys: torch.Tensor,
                  visible: torch.Tensor | None = None) -> torch.Tensor:
        """``scores`` from ``queries``' output."""
        return kernels.index_scores(q, keys, w, visible=visible)

    def select(self, scores: torch.Tensor, visible: torch.Tensor, scratch: dict,
               numerics: Numerics = Numerics(), masked: bool = False) -> torch.Tensor:
        """Masked top-k. scores [n, m]; visible [n] rows each query can see.

        Returns row indices [n, k] ascending, -1 where the pick is not visible.
        ``scratch['candidates']`` carries the candidate pool to the layers after the source.
        ``masked``: the unseen rows are -inf already (``scores(..., visible)``).
        """
        picked = self.pick(scores, visible, scratch, numerics, masked)
        return torch.where(picked < visible.unsqueeze(-1), picked, -1)

    def pick(self, scores: torch.Tensor, visible: torch.Tensor, scratch: dict, numerics: Numerics = Numerics(),
             masked: bool = False) -> torch.Tensor:
        """``select``'s top-k rows [n, k] ascending before the unseen ones become -1: a decode step's
        ``selected_keys`` masks them itself (``picked < visible``)."""
        m = scores.shape[-1]
        if not masked:
            # masks and top-k are exact in the scores' own dtype (the activation dtype, which
            # ``topk_select`` ranks in anyway)
            scores = scores.masked_fill(unseen_rows(visible, torch.arange(m, device=scores.device)), -torch.inf)
        if self.is_candidate_source:
            scratch["candidates"] = self._candidate_pool(scores, visible, numerics)
        elif self.uses_pool and scratch["candidates"] is not None:
            scores = scores.masked_fill(~scratch["candidates"], -torch.inf)
        return topk_select(scores, min(self.topk, m), numerics.topk_ties, numerics.dtype)[0]

    def _candidate_pool(self, scores: torch.Tensor, visible: torch.Tensor,
                        numerics: Numerics) -> torch.Tensor | None:
        """[n, m] bool: the rows of each query's picked blocks; None where every block is a pick (m up to
        ``candidate_topk_blocks`` blocks: 16384 rows in V4.1): then the pool keeps every block with a visible
        row, and the rows it drops are the unseen ones, already -inf wherever the pool is applied."""
        bs, m = self.pool_block_size, scores.shape[-1]
        if self.pool_blocks * bs >= m:
            return None
        # each block's max; the last block may be short (ceil_mode: its window holds the rows there are).
        # A pooling kernel: torch's amax over [n, m / bs, bs] took 0.67 ms at 8192 x 8192 on the H200
        blocks = F.max_pool1d(scores, bs, bs, ceil_mode=True)
        n_blocks = blocks.shape[-1]
        newest = (visible - 1).div(bs, rounding_mode="floor")  # the partly filled block stays in
        blocks = blocks.masked_fill(torch.arange(n_blocks, device=blocks.device) == newest.unsqueeze(-1), torch.inf)
        top, values = topk_select(blocks, self.pool_blocks, numerics.topk_ties, numerics.dtype)
        keep = torch.zeros_like(blocks, dtype=torch.bool).scatter_(-1, top, values > -torch.inf)
        return keep.repeat_interleave(bs, dim=-1)[..., :m]
