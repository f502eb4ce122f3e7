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


def topk_select(scores: torch.Tensor, k: int, ties: str, dtype: torch.dtype, *,
                sorted_by_value: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k under a tie rule (``Numerics.topk_ties``).

    ``lowest_index``: ours (above), indices ascending. ``torch``: what DeepSeek's
    reference code does, ``topk`` on the scores in the activation dtype, whose order
    among equal values is torch's (deterministic for a given device and version, not
    a rule one can state); indices re-sorted ascending unless ``sorted_by_value``
    (the candidate pool keeps the reference's value order, which does not matter to
    the mask it builds)."""
    if ties == "lowest_index":
        return topk_lowest_index_ties(scores, k)
    top = scores.to(dtype).topk(k, dim=-1, sorted=sorted_by_value)
    if sorted_by_value:
        return top.indices, top.values.to(scores.dtype)
    picked = kernels.sort_rows(top.indices)
    return picked, scores.gather(-1, picked)


def topk_lowest_index_ties(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices ascending [..., k], their values) of the k largest entries of the last dim
    (``kernels.topk_lowest_index``: a sort on the CPU, one kernel per row set on the GPU)."""
    return kernels.topk_lowest_index(scores, k)
