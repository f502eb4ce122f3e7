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

Linears that read the same input (wq_a and wkv, a shared expert's w1 and w3, a
compressor's wkv and wgate) are merged when a native model is built
(``merge_same_input``): one weight holds their rows, each member's parameters become
views of it, and one GEMM computes every output. A decode step at batch 1 is
launch-bound (docs/notes/gpu_fast_path.md), so this saves a GEMM launch (and its
activation quantization and split-K sum) per group and layer. Each output column is
the same dot product as before; only a fast backend's tiling, chosen by the merged
width, may change its summation order.
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

    def forward(self, x: torch.Tensor, numerics: Numerics, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """x [.., in] -> [.., out] in x's dtype, or ``out_dtype``: the fp32 logits of the heads, computed from x's
        values as they are (``kernels.linear``: the same as from an fp32 copy of them, without the copy's launch)."""
        if self.block is not None:
            if out_dtype not in (None, x.dtype):
                raise ValueError(f"an FP8 linear gives x's dtype {x.dtype}, not {out_dtype}")
            act_block = self.act_block if self.quantized and numerics.act_quant else 0
            return kernels.fp8_linear(x, self.weight, self.scale, self.block, act_block)
        if self.quantized and numerics.act_quant:
            x = kernels.fp8_roundtrip(x, self.act_block)
        return kernels.linear(x, self.weight, out_dtype=out_dtype or x.dtype)

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


class MergedLinear:
    """Linears with one input and one storage kind, run as one GEMM: calling it gives each
    member's output (column views of one [.., sum of widths] result).

    Built after the members' storage is allocated (before weights are loaded: loading
    copies into the members' views). Not a module: the members keep their parameters
    and names; ``Module.to`` would copy the views apart, so a merged model stays where
    it was built."""

    def __init__(self, members: list[Linear]) -> None:
        first = members[0]
        self.widths = [m.out_features for m in members]
        self.linear = Linear(first.in_features, sum(self.widths), quantized=first.quantized,
                             act_block=first.act_block)
        self.linear.weight = _frozen(torch.cat([m.weight for m in members]))
        if first.block is not None:
            self.linear.block = first.block
            self.linear.scale = _frozen(torch.cat([m.scale for m in members]))
        row = scale_row = 0
        for m, width in zip(members, self.widths):
            m.weight = _frozen(self.linear.weight[row:row + width])
            row += width
            if first.block is not None:
                rows = width // first.block[0]
                m.scale = _frozen(self.linear.scale[scale_row:scale_row + rows])
                scale_row += rows

    @staticmethod
    def can_merge(members: list["Linear | None"]) -> bool:
        """Same input width, storage and activation rule; FP8 widths whole scale tiles."""
        if len(members) < 2 or any(m is None for m in members):
            return False
        first = members[0]
        same = all((m.in_features, m.quantized, m.act_block, m.block, m.weight.dtype, m.weight.device)
                   == (first.in_features, first.quantized, first.act_block, first.block, first.weight.dtype,
                       first.weight.device) for m in members)
        whole_tiles = first.block is None or all(m.out_features % first.block[0] == 0 for m in members)
        return same and whole_tiles and first.weight.device.type != "meta"

    def __call__(self, x: torch.Tensor, numerics: Numerics,
                 out_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, ...]:
        return self.linear(x, numerics, out_dtype).split(self.widths, dim=-1)


def same_input(x: torch.Tensor, numerics: Numerics, merged: MergedLinear | None, *members: Linear,
               out_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, ...]:
    """Every member's output on x (in ``out_dtype``: ``Linear.forward``): one GEMM when they were merged, else one
    each."""
    if merged is not None:
        return merged(x, numerics, out_dtype)
    return tuple(m(x, numerics, out_dtype) for m in members)


def merge_same_input(model: nn.Module) -> int:
    """Merge each module's same-input linears (``SAME_INPUT``: merged attribute -> member
    names) where ``MergedLinear.can_merge``; returns how many groups were merged."""
    merged = 0
    for module in model.modules():
        for attr, names in getattr(module, "SAME_INPUT", {}).items():
            members = [getattr(module, n, None) for n in names]
            if MergedLinear.can_merge(members):
                setattr(module, attr, MergedLinear(members))
                merged += 1
    return merged


def _frozen(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t, requires_grad=False)
