"""Mixture of experts (model_spec.md 2.6): sqrtsoftplus gate with a selection-only bias
(or V4's hash routing through tid2eid), clamped SwiGLU experts, one shared expert.

Routed experts are FP4 in the checkpoint and the shared expert FP8; both take an
FP8-quantized activation in the reference. The routed sum accumulates in fp32.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from deepinfer_adapters import kernels
from deepinfer_adapters.config import LayerSpec, ModelConfig, Routing
from deepinfer_adapters.model_impl.layers.experts_fp8 import Fp8Experts
from deepinfer_adapters.model_impl.layers.linear import Linear, MergedLinear, same_input
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl import overlap
from deepinfer_adapters.model_impl.overlap import aside, join_all


class Gate(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: LayerSpec, *, vision: bool = False) -> None:
        super().__init__()
        self.topk = layer.num_experts_per_tok
        self.hash = layer.routing is Routing.HASH
        self.scale = cfg.routed_scaling_factor
        self.temp = cfg.gate_temp
        # V4.1 adds 1e-20 to the normaliser and skips it for top-1 (training's rule); V4 divides plainly.
        self.renormalize = cfg.norm_topk_prob and (self.topk > 1 or not cfg.is_v41)
        self.eps = 1e-20 if cfg.is_v41 else 0.0
        E = layer.n_routed_experts
        self.weight = nn.Parameter(torch.empty(E, cfg.hidden_size, dtype=torch.float64), requires_grad=False)
        if self.hash:
            self.register_buffer("tid2eid", torch.zeros(cfg.vocab_size, self.topk, dtype=torch.long))
        else:
            self.bias = nn.Parameter(torch.empty(E), requires_grad=False)
            self.bias_vl = nn.Parameter(torch.empty(E), requires_grad=False) if vision else None

    def forward(self, x: torch.Tensor, input_ids: torch.Tensor, image_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, D] -> (weights [T, k] fp32, expert ids [T, k]): see ``kernels.moe_route``."""
        logits = kernels.linear(x, self.weight)  # fp32 logits of x's values (kernels.linear), no fp32 copy
        bias = ids = None
        if self.hash:
            ids = self.tid2eid[input_ids].long()
        else:
            bias = self.bias.float()
            if image_mask is not None and self.bias_vl is not None:
                bias = torch.where(image_mask.unsqueeze(-1), self.bias_vl.float(), bias)
        return kernels.moe_route(logits, bias, self.topk, self.renormalize, self.eps, self.scale,
                                 temp=self.temp, ids=ids)


class Expert(nn.Module):
    SAME_INPUT = {"w13": ("w1", "w3")}  # merged at load (layers/linear.py)

    def __init__(self, dim: int, inter: int, limit: float, act_block: int) -> None:
        super().__init__()
        self.w1 = Linear(dim, inter, quantized=True, act_block=act_block)
        self.w2 = Linear(inter, dim, quantized=True, act_block=act_block)
        self.w3 = Linear(dim, inter, quantized=True, act_block=act_block)
        self.w13: MergedLinear | None = None
        self.limit = limit
        self.act_block = act_block

    def forward(self, x: torch.Tensor, numerics: Numerics, route_w: torch.Tensor | None = None) -> torch.Tensor:
        gate, up = same_input(x, numerics, self.w13, self.w1, self.w3)
        return self.w2(kernels.swiglu(gate, up, self.limit, route_w), numerics)


class MoE(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: LayerSpec, *, vision: bool = False) -> None:
        super().__init__()
        block = cfg.quant.fp8_block[1]
        self.gate = Gate(cfg, layer, vision=vision)
        self.experts = nn.ModuleList(
            Expert(cfg.hidden_size, cfg.moe_intermediate_size, cfg.swiglu_limit, block)
            for _ in range(layer.n_routed_experts)
        )
        self.shared_experts = (
            Expert(cfg.hidden_size, cfg.moe_intermediate_size, cfg.swiglu_limit, block) if cfg.n_shared_experts else None
        )
        self.routed: Fp8Experts | None = None  # native format: replaces ``experts``

    def use_fp8_experts(self, block: tuple[int, int], scale_dtype: torch.dtype, packed_fp4: bool = False) -> None:
        """Swap the per-expert dense Linears for stacked FP8 (or packed FP4) weights (native format)."""
        first = self.experts[0]
        self.routed = Fp8Experts(len(self.experts), first.w1.in_features, first.w1.out_features, block=block,
                                 scale_dtype=scale_dtype, act_block=first.act_block, limit=first.limit,
                                 packed_fp4=packed_fp4, device=first.w1.weight.device)
        self.experts = nn.ModuleList()

    def forward(self, x: torch.Tensor, numerics: Numerics, input_ids: torch.Tensor,
                image_mask: torch.Tensor | None = None) -> torch.Tensor:
        # the shared expert next to the gate, routing and routed experts (overlap.py): joined where
        # its output is added (inside the experts' kernel, which also casts)
        if self.shared_experts is None:
            return self._routed(x, numerics, input_ids, image_mask, None)
        join = aside(x, lambda: self.shared_experts(x, numerics), urgent=overlap.SHARED_URGENT)
        try:
            out = self._routed(x, numerics, input_ids, image_mask, join)  # joins the shared expert
        except BaseException:
            join_all(join)
            raise
        if overlap.REJOIN_JOINED:
            join_all(join)
        return out

    def _routed(self, x: torch.Tensor, numerics: Numerics, input_ids: torch.Tensor, image_mask: torch.Tensor | None,
                shared: Callable[[], torch.Tensor] | None) -> torch.Tensor:
        w, idx = self.gate(x, input_ids, image_mask)
        if shared is not None and not overlap.SHARED_THROUGH_EXPERTS:
            shared()  # joined here, next to the gate only (later calls return the same output)
        if self.routed is not None and shared is not None:
            return self.routed(x, w, idx, numerics, shared=shared)
        y = self.routed(x, w, idx, numerics) if self.routed is not None else self._dense_experts(x, w, idx, numerics)
        if shared is not None:
            y += shared().float()
        return y.to(x.dtype)

    def _dense_experts(self, x: torch.Tensor, w: torch.Tensor, idx: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        counts = torch.bincount(idx.flatten(), minlength=len(self.experts)).tolist()
        for e, n in enumerate(counts):
            if n == 0:
                continue
            rows, slot = torch.where(idx == e)
            y[rows] += self.experts[e](x[rows], numerics, w[rows, slot, None]).float()
        return y
