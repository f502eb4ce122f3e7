"""Batch invariance on the GPU (skipped without CUDA): in batch-invariant mode a row's result
must not depend on the rows it shares a call with, bit for bit.

- the Triton FP8 GEMM, the grouped MoE (which otherwise pick tiles and split-K by the
  number of rows) and the HC mix logits (which otherwise split K by the number of tokens)
  on subsets of a 600-row batch; the MoE with experts in per-32 and per-128 scale blocks;
- the bf16 path's row tiles (``bf16_row_config``: the MoE's tile follows the rows per
  expert in this mode): each tile gives a row the same bits;
- the tiny V4.1 model with native FP8 weights and the engine's numerics
  (``Numerics.reference().invariant()``): a batched decode step of three sequences against
  each sequence decoded alone, and a prefill next to other sequences against alone.
"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import invariance, reference
from deepinfer_adapters.kernels import triton_fp8_gemm as fp8
from deepinfer_adapters.kernels.triton_moe import route
from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.quant import fp4_to_fp8_blocks, quant_fp4_blocks, unpack_fp4

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


def _experts(g, E, D, I, k_block):
    """Random FP4 experts as the native format holds them: E4M3 codes with E8M0 scales per
    ``k_block`` inputs (32: as stored; 128: re-encoded where exact, quant.fp4_to_fp8_blocks)."""
    def fp8_from_fp4(out_f, in_f):
        packed, s = quant_fp4_blocks(torch.randn(E * out_f, in_f, device="cuda", generator=g) / in_f**0.5)
        if k_block == 32:
            return unpack_fp4(packed).to(torch.float8_e4m3fn).view(E, out_f, in_f), s.view(E, out_f, -1)
        converted = fp4_to_fp8_blocks(packed, s, k_block, 32)
        assert converted is not None, "random weights re-encode exactly"
        w, s128 = converted
        return w.view(E, out_f, in_f), s128.view(E, out_f, -1)

    w13, s13 = fp8_from_fp4(2 * I, D)
    w2, s2 = fp8_from_fp4(D, I)
    return w13, s13, w2, s2


@pytest.mark.parametrize("k_block", [32, 128])
def test_moe_rows_do_not_depend_on_the_batch(k_block):
    g = _gen(1)
    E, D, I, k, T = 32, 512, 256, 6, 600
    w13, s13, w2, s2 = _experts(g, E, D, I, k_block)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    ids = torch.rand(T, E, device="cuda", generator=g).topk(k, dim=-1).indices
    w = torch.rand(T, k, device="cuda", generator=g)
    args = (w13, s13, w2, s2, (1, k_block), 32, 10.0)
    with invariance.batch_invariant(True):
        full = kernels.moe_experts(x, w, ids, *args)
        for rows in SUBSETS:
            assert torch.equal(kernels.moe_experts(x[rows], w[rows], ids[rows], *args), full[rows]), rows


@pytest.mark.parametrize("k_block", [32, 128])
def test_bf16_path_row_tiles_agree_bitwise(k_block):
    """The grouped bf16-path GEMM (bf16 activations, 128-deep products) with each row tile of
    ``bf16_row_config``: the same rows, the same bits."""
    g = _gen(3)
    E, D, I, T = 4, 1024, 512, 200
    w13, s13, _, _ = _experts(g, E, D, I, k_block)
    x = torch.randn(T, D, device="cuda", generator=g).bfloat16()
    ids = torch.randint(0, E, (T, 1), device="cuda", generator=g)
    configs = {cfg.block_m: cfg for cfg in (fp8.bf16_row_config(m) for m in (1, 32, 1000))}
    assert sorted(configs) == [16, 64, 128]
    outs = {}
    for block_m, cfg in configs.items():
        _, tiles, _ = route(ids, E, block_m)
        outs[block_m] = fp8.gemm(x, None, 0, w13, s13, (1, k_block), torch.bfloat16, rows=T, groups=tiles,
                                 config=cfg, kstep=fp8.bf16_kstep(D, (1, k_block)))
    same = {m: torch.equal(out, outs[128]) for m, out in outs.items()}
    print(f"REPORT bf16 tiles k_block={k_block}: bitwise equal to the 128-row tile: {same}")
    assert all(same.values())


def test_hc_mix_logits_rows_do_not_depend_on_the_batch():
    g = _gen(2)
    hc, D, N = 4, 2048, 24
    x = torch.randn(600, hc, D, device="cuda", generator=g).bfloat16()
    fn = torch.randn(N, hc * D, device="cuda", generator=g) / (hc * D) ** 0.5
    with invariance.batch_invariant(True):
        assert kernels.chosen("hc_mix_logits", x, fn, 1e-6) == "triton"
        full = kernels.hc_mix_logits(x, fn, 1e-6)
        for rows in SUBSETS:
            assert torch.equal(kernels.hc_mix_logits(x[rows], fn, 1e-6), full[rows]), rows
    ref = reference.hc_mix_logits(x.double(), fn.double(), 1e-6).float()  # logits ~ N(0, 1)
    print(f"REPORT hc_mix_logits invariant: max abs vs fp64 {float((full - ref).abs().max()):.2e}")
    torch.testing.assert_close(full, ref, rtol=1e-4, atol=1e-4)


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
