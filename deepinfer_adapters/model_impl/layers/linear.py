"""Linear layers holding dequantized checkpoint weights, with the reference's FP8 activation step.

The official ``linear()`` quantizes the activation to FP8 (power-of-two scale per
``act_block`` values) before an FP8 or FP4 GEMM and accumulates in fp32. With
exact dequantized weights, quantize -> fp32 matmul -> cast gives the same result
up to summation order. bf16 weights (never quantized) skip the activation step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.quant import fp8_roundtrip


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, *, quantized: bool, act_block: int = 0) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.quantized = quantized
        self.act_block = act_block
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)

    def forward(self, x: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        if self.quantized and numerics.act_quant:
            x = fp8_roundtrip(x, self.act_block)
        return F.linear(x.float(), self.weight.float()).to(x.dtype)
