"""``kernels.linear``'s reference contract for a bf16 x: an fp32 result is the fp32 GEMM of x's values (what
the MoE gate asks for, passing its bf16 input as it is), a bf16 result the bf16 GEMM (plain bf16 linears)."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import invariance


@pytest.mark.parametrize("invariant", [False, True])
def test_bf16_input_fp32_result_is_the_fp32_gemm(invariant):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 256, generator=g).bfloat16()
    w = (torch.randn(64, 256, generator=g) / 16).bfloat16()
    with invariance.batch_invariant(invariant):
        got = kernels.linear(x, w)
        assert got.dtype == torch.float32
        assert torch.equal(got, kernels.linear(x.float(), w))
        bf16 = kernels.linear(x, w, out_dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16
    if not invariant:  # the bf16 GEMM rounds to bf16: not the fp32 result
        assert torch.equal(bf16, torch.nn.functional.linear(x, w))
        assert not torch.equal(bf16.float(), got)
