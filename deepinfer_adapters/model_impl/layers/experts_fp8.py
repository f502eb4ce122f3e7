"""Routed experts in the native FP8 format: every expert's weights stacked, E4M3 with
their block scales, run by ``kernels.moe_experts`` (the torch reference is the
expert loop of layers/moe.py; the CUDA backend a grouped GEMM, kernels/triton_moe.py).

FP4 checkpoint experts convert exactly (model_impl/native_format.py): to E4M3 with
one E8M0 scale per 128 inputs, a (1, 128) block, where every value of the layer has an
exact code under it (quant.fp4_to_fp8_blocks) -- and where that holds with one scale per 128
rows too, that one (each row a copy: the same layout; the prefill's FP8 MoE kernel then
promotes with one multiply, kernels/gluon_moe.py ``tile_scales``); otherwise each E2M1 value (0, .5, .., 6)
as its E4M3 value with the checkpoint's scale per 32 inputs, a (1, 32) block. Or
(``packed_fp4``, weights="fp4") kept packed: E2M1, two values a byte (uint8 [E, out, in / 2]),
the nibbles of each 64 inputs reordered so that a GEMM step's two halves unpack without an
interleave, and each 128-row x 64-input tile's bytes contiguous (quant.to_fp4_tiles), with the
checkpoint's E8M0 scale per 32 inputs: half the bytes, which a decode step reads (the GPU kernel
unpacks each tile in registers, kernels/fp8_triton_jit.py ``e2m1_halves``). E4M3 experts whose
widths 128 divides are held in 128 x 128 tiles where the decode path reads them faster
(``holds_e4m3_tiles``), each tile's bytes contiguous (quant.to_e4m3_tiles; shape [E, N / 128,
K / 128, 128, 128]). w1 and w3 are stacked as w13 = [w1; w3] so one GEMM computes both.
"""

from __future__ import annotations

from collections.abc import Callable

import math

import torch
from torch import nn

from deepinfer_adapters import kernels
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.quant import (E4M3_TILE, dequant_fp4_experts, dequant_fp8_blocks, e4m3_tiled,
                                                 from_e4m3_tiles, from_fp4_tiles, is_e4m3_tiles, is_span_packed)


def holds_e4m3_tiles(dim: int, inter: int, act_block: int) -> bool:
    """Whether E4M3 experts are held in 128 x 128 tiles (quant.to_e4m3_tiles): where 128 divides their
    widths and the activation scales are finer than 128 (V4.1). Their decode then takes the bf16 path,
    which the tiles speed up; V4's per-128 activations decode on the fp8 path, whose 64-row N tiles
    the tiles would make 128 rows: 2x slower there (H200, a V4.1-width layer at 8 / 32 tokens: bf16 path
    405 / 1370 us tiled against 431 / 1437; fp8 path 1057 / 3408 tiled against 535 / 1757, session 9)."""
    return act_block < E4M3_TILE and e4m3_tiled(2 * inter, dim) and e4m3_tiled(dim, inter)


class Fp8Experts(nn.Module):
    def __init__(self, n_experts: int, dim: int, inter: int, *, block: tuple[int, int], scale_dtype: torch.dtype,
                 act_block: int, limit: float, packed_fp4: bool = False,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        self.block, self.act_block, self.limit = block, act_block, limit

        # the GPU layouts (model_impl/native_format.py stacks the checkpoint's experts the same way)
        tiles = not packed_fp4 and holds_e4m3_tiles(dim, inter, act_block)

        def weight(out_f: int, in_f: int) -> nn.Parameter:
            if packed_fp4:
                shape, dtype = (n_experts, out_f, in_f // 2), torch.uint8
            elif tiles:
                t = E4M3_TILE
                shape, dtype = (n_experts, out_f // t, in_f // t, t, t), torch.float8_e4m3fn
            else:
                shape, dtype = (n_experts, out_f, in_f), torch.float8_e4m3fn
            return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)

        def scale(out_f: int, in_f: int) -> nn.Parameter:
            shape = (n_experts, math.ceil(out_f / block[0]), math.ceil(in_f / block[1]))
            return nn.Parameter(torch.empty(shape, dtype=scale_dtype, device=device), requires_grad=False)

        self.w13, self.w13_scale = weight(2 * inter, dim), scale(2 * inter, dim)
        self.w2, self.w2_scale = weight(dim, inter), scale(dim, inter)

    @property
    def packed_fp4(self) -> bool:
        return is_span_packed(self.w13)

    @property
    def e4m3_tiles(self) -> bool:
        return is_e4m3_tiles(self.w13)

    def dense(self, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert e's weights dequantized exactly, float32: (w13 [2I, D], w2 [D, I])."""
        def dequant(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
            if self.packed_fp4:
                return dequant_fp4_experts(from_fp4_tiles(w), s, torch.float32, self.block[1])
            return dequant_fp8_blocks(from_e4m3_tiles(w) if self.e4m3_tiles else w, s, self.block, torch.float32)

        return dequant(self.w13[e], self.w13_scale[e]), dequant(self.w2[e], self.w2_scale[e])

    def forward(self, x: torch.Tensor, route_w: torch.Tensor, expert_ids: torch.Tensor,
                numerics: Numerics, shared: torch.Tensor | Callable[[], torch.Tensor] | None = None) -> torch.Tensor:
        """x [T, D], route weights and expert ids [T, k] -> fp32 [T, D] (routed sum); with the
        shared expert's output [T, D] (or a callable returning it once needed, which joins the
        stream it runs on), that added and the sum in its dtype (one kernel on the GPU)."""
        act_block = self.act_block if numerics.act_quant else 0
        return kernels.moe_experts(x, route_w, expert_ids, self.w13, self.w13_scale, self.w2, self.w2_scale,
                                   self.block, act_block, self.limit, shared=shared)
