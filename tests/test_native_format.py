"""The native weight format (model_impl/native_format.py) on the CPU: with the torch
reference ops a model holding FP8 weights as stored computes exactly what the dense
float64 model computes, and the storage is what the GPU kernels expect."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.kernels import reference_fp8
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v4 import DeepseekV4ForCausalLM
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.quant import dequant_fp4_experts, quant_fp4_blocks, quant_fp8_blocks, unpack_fp4

PROMPT, DECODE = 20, 3


def _logits(cls, ckpt, numerics: Numerics, weights: str) -> torch.Tensor:
    model = cls.from_pretrained(ckpt, numerics, weights=weights, progress=False)
    state = model.new_state(1, 128)
    ids = torch.randint(3, 1000, (PROMPT + DECODE,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        out = [model(ForwardBatch.build([(0, 0, ids[:PROMPT])], all_logits=True), state).logits]
        for p in range(PROMPT, PROMPT + DECODE):
            out.append(model(ForwardBatch.build([(0, p, [ids[p]])]), state).logits)
    return torch.cat(out)


@pytest.mark.parametrize("numerics", [Numerics.reference(), Numerics.reference().invariant(), Numerics.float32()],
                         ids=["reference", "invariant", "float32"])
def test_v41_native_equals_dense_bitwise(tiny_checkpoint, numerics):
    ckpt = tiny_checkpoint("v41")
    dense = _logits(DeepseekV41ForCausalLM, ckpt, numerics, "dense")
    native = _logits(DeepseekV41ForCausalLM, ckpt, numerics, "fp8")
    assert torch.equal(dense, native)


def test_v4_native_equals_dense_bitwise(tiny_checkpoint):
    ckpt = tiny_checkpoint("v4")
    num = Numerics.reference()
    assert torch.equal(_logits(DeepseekV4ForCausalLM, ckpt, num, "dense"),
                       _logits(DeepseekV4ForCausalLM, ckpt, num, "fp8"))


def test_native_storage(tiny_checkpoint):
    model = DeepseekV41ForCausalLM.from_pretrained(tiny_checkpoint("v41"), weights="fp8", progress=False)
    attn, ffn = model.layers[2].attn, model.layers[2].ffn
    assert attn.wq_a.weight.dtype == torch.float8_e4m3fn and attn.wq_a.block == (32, 32)
    assert attn.wq_a.scale.dtype == torch.float8_e8m0fnu
    assert attn.wo_a.weight.dtype == torch.float8_e4m3fn  # FP8 in the checkpoint, bf16 arithmetic
    assert attn.compressor.wkv.weight.dtype == torch.bfloat16 and attn.compressor.wkv.block is None
    assert ffn.gate.weight.dtype == torch.bfloat16 and model.embed.weight.dtype == torch.bfloat16
    assert len(ffn.experts) == 0 and ffn.routed.w13.dtype == torch.float8_e4m3fn
    E, I, D = model.cfg.n_routed_experts, model.cfg.moe_intermediate_size, model.cfg.hidden_size
    assert ffn.routed.w13.shape == (E, 2 * I, D) and ffn.routed.w13_scale.shape == (E, 2 * I, D // 32)
    assert ffn.routed.w2.shape == (E, D, I) and ffn.routed.block == (1, 32)


def _inside(view: torch.Tensor, base: torch.Tensor) -> bool:
    start, end = base.data_ptr(), base.data_ptr() + base.numel() * base.element_size()
    return start <= view.data_ptr() and view.data_ptr() + view.numel() * view.element_size() <= end


def test_same_input_linears_share_one_loaded_weight(tiny_checkpoint):
    """wq_a + wkv, the shared expert's w1 + w3 and a ratio-2 compressor's wkv + wgate are
    merged at load: the members' weights are views of the merged one, which the checkpoint
    filled (a member's view equals the checkpoint tensor), and the merged GEMM gives each
    member's output."""
    from deepinfer_adapters.model_impl.weights import load_checkpoint

    ckpt = tiny_checkpoint("v41")
    model = DeepseekV41ForCausalLM.from_pretrained(ckpt, weights="fp8", progress=False)
    raw = load_checkpoint(ckpt, model.cfg, dequantize=None, progress=False)
    groups = {"attn.q_kv": ("attn.wq_a", "attn.wkv"), "ffn.shared_experts.w13": ("ffn.shared_experts.w1",
                                                                                   "ffn.shared_experts.w3")}
    sources = [i for i, layer in enumerate(model.layers) if layer.attn.compressor is not None
               and layer.attn.compressor.wgate is not None]
    assert sources, "the tiny V4.1 has a ratio-2 KV source"
    for i, layer in enumerate(model.layers):
        todo = dict(groups)
        if i in sources:
            todo["attn.compressor.kv_gate"] = ("attn.compressor.wkv", "attn.compressor.wgate")
        for merged_name, names in todo.items():
            merged = layer.get_submodule(merged_name.rsplit(".", 1)[0]).__dict__[merged_name.rsplit(".", 1)[1]]
            assert merged is not None, (i, merged_name)
            x = torch.randn(5, merged.linear.in_features, generator=torch.Generator().manual_seed(i))
            outs = merged(x.to(torch.bfloat16), Numerics.reference())
            for name, out in zip(names, outs):
                member = layer.get_submodule(name)
                assert _inside(member.weight, merged.linear.weight)
                assert torch.equal(member.weight.view(torch.uint8), raw[f"layers.{i}.{name}.weight"].view(torch.uint8))
                if member.block is not None:
                    assert _inside(member.scale, merged.linear.scale)
                    assert torch.equal(member.scale.view(torch.uint8), raw[f"layers.{i}.{name}.scale"].view(torch.uint8))
                assert torch.equal(out, member(x.to(torch.bfloat16), Numerics.reference()))


def test_unknown_weight_format(tiny_checkpoint):
    with pytest.raises(ValueError, match="weight format"):
        DeepseekV41ForCausalLM.from_pretrained(tiny_checkpoint("v41"), weights="int4", progress=False)


def test_fp4_to_fp8_is_exact():
    packed, scale = quant_fp4_blocks(torch.randn(64, 128))
    as_fp8 = unpack_fp4(packed).to(torch.float8_e4m3fn)
    assert torch.equal(reference_fp8.dequant(as_fp8, scale, (1, 32)), dequant_fp4_experts(packed, scale, torch.float32))


def test_fp8_linear_reference_matches_dense_linear():
    w8, scale = quant_fp8_blocks(torch.randn(96, 128) / 11, (32, 32))
    x = torch.randn(5, 128).to(torch.bfloat16)
    from deepinfer_adapters.model_impl.layers.linear import Linear

    dense = Linear(128, 96, quantized=True, act_block=32)
    dense.weight.data.copy_(reference_fp8.dequant(w8, scale, (32, 32)))
    native = Linear(128, 96, quantized=True, act_block=32)
    native.store_fp8((32, 32), torch.float8_e8m0fnu)
    native.weight.data.copy_(w8)
    native.scale.data.copy_(scale)
    num = Numerics.reference()
    assert torch.equal(dense(x, num), native(x, num))
