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


@pytest.mark.parametrize("storage", ["dense", "bf16"])
def test_heads_fp32_logits_of_bf16_rows(storage):
    """The LM heads pass their bf16 rows with ``out_dtype`` fp32: the logits of an fp32 copy of them, without it;
    an FP8 linear gives only x's dtype and says so."""
    from deepinfer_adapters.model_impl.layers.linear import Linear
    from deepinfer_adapters.model_impl.numerics import Numerics

    g = torch.Generator().manual_seed(5)
    head = Linear(128, 48, quantized=False)
    head.weight.data.copy_((torch.randn(48, 128, generator=g) / 12).bfloat16().double())
    if storage == "bf16":
        head.store_dtype(torch.bfloat16)
        head.weight.data.copy_((torch.randn(48, 128, generator=g) / 12).bfloat16())
    num = Numerics.reference()
    x = torch.randn(3, 128, generator=g).bfloat16()
    got = head(x, num, torch.float32)
    assert got.dtype == torch.float32
    assert torch.equal(got, head(x.float(), num))
    assert head(x, num).dtype == torch.bfloat16
    fp8 = Linear(128, 64, quantized=True, act_block=32)
    fp8.store_fp8((32, 32), torch.float32)
    with pytest.raises(ValueError, match="FP8 linear"):
        fp8(x, num, torch.float32)
