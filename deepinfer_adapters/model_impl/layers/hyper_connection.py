"""Manifold-constrained hyper-connections (model_spec.md 2.2).

The residual stream is ``hc`` parallel copies [T, hc, D]. A sublayer reads
``hc_pre`` (a weighted collapse to [T, D]) and writes back through ``hc_post``
(its output spread by ``post`` plus the residual mixed by the doubly-stochastic
``comb``). ``hc_mixes`` derives pre/post/comb from the stream itself.
"""

from __future__ import annotations

import torch
from torch import nn

from deepinfer_adapters import kernels
from deepinfer_adapters.config import ModelConfig
from deepinfer_adapters.kernels import invariance


class HyperConnection(nn.Module):
    """The mix parameters of one sublayer, registered on the block as ``hc_{branch}_{fn,base,scale}``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.hc, self.iters, self.hc_eps, self.norm_eps = cfg.hc_mult, cfg.hc_sinkhorn_iters, cfg.hc_eps, cfg.rms_norm_eps
        self.fn = nn.Parameter(torch.empty(cfg.hc_mix_dim, cfg.hc_mult * cfg.hidden_size, dtype=torch.float64),
                               requires_grad=False)
        self.base = nn.Parameter(torch.empty(cfg.hc_mix_dim), requires_grad=False)
        self.scale = nn.Parameter(torch.empty(3), requires_grad=False)

    def mixes(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [T, hc, D] -> pre [T, hc], post [T, hc], comb [T, hc, hc] (fp32)."""
        return kernels.hc_mixes(x, self.fn, self.norm_eps, self.scale, self.base, self.hc, self.iters, self.hc_eps)


def mix_logits(x: torch.Tensor, fn: torch.Tensor, norm_eps: float) -> torch.Tensor:
    """(flat(X) @ fn^T) * rsqrt(mean(flat(X)^2) + eps): one RMS statistic per token over all hc*D values."""
    return kernels.hc_mix_logits(x, fn, norm_eps)


def hc_head_collapse(x: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, norm_eps: float,
                     eps: float) -> torch.Tensor:
    """The HC head: x [T, hc, D] -> [T, D] with pre = sigmoid(mix_logits * scale + base) + eps."""
    logits = mix_logits(x, fn, norm_eps) * scale.float() + base.float()
    pre = torch.sigmoid(invariance.wide(logits)).float()
    return hc_pre(x, pre + eps)


def hc_pre(x: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    """Collapse [T, hc, D] with weights [T, hc] -> [T, D] (fp32 sum, cast back)."""
    return kernels.hc_pre(x, pre)


def hc_pre_norm(x: torch.Tensor, pre: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """norm(hc_pre(x, pre)) for an RMSNorm ``norm``: a sublayer's input, one kernel op."""
    return kernels.hc_pre_norm(x, pre, norm.weight, norm.eps)


def hc_post(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """Expand y [T, D] to [T, hc, D]: post_b * y + sum_a comb[a, b] * residual_a."""
    return kernels.hc_post(y, residual, post, comb)


def hc_post_pre_norm(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
                     pre: torch.Tensor, norm: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, norm(hc_pre(x, pre))) with x = hc_post(y, residual, post, comb): a sublayer's new streams and the next
    sublayer's input, one kernel op (one launch where a backend fuses them)."""
    return kernels.hc_post_pre_norm(y, residual, post, comb, pre, norm.weight, norm.eps)


def identity_pre_mix(num_tokens: int, hc: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """V4.1's first collapse: all weight on stream 0."""
    pre = torch.zeros(num_tokens, hc, dtype=torch.float32, device=device)
    pre[:, 0] = 1.0
    return pre
