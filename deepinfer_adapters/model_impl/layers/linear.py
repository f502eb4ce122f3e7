"""Linear layers holding dequantized checkpoint weights, with the reference's FP8 activation step.

The official ``linear()`` quantizes the activation to FP8 (power-of-two scale per
``act_block`` values) before an FP8 or FP4 GEMM and accumulates in fp32. With
exact dequantized weights, quantize -> fp32 matmul -> cast gives the same result
up to summation order. bf16 weights (never quantized) skip the activation step.
Weights are held in float64 so the batch-invariant reference GEMM (fp64
accumulation, see kernels.reference.linear) needs no conversion per call; every
checkpoint value (bf16, FP8 x scale, FP4 x scale) is exact in it.
"""

from __future__ import annotations

import torch
from torch import nn

from deepinfer_adapters import kernels
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.quant import fp8_roundtrip


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, *, quantized: bool, act_block: int = 0) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.quantized = quantized
        self.act_block = act_block
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=torch.float64), requires_grad=False)

    def forward(self, x: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        if self.quantized and numerics.act_quant:
            x = fp8_roundtrip(x, self.act_block)
        return kernels.linear(x, self.weight).to(x.dtype)
