"""RMSNorm (fp32 inside, model_spec.md 2.1)."""

from __future__ import annotations

import torch
from torch import nn

from deepinfer_adapters import kernels


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.rms_norm(x, self.weight, self.eps)
