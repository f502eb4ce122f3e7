"""FP4 routed experts re-encoded as E4M3 with one E8M0 scale per 128 inputs
(quant.fp4_to_fp8_blocks, native_format's per-layer choice): the values are the
checkpoint's exactly, or the layer keeps its scales per 32."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.config import parse_config
from deepinfer_adapters.kernels import gluon_moe
from deepinfer_adapters.model_impl import native_format
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.engram_hash import make_engram_hasher
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.quant import (dequant_fp4_experts, dequant_fp8_blocks, fp4_to_fp8_blocks,
                                                 fp4_to_fp8_tiles, from_e4m3_tiles, is_e4m3_tiles, pack_fp4,
                                                 quant_fp4_blocks)
from deepinfer_adapters.model_impl.tiny_checkpoint import random_tensors
from deepinfer_adapters.presets import tiny_config


def _exact(packed, scale) -> bool:
    """Converted, and every value equal to the checkpoint's (float64, so nothing rounds)."""
    converted = fp4_to_fp8_blocks(packed, scale)
    if converted is None:
        return False
    codes, block_scale = converted
    assert codes.dtype == torch.float8_e4m3fn and block_scale.dtype == torch.float8_e8m0fnu
    assert block_scale.shape == (*scale.shape[:-1], scale.shape[-1] // 4)
    want = dequant_fp4_experts(packed, scale, torch.float64)
    got = dequant_fp8_blocks(codes, block_scale, (1, 128), torch.float64)
    assert torch.equal(got, want) and torch.equal(got.signbit(), want.signbit())
    return True


def _block(groups: list[tuple[float, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """One 128-wide row: four groups of 32, each (value repeated with alternating sign, E8M0 byte)."""
    values = torch.cat([torch.full((32,), v) * torch.tensor([1.0, -1.0]).repeat(16) for v, _ in groups])
    scale = torch.tensor([[b for _, b in groups]], dtype=torch.uint8).view(torch.float8_e8m0fnu)
    return pack_fp4(values[None]), scale


def test_random_weights_convert_exactly():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 512, generator=g) * 2.0 ** torch.randint(-7, 8, (64, 16), generator=g).repeat_interleave(32, 1)
    assert _exact(*quant_fp4_blocks(w))


@pytest.mark.parametrize("small", [0.5, 1.5])
def test_spread_14_exact_15_not(small):
    # q = c * 2^(6 - d): 0.5 -> 2^-9 and 1.5 -> 3 * 2^-9 (E4M3 subnormals) at d = 14; halved at d = 15
    assert _exact(*_block([(6.0, 140), (small, 126), (3.0, 139), (0.0, 200)]))
    assert fp4_to_fp8_blocks(*_block([(6.0, 140), (small, 125), (3.0, 139), (0.0, 200)])) is None


def test_the_spread_rule_for_every_e2m1_value():
    # c * 2^(6 - d) is an E4M3 value iff it is >= 2^-9 with 3 * 2^k needing k >= -9: the largest d by c
    limit = {0.5: 14, 1.0: 15, 1.5: 14, 2.0: 16, 3.0: 15, 4.0: 17, 6.0: 16}
    for c, d_max in limit.items():
        for d in range(0, 21):
            values = torch.cat([torch.full((32,), 6.0), torch.full((32,), -c), torch.zeros(64)])
            scale = torch.tensor([[140, 140 - d, 0, 254]], dtype=torch.uint8).view(torch.float8_e8m0fnu)
            packed = pack_fp4(values[None])
            assert (_exact(packed, scale) if d <= d_max else fp4_to_fp8_blocks(packed, scale) is None), (c, d)


@pytest.mark.parametrize("d,ok,bad", [(15, [1.0, -2.0, 3.0, 4.0, -6.0], 0.5), (15, [1.0], -1.5),
                                       (16, [2.0, -4.0, 6.0], 3.0), (17, [-4.0], 6.0)])
def test_larger_spreads_convert_when_no_value_needs_the_lost_bits(d, ok, bad):
    # the check reads the values, not the bound: at spread d the small group keeps these values
    def block(small):
        values = torch.cat([torch.full((32,), 6.0), torch.tensor(small + [0.0]).repeat(32)[:32], torch.ones(64)])
        scale = torch.tensor([[140, 140 - d, 140, 140]], dtype=torch.uint8).view(torch.float8_e8m0fnu)
        return pack_fp4(values[None]), scale

    assert _exact(*block(ok))
    assert fp4_to_fp8_blocks(*block(ok + [bad])) is None


def test_zero_groups_and_blocks_with_any_scale():
    # a zero group's scale does not count, even the largest or smallest byte; signed zeros stay signed
    assert _exact(*_block([(0.0, 254), (4.0, 120), (-0.0, 0), (0.5, 110)]))
    packed, scale = _block([(-0.0, 254), (0.0, 3), (0.0, 0), (-0.0, 128)])
    assert _exact(packed, scale)
    assert fp4_to_fp8_blocks(packed, scale)[1].view(torch.uint8).item() == 127


def test_tiny_scales_and_unconvertible_shapes():
    assert _exact(*_block([(6.0, 3), (0.5, 2), (1.0, 1), (2.0, 0)]))  # block scale floored at 2^-126
    assert fp4_to_fp8_blocks(*_block([(6.0, 255), (1.0, 120), (1.0, 120), (1.0, 120)])) is None  # NaN scale
    packed, scale = quant_fp4_blocks(torch.randn(4, 96))
    assert fp4_to_fp8_blocks(packed, scale) is None  # K not a multiple of 128


def test_one_scale_per_128_rows_where_exact():
    """rows=128: the same values with one scale per 128 rows and 128 inputs (each row a copy); a tile whose rows'
    scales spread past what E4M3 holds is refused, while one scale per row still converts it."""
    g = torch.Generator().manual_seed(1)
    sizes = 2.0 ** torch.randint(-5, 6, (256, 8), generator=g).repeat_interleave(32, 1)  # spread 10 across rows
    packed, scale = quant_fp4_blocks(torch.randn(256, 256, generator=g) * sizes)
    codes, tile_scale = fp4_to_fp8_blocks(packed, scale, rows=128)
    per_tile = tile_scale.view(torch.uint8).view(2, 128, 2)
    assert torch.equal(per_tile, per_tile[:, :1].expand_as(per_tile))
    assert not torch.equal(per_tile, fp4_to_fp8_blocks(packed, scale)[1].view(torch.uint8).view(2, 128, 2))
    want = dequant_fp4_experts(packed, scale, torch.float64)
    assert torch.equal(dequant_fp8_blocks(codes, tile_scale, (1, 128), torch.float64), want)
    s = scale.view(torch.uint8).clone()
    s[200] -= 20  # row 200 2^-20 of its tile's other rows: no E4M3 code for its small values under their scale
    assert fp4_to_fp8_blocks(packed, s.view(torch.float8_e8m0fnu), rows=128) is None
    per_row = fp4_to_fp8_blocks(packed, s.view(torch.float8_e8m0fnu))
    assert per_row is not None
    # fp4_to_fp8_tiles (native_format's choice): the tile form where exact, else the per-row one
    assert torch.equal(fp4_to_fp8_tiles(packed, scale)[1].view(torch.uint8), tile_scale.view(torch.uint8))
    assert torch.equal(fp4_to_fp8_tiles(packed, s.view(torch.float8_e8m0fnu))[1].view(torch.uint8),
                       per_row[1].view(torch.uint8))
    assert fp4_to_fp8_blocks(packed[:192], scale[:192], rows=128) is None  # rows no multiple of 128


def _logits(model) -> torch.Tensor:
    state = model.new_state(1, 64)
    ids = torch.randint(3, 1000, (13,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        prefill = model(ForwardBatch.build([(0, 0, ids[:12])], all_logits=True), state).logits
        return torch.cat([prefill, model(ForwardBatch.build([(0, 12, ids[12:])]), state).logits])


def test_converted_model_is_bitwise_the_per_32_model(tiny_checkpoint):
    """A tiny V4.1 whose expert width allows (1, 128) blocks; one layer made unconvertible
    keeps (1, 32); logits equal the all-(1, 32) model's bit for bit (torch reference ops), and
    so do the packed FP4 model's (weights="fp4": the reference unpacks each expert it runs)."""
    raw_cfg = tiny_config("v41")
    raw_cfg["text_config"]["moe_intermediate_size"] = 128
    cfg = parse_config(raw_cfg)
    raw = random_tensors(cfg)  # the checkpoint's tensors as stored (its tokenizer: the tiny checkpoint's)
    # layer 3, expert 1, w2 row 0: group 0 holds a 0.5 at 2^-30, group 1 a 6 at 2^0 (d = 30)
    packed = raw["layers.3.ffn.experts.1.w2.weight"]
    scale = raw["layers.3.ffn.experts.1.w2.scale"].view(torch.uint8)
    packed[0, :32] = pack_fp4(torch.tensor([[0.5] * 32 + [6.0] * 32]))
    scale[0, :2] = torch.tensor([97, 127], dtype=torch.uint8)
    hasher = make_engram_hasher(cfg, tiny_checkpoint("v41"))
    models = {}
    for block in (128, 32, native_format.PACKED_FP4):
        tensors = native_format.native_tensors(raw, cfg, expert_block=block)
        if block == 128:
            tensors_128 = {name: from_e4m3_tiles(t) if is_e4m3_tiles(t) else t for name, t in tensors.items()}
        blocks = native_format.expert_blocks(tensors)
        models[block] = native_format.build(DeepseekV41ForCausalLM, cfg, Numerics.reference(), device="cpu",
                                            hasher=hasher, expert_blocks=blocks)
        models[block].load_weights(tensors)
    converted = {name: m.routed.block for name, m in models[128].named_modules() if getattr(m, "routed", None)}
    assert converted.pop("layers.3.ffn") == (1, 32)
    assert converted and set(converted.values()) == {(1, 128)}
    ffn = models[128].layers[2].ffn.routed
    assert ffn.w13_scale.shape[-1] == cfg.hidden_size // 128 and ffn.w2_scale.shape[-1] == 1
    # and one per 128 rows too, which the prefill's FP8 MoE kernel promotes with one multiply (gluon_moe.tile_scales)
    assert gluon_moe.tile_scales(ffn.w13_scale) is not None and gluon_moe.tile_scales(ffn.w2_scale) is not None
    assert all(m.routed.block == (1, 32) for m in models[32].modules() if getattr(m, "routed", None))
    # expert widths 128 divides: the E4M3 storages hold 128 x 128 tiles (quant.to_e4m3_tiles)
    assert ffn.e4m3_tiles and models[32].layers[2].ffn.routed.e4m3_tiles
    w13, _ = ffn.dense(1)
    assert torch.equal(w13, dequant_fp8_blocks(tensors_128["layers.2.ffn.routed.w13"][1], ffn.w13_scale[1], (1, 128),
                                               torch.float32))
    packed = models[native_format.PACKED_FP4].layers[2].ffn.routed
    assert packed.w13.dtype == torch.uint8 and packed.w13.shape[-1] == cfg.hidden_size // 2
    assert packed.block == (1, 32) and packed.w13_scale.shape[-1] == cfg.hidden_size // 32
    per32 = _logits(models[32])
    assert torch.equal(_logits(models[128]), per32)
    assert torch.equal(_logits(models[native_format.PACKED_FP4]), per32)


def test_from_pretrained_fp4_keeps_the_experts_packed_and_computes_the_same(tiny_checkpoint):
    """weights="fp4" (the engine's --weights fp4): routed experts stay packed E2M1 (uint8, half
    the bytes) in the GPU layout (quant.to_fp4_tiles), which reads back as the checkpoint's bytes; with the torch
    reference ops the logits are the weights="fp8" model's bit for bit."""
    from deepinfer_adapters.model_impl.quant import from_fp4_tiles
    from deepinfer_adapters.model_impl.weights import load_checkpoint

    path = tiny_checkpoint("v41")
    models = {w: DeepseekV41ForCausalLM.from_pretrained(path, weights=w, progress=False) for w in ("fp8", "fp4")}
    packed = models["fp4"].layers[0].ffn.routed
    assert packed.packed_fp4 and packed.w13.dtype == torch.uint8
    stored = load_checkpoint(path, models["fp4"].cfg, dequantize=None, progress=False)
    w1 = stored["layers.0.ffn.experts.0.w1.weight"].view(torch.uint8)
    assert torch.equal(from_fp4_tiles(packed.w13[0])[: w1.shape[0]], w1)
    assert not models["fp8"].layers[0].ffn.routed.packed_fp4
    assert torch.equal(_logits(models["fp4"]), _logits(models["fp8"]))
