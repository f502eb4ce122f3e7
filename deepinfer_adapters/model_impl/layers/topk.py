"""Deterministic top-k, the tie rule for every selection in the models.

The reference uses ``torch.topk(sorted=False)``, whose order among equal values
is implementation-defined (model_spec.md 6.4). Equal scores are common: the
index scores are bf16, and positions outside the causal window or the candidate
pool are all -inf. Our rule: among equal scores the lower index wins. Results
are returned in ascending index order, as the reference re-sorts them.
"""

from __future__ import annotations

import torch


def topk_lowest_index_ties(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices ascending [..., k], their values) of the k largest entries of the last dim."""
    order = torch.sort(-scores.float(), dim=-1, stable=True).indices[..., :k]
    picked = order.sort(dim=-1).values
    return picked, scores.gather(-1, picked)
