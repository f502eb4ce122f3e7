"""Batch invariance on the GPU (skipped without CUDA): in batch-invariant mode a row's result
must not depend on the rows it shares a call with, bit for bit.

- the Triton FP8 GEMM and the grouped MoE (which otherwise pick tiles and split-K by the
  number of rows) on subsets of a 600-row batch;
- the tiny V4.1 model with native FP8 weights and the engine's numerics
  (``Numerics.reference().invariant()``): a batched decode step of three sequences against
  each sequence decoded alone, and a prefill next to other sequences against alone.
"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import invariance
from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.quant import quant_fp4_blocks, unpack_fp4

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")

SUBSETS = [slice(0, 1), slice(5, 13), slice(100, 164), slice(0, 600)]


def _gen(seed):
    return torch.Generator(device="cuda").manual_seed(seed)


def test_fp8_linear_rows_do_not_depend_on_the_batch():
    g = _gen(0)
    N, K = 1536, 5120
    x = torch.randn(600, K, device="cuda", generator=g).bfloat16()
    w = (torch.randn(N, K, device="cuda", generator=g) * 16).to(torch.float8_e4m3fn)
    scale = torch.full((N // 32, K // 32), 120, dtype=torch.uint8, device="cuda").view(torch.float8_e8m0fnu)
    with invariance.batch_invariant(True):
        assert kernels.chosen("fp8_linear", x, w, scale, (32, 32), 32) == "triton"
        full = kernels.fp8_linear(x, w, scale, (32, 32), 32)
        for rows in SUBSETS:
            assert torch.equal(kernels.fp8_linear(x[rows], w, scale, (32, 32), 32), full[rows]), rows


def test_moe_rows_do_not_depend_on_the_batch():
    g = _gen(1)
    E, D, I, k, T = 32, 512, 256, 6, 600

    def fp8_from_fp4(out_f, in_f):
        packed, s = quant_fp4_blocks(torch.randn(E * out_f, in_f, device="cuda", generator=g) / in_f**0.5)
        return unpack_fp4(packed).to(torch.float8_e4m3fn).view(E, out_f, in_f), s.view(E, out_f, -1)

    w13, s13 = fp8_from_fp4(2 * I, D)
    w2, s2 = fp8_from_fp4(D, I)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    ids = torch.rand(T, E, device="cuda", generator=g).topk(k, dim=-1).indices
    w = torch.rand(T, k, device="cuda", generator=g)
    args = (w13, s13, w2, s2, (1, 32), 32, 10.0)
    with invariance.batch_invariant(True):
        full = kernels.moe_experts(x, w, ids, *args)
        for rows in SUBSETS:
            assert torch.equal(kernels.moe_experts(x[rows], w[rows], ids[rows], *args), full[rows]), rows


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return DeepseekV41ForCausalLM.from_pretrained(tiny_checkpoint("v41"), Numerics.reference().invariant(),
                                                   device="cuda", progress=False, weights="fp8", with_draft=False)


def _ids(n, seed):
    return torch.randint(3, 128000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_model_decode_and_prefill_do_not_depend_on_the_batch(model):
    prompts = [_ids(n, i) for i, n in enumerate((37, 150, 4))]
    with torch.inference_mode():
        together = model.new_state(3, 512)
        mixed = model(ForwardBatch.build([(s, 0, p) for s, p in enumerate(prompts)], device="cuda"), together).logits
        step = model.decode(DecodeBatch.build([7, 8, 9], [37, 150, 4], [0, 1, 2], max_len=512, device="cuda"),
                            together)
        for i, p in enumerate(prompts):
            alone = model.new_state(1, 512)
            logits = model(ForwardBatch.build([(0, 0, p)], device="cuda"), alone).logits
            assert torch.equal(logits[0], mixed[i]), f"prefill of sequence {i}"
            one = model.decode(DecodeBatch.build([7 + i], [len(p)], [0], max_len=512, device="cuda"), alone)
            assert torch.equal(one[0], step[i]), f"decode of sequence {i}"
