"""Linear layers holding checkpoint weights, with the reference's FP8 activation step.

The official ``linear()`` quantizes the activation to FP8 (power-of-two scale per
``act_block`` values) before an FP8 or FP4 GEMM and accumulates in fp32. With
exact dequantized weights, quantize -> fp32 matmul -> cast gives the same result
up to summation order. bf16 weights (never quantized) skip the activation step.

Two storages, chosen when the model is built (model_impl/native_format.py):
- dense (default, the reference path): float64, so the batch-invariant reference
  GEMM (fp64 accumulation, see kernels.reference.linear) needs no conversion per
  call; every checkpoint value (bf16, FP8 x scale, FP4 x scale) is exact in it.
- native: an FP8 checkpoint weight stays E4M3 with its block scales (``block`` set)
  and goes through ``kernels.fp8_linear``; a bf16 one stays bf16. With the torch
  reference ops both give the dense path's results bit for bit.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from deepinfer_adapters import kernels
from deepinfer_adapters.model_impl.numerics import Numerics


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, *, quantized: bool, act_block: int = 0) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.quantized = quantized
        self.act_block = act_block
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=torch.float64), requires_grad=False)
        self.block: tuple[int, int] | None = None  # native FP8: the scale tile

    def forward(self, x: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        if self.block is not None:
            act_block = self.act_block if self.quantized and numerics.act_quant else 0
            return kernels.fp8_linear(x, self.weight, self.scale, self.block, act_block)
        if self.quantized and numerics.act_quant:
            x = kernels.fp8_roundtrip(x, self.act_block)
        return kernels.linear(x, self.weight, out_dtype=x.dtype)

    def store_fp8(self, block: tuple[int, int], scale_dtype: torch.dtype) -> None:
        """Hold the weight as E4M3 [out, in] with one ``scale_dtype`` scale per ``block`` tile."""
        device = self.weight.device
        self.weight = _frozen(torch.empty(self.out_features, self.in_features, dtype=torch.float8_e4m3fn,
                                          device=device))
        scale_shape = (math.ceil(self.out_features / block[0]), math.ceil(self.in_features / block[1]))
        self.scale = _frozen(torch.empty(scale_shape, dtype=scale_dtype, device=device))
        self.block = block

    def store_dtype(self, dtype: torch.dtype) -> None:
        """Hold a (bf16) checkpoint weight in its own dtype."""
        self.weight = _frozen(torch.empty_like(self.weight, dtype=dtype))


def _frozen(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t, requires_grad=False)
