"""Pure-torch references of the ops on native FP8 weights (block-scaled E4M3 as stored).

Each dequantizes the weight exactly (E4M3 x power-of-two scale is exact in float32)
and then runs the very arithmetic the dense-weight path runs (layers/linear.py,
the grouped wo_a einsum of attention_common.py, the expert loop of layers/moe.py),
so a model holding native weights gives bit-identical results to one holding
float64 dequantized weights when these references run.

Weight layout: ``weight`` [..., N, K] ``float8_e4m3fn``; ``scale`` [..., ceil(N/B0),
ceil(K/B1)] float32 or E8M0 (``float8_e8m0fnu``), one per ``block`` = (B0, B1) tile.
``act_block`` > 0: the activation is FP8-quantized per ``act_block`` values first
(the reference's ``act_quant``); 0: it enters the GEMM as it is (bf16 weights' rule).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from deepinfer_adapters.kernels.invariance import narrow
from deepinfer_adapters.kernels.reference import linear, swiglu
from deepinfer_adapters.model_impl.quant import (  # noqa: F401  (the round trips are ops here as they are)
    dequant_fp8_blocks,
    fp4_roundtrip_e4m3,
    fp4_roundtrip_e8m0,
    fp8_roundtrip,
    from_e4m3_tiles,
    from_fp4_tiles,
    is_e4m3_tiles,
    is_span_packed,
    unpack_fp4,
)

OPS = ("fp8_linear", "fp8_grouped_linear", "moe_experts", "fp8_roundtrip", "fp4_roundtrip_e8m0", "fp4_roundtrip_e4m3")


def dequant(weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """[N, K] float32, exact."""
    return dequant_fp8_blocks(weight, scale, block, torch.float32)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int],
               act_block: int) -> torch.Tensor:
    """x [T, K] @ W^T -> [T, N] in x's dtype, as ``Linear`` with the dense weight computes it."""
    if act_block:
        x = fp8_roundtrip(x, act_block)
    return linear(x, dequant(weight, scale, block)).to(x.dtype)


def fp8_grouped_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                       block: tuple[int, int]) -> torch.Tensor:
    """Per-group projection without activation quantization (V4/V4.1 ``wo_a``):
    x [T, G, Din], weight [G * R, Din] -> [T, G, R] in x's dtype, z[t, g] = W_g x[t, g]."""
    groups = x.shape[1]
    w = dequant(weight, scale, block).view(groups, -1, x.shape[-1])
    return torch.einsum("tgd,grd->tgr", narrow(x), narrow(w, x.dtype)).to(x.dtype)


def moe_experts(x: torch.Tensor, route_w: torch.Tensor, expert_ids: torch.Tensor,
                w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor, w2_scale: torch.Tensor,
                block: tuple[int, int], act_block: int, limit: float,
                shared: torch.Tensor | Callable[[], torch.Tensor] | None = None) -> torch.Tensor:
    """Routed experts: y[t] = sum_j route_w[t, j] Expert_{expert_ids[t, j]}(x[t]), fp32 [T, D].

    x [T, D]; route_w [T, k] fp32; expert_ids [T, k]; w13 [E, 2I, D] holds w1 (rows :I)
    over w3 (rows I:); w2 [E, D, I]; scales per ``block``; E4M3, or packed E2M1 (uint8
    [E, 2I, D / 2] and [E, D, I / 2] in ``quant.to_fp4_tiles``' layout), or E4M3 in
    ``quant.to_e4m3_tiles``' (5-D). Expert e's rows are added in
    ascending e, as layers/moe.py does. ``shared`` [T, D] (the shared expert's output):
    added to y in fp32 after the routed rows, and y returned in shared's dtype -- the MoE
    layer's last two steps. ``shared`` may be a callable returning it, called only once the
    routed rows are done (the MoE's shared expert may still be running on a side stream:
    calling it joins that stream, model_impl/overlap.py).
    """
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    counts = torch.bincount(expert_ids.flatten(), minlength=w13.shape[0]).tolist()
    held = from_e4m3_tiles if is_e4m3_tiles(w13) else (lambda w: w)  # one expert's matrix as [N, K]
    for e, n in enumerate(counts):
        if n == 0:
            continue
        rows, slot = torch.where(expert_ids == e)
        y[rows] += _expert(x[rows], route_w[rows, slot, None], held(w13[e]), w13_scale[e], held(w2[e]), w2_scale[e],
                           block, act_block, limit).float()
    if shared is not None:
        shared = shared() if callable(shared) else shared
        y += shared.float()
        return y.to(shared.dtype)
    return y


def _expert(x: torch.Tensor, route_w: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor,
            w2: torch.Tensor, w2_scale: torch.Tensor, block: tuple[int, int], act_block: int,
            limit: float) -> torch.Tensor:
    """layers/moe.py Expert.forward: clamped SwiGLU, the route weight before w2. Packed E2M1
    weights (uint8, the span layout) are unpacked to E4M3 codes of the same values first."""
    if is_span_packed(w13):
        w13, w2 = (unpack_fp4(from_fp4_tiles(w)).to(torch.float8_e4m3fn) for w in (w13, w2))
    inter = w2.shape[1]
    scale_rows = inter // block[0]
    gate = fp8_linear(x, w13[:inter], w13_scale[:scale_rows], block, act_block)
    up = fp8_linear(x, w13[inter:], w13_scale[scale_rows:], block, act_block)
    return fp8_linear(swiglu(gate, up, limit, route_w), w2, w2_scale, block, act_block)
