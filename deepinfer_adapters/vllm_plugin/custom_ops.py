"""Our hyper-connection math in place of vLLM's DeepSeek-V4 custom ops.

vLLM's in-tree DeepSeek-V4 layers (its V4 model, MTP and DSpark drafters) build
``MHCPreOp``, ``MHCPostOp`` and ``HCHeadOp``. ``register()`` registers the classes
below with ``register_oot`` under those in-tree class names, so every one of them
that vLLM constructs runs ``model_impl.layers.hyper_connection`` instead: the
same code as our model, dispatched through our kernel registry (the torch
reference on the CPU, our CUDA backends where registered). Every device path
(``forward_cuda``/``forward_cpu``/...) and ``forward_native`` (what vLLM compiles
when custom ops are disabled) is the same function.

Arguments outside DeepSeek's configuration (a pre-mix eps different from the
Sinkhorn eps) go to vLLM's own torch implementation, which handles them.
"""

from __future__ import annotations

import torch
from vllm.model_executor.layers.mhc import HCHeadOp, MHCPostOp, MHCPreOp

from deepinfer_adapters import kernels
from deepinfer_adapters.model_impl.layers.hyper_connection import hc_head_collapse, hc_post, hc_pre

DEEPSEEK_POST_MULT = 2.0  # hc_split_sinkhorn's post = 2 * sigmoid(...)


class DeepinferMHCPre(MHCPreOp):
    def forward_native(self, residual: torch.Tensor, fn: torch.Tensor, hc_scale: torch.Tensor,
                       hc_base: torch.Tensor, rms_eps: float, hc_pre_eps: float, hc_sinkhorn_eps: float,
                       hc_post_mult_value: float, sinkhorn_repeat: int, n_splits: int = 1,
                       norm_weight: torch.Tensor | None = None,
                       norm_eps: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """residual [..., hc, D] -> post [..., hc, 1], comb [..., hc, hc] (fp32), layer input [..., D]
        (RMS-normed by ``norm_weight`` when given, as vLLM's fused kernels do)."""
        hc, dim = residual.shape[-2:]
        outer = residual.shape[:-2]
        x = residual.reshape(-1, hc, dim)
        if hc_pre_eps != hc_sinkhorn_eps:
            post, comb, layer_input = MHCPreOp.forward_native(
                self, residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                hc_post_mult_value, sinkhorn_repeat)
        else:
            pre, post, comb = kernels.hc_mixes(x, fn, rms_eps, hc_scale, hc_base, hc, sinkhorn_repeat,
                                               hc_sinkhorn_eps)
            if hc_post_mult_value != DEEPSEEK_POST_MULT:
                post = post * (hc_post_mult_value / DEEPSEEK_POST_MULT)
            layer_input = hc_pre(x, pre)
        if norm_weight is not None:
            layer_input = kernels.rms_norm(layer_input.reshape(-1, dim), norm_weight, norm_eps)
        return post.reshape(*outer, hc, 1), comb.reshape(*outer, hc, hc), layer_input.reshape(*outer, dim)

    forward_cuda = forward_cpu = forward_hip = forward_xpu = forward_native


class DeepinferMHCPost(MHCPostOp):
    def forward_native(self, x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor,
                       comb_res_mix: torch.Tensor) -> torch.Tensor:
        """out_b = post_b * x + sum_a comb[a, b] * residual_a, in residual's dtype."""
        hc, dim = residual.shape[-2:]
        outer = residual.shape[:-2]
        out = hc_post(x.reshape(-1, dim).to(residual.dtype), residual.reshape(-1, hc, dim),
                      post_layer_mix.reshape(-1, hc).float(), comb_res_mix.reshape(-1, hc, hc).float())
        return out.reshape(*outer, hc, dim)

    forward_cuda = forward_cpu = forward_hip = forward_xpu = forward_native


class DeepinferHCHead(HCHeadOp):
    def forward_native(self, hidden_states: torch.Tensor, hc_fn: torch.Tensor, hc_scale: torch.Tensor,
                       hc_base: torch.Tensor, rms_norm_eps: float, hc_eps: float) -> torch.Tensor:
        hc, dim = hidden_states.shape[-2:]
        outer = hidden_states.shape[:-2]
        out = hc_head_collapse(hidden_states.reshape(-1, hc, dim), hc_fn, hc_scale, hc_base, rms_norm_eps, hc_eps)
        return out.reshape(*outer, dim)

    forward_cuda = forward_cpu = forward_hip = forward_xpu = forward_native


# vLLM's in-tree class -> ours (register_oot keys by the in-tree class name)
OOT_OPS: dict[type, type] = {MHCPreOp: DeepinferMHCPre, MHCPostOp: DeepinferMHCPost, HCHeadOp: DeepinferHCHead}
