"""Tests for model_impl/quant.py.

Expected values are computed by hand from the format definitions (bytes written out bit by bit in
the comments), never by the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch

from deepinfer_adapters.model_impl import quant as q

NAN_E4M3 = (0x7F, 0xFF)


def e4m3(*bytes_: int) -> torch.Tensor:
    return torch.tensor(bytes_, dtype=torch.uint8).view(torch.float8_e4m3fn)


def e8m0(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.uint8).view(torch.float8_e8m0fnu)


def assert_same(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a, b), (a, b)


# ------------------------------------------------------------------------------ E8M0 ----


def test_e8m0_bytes():
    s = q.e8m0_to_float(e8m0([[127, 130, 120, 0, 254, 255]]))
    assert s.dtype == torch.float32
    assert s[0, :5].tolist() == [1.0, 8.0, 2.0**-7, 2.0**-127, 2.0**127]
    assert math.isnan(s[0, 5].item())
    raw = torch.tensor([126, 131], dtype=torch.uint8)
    assert q.e8m0_to_float(raw).tolist() == [0.5, 16.0]


def test_ceil_pow2_and_e8m0_rounding_up():
    x = torch.tensor([1.0, 1.5, 0.3, 448.0, 449.0, 2.0**-126, 3.0, 5.0, 0.75])
    assert q.ceil_pow2(x).tolist() == [1.0, 2.0, 0.5, 512.0, 512.0, 2.0**-126, 4.0, 8.0, 1.0]
    # 1.0000001 is the float32 just above 1: rounding up must give 2, not 1
    s = torch.tensor([1.0, 1.0000001, 3.0, 5.0, 0.75, 2.0**-7, 0.0])
    b = q.float_to_e8m0_ceil(s)
    assert b.dtype == torch.float8_e8m0fnu
    assert b.view(torch.uint8).tolist() == [127, 128, 129, 130, 127, 120, 0]
    with pytest.raises(ValueError):
        q.float_to_e8m0_ceil(torch.tensor([-1.0]))


# ------------------------------------------------------------------------------ FP8 ----


def test_e4m3_known_bytes():
    # 0x38 = 0 0111 000 = 1.0; 0x7E = 0 1111 110 = 1.75*2^8 = 448; 0xB8 = -1.0;
    # 0x01 = smallest subnormal 2^-9; 0x08 = smallest normal 2^-6; 0x39 = 1.125
    w8 = e4m3(0x38, 0x7E, 0xB8, 0x01, 0x08, 0x39).view(1, 6)
    one = torch.ones(1, 1)
    w = q.dequant_fp8_blocks(w8, one, block=(1, 6), dtype=torch.float32)
    assert w.tolist() == [[1.0, 448.0, -1.0, 2.0**-9, 2.0**-6, 1.125]]


def test_e4m3_cast_rne_and_saturation():
    x = torch.tensor([1.0625, 1.1875, 1e6, -1e6, 449.0, 2.0**-10, 1.5 * 2.0**-9])
    b = q.to_e4m3_satfinite(x).view(torch.uint8).tolist()
    # 1.0625 ties to 1.0 (0x38, even); 1.1875 ties to 1.25 (0x3A); saturate to +-448;
    # 2^-10 ties to 0; 1.5*2^-9 ties to 2*2^-9 (0x02)
    assert b == [0x38, 0x3A, 0x7E, 0xFE, 0x7E, 0x00, 0x02]


def test_dequant_fp8_blocks_partial_blocks_mixed_scales():
    # values: 0x38 1, 0xB8 -1, 0x39 1.125, 0x7E 448, 0x01 2^-9, 0x30 0.5, 0x40 2, 0xC4 -3,
    # 0x3C 1.5, 0x00 0, 0x4C 6, 0xA8 -0.25, 0x34 0.75, 0xFE -448
    w8 = e4m3(
        0x38, 0xB8, 0x39, 0x7E, 0x01,
        0x30, 0x40, 0xC4, 0x3C, 0x00,
        0x4C, 0xA8, 0x34, 0x38, 0xFE,
    ).view(3, 5)  # fmt: skip
    # block 2 -> scale [ceil(3/2), ceil(5/2)] = [2, 3]; 127:1 130:8 126:0.5 128:2 120:2^-7 131:16
    scale = e8m0([[127, 130, 126], [128, 120, 131]])
    expected = [
        [1.0, -1.0, 9.0, 3584.0, 2.0**-10],
        [0.5, 2.0, -24.0, 12.0, 0.0],
        [12.0, -0.5, 0.75 / 128, 1.0 / 128, -7168.0],
    ]
    w = q.dequant_fp8_blocks(w8, scale, block=2, dtype=torch.float32)
    assert w.tolist() == expected
    f32_scale = torch.tensor([[1.0, 8.0, 0.5], [2.0, 2.0**-7, 16.0]])
    assert q.dequant_fp8_blocks(w8, f32_scale, (2, 2), torch.float32).tolist() == expected
    assert q.dequant_fp8_blocks(w8, scale, 2).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="expected"):
        q.dequant_fp8_blocks(w8, scale[:, :2], block=2)


def test_quant_fp8_blocks_hand_example():
    w = torch.tensor([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0]])
    w8, s = q.quant_fp8_blocks(w, 2)
    # block (0,0): amax 3 -> 3/448 = 0.0067 -> 2^-7 (byte 120); 1/2^-7 = 128 = 0 1110 000 = 0x70,
    # 3/2^-7 = 384 = 1.5*2^8 = 0 1111 100 = 0x7C. Block (0,1): all zero -> scale 2^-126 (byte 1).
    assert s.dtype == torch.float8_e8m0fnu and s.shape == (1, 2)
    assert s.view(torch.uint8).tolist() == [[120, 1]]
    assert w8.view(torch.uint8).tolist() == [[0x70, 0x7C, 0x00], [0x00, 0x00, 0x00]]


def test_quant_fp8_blocks_grid_values_round_trip_exactly():
    g = torch.Generator().manual_seed(0)
    raw = torch.randint(0, 256, (37, 70), generator=g, dtype=torch.uint8)
    raw[(raw == NAN_E4M3[0]) | (raw == NAN_E4M3[1])] = 0x38
    scale = torch.randint(110, 140, (2, 3), generator=g, dtype=torch.uint8)
    w = q.dequant_fp8_blocks(raw, scale, block=32, dtype=torch.float32)
    w8, s = q.quant_fp8_blocks(w, 32)
    assert s.shape == (2, 3) and w8.dtype == torch.float8_e4m3fn
    assert_same(q.dequant_fp8_blocks(w8, s, 32, torch.float32), w)


def test_quant_fp8_blocks_never_overflows():
    w = torch.randn(64, 64, generator=torch.Generator().manual_seed(1)) * 1000
    w8, s = q.quant_fp8_blocks(w, 32)
    assert torch.isfinite(w8.float()).all()
    back = q.dequant_fp8_blocks(w8, s, 32, torch.float32)
    # within the e4m3 normal range (|w| >= amax * 2^-14, see test_fp8_roundtrip_relative_error)
    # RNE with 3 mantissa bits is within 2^-4 relative; the largest value is not clipped
    amax = w.view(2, 32, 2, 32).abs().amax((1, 3)).repeat_interleave(32, 0).repeat_interleave(32, 1)
    normal = w.abs() >= amax * 2.0**-14
    assert normal.float().mean() > 0.99
    assert ((back - w).abs() <= w.abs() * 2.0**-4)[normal].all()


# ------------------------------------------------------------------------------ FP4 ----


def test_unpack_known_bytes_low_nibble_first():
    packed = torch.tensor([[0x21, 0x9F, 0x7A, 0x00]], dtype=torch.uint8).view(torch.int8)
    # 0x21: low 1 = 0.5, high 2 = 1.0; 0x9F: low F = -6, high 9 = -0.5;
    # 0x7A: low A = -1.0, high 7 = 6.0
    assert q.unpack_fp4(packed).tolist() == [[0.5, 1.0, -6.0, -0.5, -1.0, 6.0, 0.0, 0.0]]
    nibbles = torch.arange(16, dtype=torch.uint8)  # each in the low nibble, high nibble 0
    expected = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    assert q.unpack_fp4(nibbles)[0::2].tolist() == expected


def test_pack_unpack_all_bytes_bit_exact():
    all_bytes = torch.arange(256, dtype=torch.uint8).view(torch.int8).view(16, 16)
    values = q.unpack_fp4(all_bytes)
    assert values.shape == (16, 32)
    assert_same(q.pack_fp4(values), all_bytes)  # -0.0 keeps its sign nibble 0x8
    codes = torch.stack((all_bytes.view(torch.uint8) & 0xF, all_bytes.view(torch.uint8) >> 4), -1)
    assert_same(q.pack_fp4(codes.flatten(-2)), all_bytes)
    as_fp4 = all_bytes.view(torch.uint8).view(torch.float4_e2m1fn_x2)
    assert torch.equal(q.unpack_fp4(as_fp4), values)


def test_e2m1_round_ties_to_even():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 0.26, -0.3, -5.1, -0.1])
    expected = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 0.5, -0.5, -6.0, -0.0]
    r = q.e2m1_round(x)
    assert r.tolist() == expected
    assert torch.signbit(r[-1])  # -0.1 -> -0.0, like the CUDA cvt


def test_dequant_fp4_experts_hand_values():
    packed = torch.tensor([[0x21] * 32, [0x9F] * 32], dtype=torch.uint8).view(torch.int8)
    scale = e8m0([[127, 129], [120, 130]])  # [1, 4], [2^-7, 8]
    w = q.dequant_fp4_experts(packed, scale, torch.float32)
    assert w.shape == (2, 64)
    assert w[0, [0, 1, 31, 32, 33, 63]].tolist() == [0.5, 1.0, 1.0, 2.0, 4.0, 4.0]
    assert w[1, [0, 1, 32, 63]].tolist() == [-6 * 2.0**-7, -0.5 * 2.0**-7, -48.0, -4.0]
    with pytest.raises(ValueError, match="expected"):
        q.dequant_fp4_experts(packed, scale[:, :1])


def test_quant_fp4_blocks_hand_example():
    w = torch.zeros(1, 32)
    w[0, :4] = torch.tensor([3.0, 0.5, -1.25, 0.3])
    packed, s = q.quant_fp4_blocks(w)
    # amax 3 -> 3/6 = 0.5 -> scale 0.5 (byte 126); w/s = 6, 1, -2.5, 0.6
    # -> codes 7, 2, 0xC (-2, tie to even), 1 (0.5); bytes 0x27, 0x1C
    assert s.view(torch.uint8).tolist() == [[126]]
    assert packed.view(torch.uint8)[0, :3].tolist() == [0x27, 0x1C, 0x00]


def test_quant_fp4_grid_values_round_trip_exactly():
    g = torch.Generator().manual_seed(2)
    codes = torch.randint(0, 16, (8, 128), generator=g, dtype=torch.uint8)
    scale = torch.randint(100, 150, (8, 4), generator=g, dtype=torch.uint8)
    w = q.dequant_fp4_experts(q.pack_fp4(codes), scale, torch.float32)
    packed, s = q.quant_fp4_blocks(w)
    assert packed.dtype == torch.int8 and packed.shape == (8, 64) and s.shape == (8, 4)
    assert_same(q.dequant_fp4_experts(packed, s, torch.float32), w)


# ------------------------------------------------------------------------ round trips ----


def test_fp8_roundtrip_hand_example():
    x = torch.tensor([[3.0, 1.0, 0.1, -0.0041]])
    # amax 3 -> s = 2^-7; x/s = 384, 128, 12.8 -> 13, -0.5248 -> -0.5 (step 1/16 in [0.5, 1))
    assert q.fp8_roundtrip(x, 4).tolist() == [[3.0, 1.0, 13 * 2.0**-7, -0.5 * 2.0**-7]]
    # amax floor 1e-4: s = 2^ceil(log2(1e-4/448)) = 2^-22; 1e-6/2^-22 = 4.19 -> 4 (step .5)
    tiny = torch.tensor([[1e-6, 0.0]])
    assert q.fp8_roundtrip(tiny, 2).tolist() == [[4 * 2.0**-22, 0.0]]


def test_fp4_roundtrip_e8m0_hand_example():
    x = torch.zeros(2, 32)
    x[0, :3] = torch.tensor([3.0, 0.3, -1.25])  # s 0.5: 6, 0.6 -> 0.5, -2.5 -> -2
    x[1, :4] = torch.tensor([5.0, 2.5, 0.75, -0.2])  # amax 5 -> 5/6 -> s 1: 5 -> 4 (tie, even)
    y = q.fp4_roundtrip_e8m0(x)
    assert y[0, :3].tolist() == [3.0, 0.25, -1.0]
    assert y[1, :4].tolist() == [4.0, 2.0, 1.0, -0.0]
    assert (y[:, 4:] == 0).all()


def test_fp4_roundtrip_e4m3_hand_example():
    x = torch.zeros(3, 16)
    x[0, :4] = torch.tensor([3.0, 1.0, 0.5, -2.2])  # s = 0.5: 6, 2, 1, -4.4 -> -4
    x[1, :4] = torch.tensor([4.5, 1.0, -2.0, 0.1])  # s = 0.75: 6, 1.33->1.5, -2.67->-3, .13->0
    x[2, :2] = torch.tensor([7.0, 1.0])  # 7/6 -> e4m3 1.125; 6.22 clamps to 6; .889 -> 1
    y = q.fp4_roundtrip_e4m3(x)
    assert y[0, :4].tolist() == [3.0, 1.0, 0.5, -2.0]
    assert y[1, :4].tolist() == [4.5, 1.125, -2.25, 0.0]
    assert y[2, :2].tolist() == [6.75, 1.125]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: q.fp8_roundtrip(x, 32),
        lambda x: q.fp8_roundtrip(x, 64, slice(0, 448)),
        lambda x: q.fp4_roundtrip_e8m0(x, 32),
        lambda x: q.fp4_roundtrip_e4m3(x, 16),
    ],
)
def test_roundtrips_zero_dtype_idempotent(fn):
    z = torch.zeros(3, 512, dtype=torch.bfloat16)
    assert_same(fn(z), z)
    # magnitudes keep every e4m3 scale normal (see fp4_roundtrip_e4m3's docstring)
    x = (torch.randn(4, 512, generator=torch.Generator().manual_seed(3)) * 3).bfloat16()
    y = fn(x)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    assert not torch.isnan(y).any()
    assert_same(fn(y), y)


def test_fp8_roundtrip_dims_leaves_rope_dims_alone():
    x = torch.randn(2, 3, 512, generator=torch.Generator().manual_seed(4)).bfloat16()
    y = q.fp8_roundtrip(x, 64, slice(0, 448))
    assert_same(y[..., 448:], x[..., 448:])
    assert_same(y[..., :448], q.fp8_roundtrip(x[..., :448], 64))
    assert not torch.equal(y[..., :448], x[..., :448])
    with pytest.raises(ValueError):
        q.fp8_roundtrip(x, 64, slice(0, 100))


def _block_amax(x: torch.Tensor, block: int) -> torch.Tensor:
    return x.unflatten(-1, (-1, block)).abs().amax(-1, keepdim=True).expand(-1, -1, block).flatten(-2)


def test_fp8_roundtrip_relative_error():
    x = torch.randn(16, 512, generator=torch.Generator().manual_seed(5)) * 10
    y = q.fp8_roundtrip(x, 32)
    # e4m3 has 3 mantissa bits: RNE error <= 2^-4 relative for values in its normal range
    # (x/s >= 2^-6, i.e. |x| >= amax * 2^-14 since s <= amax/224)
    normal = x.abs() >= _block_amax(x, 32) * 2.0**-14
    assert normal.float().mean() > 0.99
    rel = ((y - x).abs() / x.abs())[normal]
    assert rel.max() <= 2.0**-4


def test_fp4_roundtrip_e8m0_error_bound():
    x = torch.randn(16, 256, generator=torch.Generator().manual_seed(6))
    y = q.fp4_roundtrip_e8m0(x)
    # independent scale formula: s = 2^ceil(log2(amax/6)); one mantissa bit -> error <= half a
    # step, i.e. <= |x|/4 where |x| >= s, and <= s/4 below
    s = torch.exp2(torch.ceil(torch.log2(_block_amax(x, 32) / 6)))
    assert ((y - x).abs() <= 0.25 * torch.maximum(x.abs(), s)).all()


def test_fp4_roundtrip_e4m3_error_bound():
    x = torch.randn(16, 256, generator=torch.Generator().manual_seed(7))
    y = q.fp4_roundtrip_e4m3(x)
    amax = _block_amax(x, 16)
    # s is amax/6 to within 2^-4 relative (normal e4m3); E2M1 rounding adds <= max(|x|, s)/4,
    # the clamp of amax/s to 6 at most amax/16
    bound = 0.25 * torch.maximum(x.abs(), amax / 6 * (1 + 2.0**-4)) + amax / 16
    assert ((y - x).abs() <= bound).all()


def test_block_must_divide_last_dim():
    with pytest.raises(ValueError, match="multiple"):
        q.fp4_roundtrip_e4m3(torch.zeros(2, 24), 16)
    with pytest.raises(ValueError, match="multiple"):
        q.quant_fp4_blocks(torch.zeros(2, 48))


def test_fp4_tiles_layout_byte_by_byte():
    """quant.to_fp4_tiles (the held layout of packed experts): where 128 divides the rows and the span
    is 64, byte (row t*128 + r, span s, j) of the span layout sits at ((t * spans + s) * 128 + r) * 32 + j
    of each expert matrix; otherwise the span layout itself. from_fp4_tiles inverts both."""
    from deepinfer_adapters.model_impl.quant import fp4_tiled, from_fp4_tiles, to_fp4_tiles, to_span_pairs

    g = torch.Generator().manual_seed(0)
    for shape, tiled in (((2, 256, 96), True), ((128, 64), True), ((96, 64), False), ((128, 48), False)):
        x = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
        held, pairs = to_fp4_tiles(x), to_span_pairs(x)
        n, kb = shape[-2:]
        assert fp4_tiled(n, 2 * kb) == tiled and held.shape == x.shape and held.dtype == torch.uint8
        assert torch.equal(from_fp4_tiles(held), x)
        if not tiled:
            assert torch.equal(held, pairs)
            continue
        spans = kb // 32
        for m in range(held.reshape(-1, n, kb).shape[0]):
            flat, p = held.reshape(-1, n * kb)[m], pairs.reshape(-1, n, kb)[m]
            for row, s, j in ((0, 0, 0), (1, 0, 5), (127, spans - 1, 31), (n - 1, 1, 17), (130 % n, spans - 1, 0)):
                t, r = divmod(row, 128)
                assert flat[((t * spans + s) * 128 + r) * 32 + j] == p[row, s * 32 + j]
        assert not torch.equal(held, pairs)


def test_e4m3_tiles_layout_byte_by_byte():
    """quant.to_e4m3_tiles (the held layout of E4M3 experts whose widths 128 divides): byte (row
    t*128 + r, input u*128 + c) of expert e sits at ((t * K/128 + u) * 128 + r) * 128 + c of that expert's
    bytes, and the shape [E, N/128, K/128, 128, 128] says so; from_e4m3_tiles inverts it, for the
    stack and for one expert."""
    g = torch.Generator().manual_seed(1)
    E, N, K = 2, 256, 384
    codes = torch.randint(0, 256, (E, N, K), generator=g, dtype=torch.uint8).view(torch.float8_e4m3fn)
    held = q.to_e4m3_tiles(codes)
    assert held.shape == (E, N // 128, K // 128, 128, 128) and held.is_contiguous()
    assert q.is_e4m3_tiles(held) and not q.is_e4m3_tiles(codes) and q.expert_matrix(held) == (N, K)
    assert q.expert_matrix(codes) == (N, K) and q.e4m3_tiled(N, K) and not q.e4m3_tiled(N, 320)
    raw, flat = codes.view(torch.uint8), held.view(torch.uint8).reshape(E, -1)
    for e, row, col in ((0, 0, 0), (0, 1, 5), (1, 127, 383), (1, 130, 129), (0, 255, 200)):
        (t, r), (u, c) = divmod(row, 128), divmod(col, 128)
        assert flat[e, ((t * (K // 128) + u) * 128 + r) * 128 + c] == raw[e, row, col]
    assert torch.equal(q.from_e4m3_tiles(held).view(torch.uint8), raw)
    assert torch.equal(q.from_e4m3_tiles(held[1]).view(torch.uint8), raw[1])
    assert not torch.equal(held.reshape(E, N, K).view(torch.uint8), raw)  # a control: the bytes did move
