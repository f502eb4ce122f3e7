"""Deterministic top-k, the tie rule for every selection in the models.

The reference uses ``torch.topk(sorted=False)``, whose order among equal values
is implementation-defined (model_spec.md 6.4). Equal scores are common: the
index scores are bf16, and positions outside the causal window or the candidate
pool are all -inf. Our rule: among equal scores the lower index wins. Results
are returned in ascending index order, as the reference re-sorts them.
"""

from __future__ import annotations

import torch

from deepinfer_adapters import kernels


def topk_select(scores: torch.Tensor, k: int, ties: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k under a tie rule (``Numerics.topk_ties``), indices ascending with their values.

    ``lowest_index``: ours (above). ``torch``: what DeepSeek's reference code does, ``topk``
    on the scores in the activation dtype, whose choice among equal values is torch's
    (``kernels.topk_torch_order``: per device; on CUDA the Triton backend states it)."""
    if ties == "lowest_index":
        return topk_lowest_index_ties(scores, k)
    ranked = scores.to(dtype)
    picked, values = kernels.topk_torch_order(ranked, k)
    return picked, values if ranked is scores else scores.gather(-1, picked)


def topk_lowest_index_ties(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices ascending [..., k], their values) of the k largest entries of the last dim
    (``kernels.topk_lowest_index``: a sort on the CPU, one kernel per row set on the GPU)."""
    return kernels.topk_lowest_index(scores, k)
