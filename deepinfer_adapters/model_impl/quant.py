"""Numeric formats of the official checkpoint and the reference's quantization round trips.

Three element formats and two scale formats appear in DeepSeek-V4(.1)-Flash:

- FP8 E4M3 (``torch.float8_e4m3fn``, max 448): linear weights with 2-D block scales, window KV.
- FP4 E2M1 (magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6; max 6): routed experts, stored two per byte as
  ``I8`` with the even element in the low nibble; index keys/queries and V4.1 compressed KV.
- E8M0 scales (``torch.float8_e8m0fnu``, value 2^(e-127), byte 255 = NaN) and, for V4.1
  compressed KV only, E4M3 scales.

The round trips (``fp8_roundtrip``, ``fp4_roundtrip_*``) reproduce the official
``act_quant(..., inplace=True)`` and ``fp4_act_quant(..., inplace=True)`` tilelang kernels, which
the model runs on every cached key and index query because the weights were trained with them
(QAT). Sources, and how far each rule is verified:

- V4 ``act_quant`` / ``fp4_act_quant`` (e8m0 branch): read from a verbatim copy of the official
  V4-Pro ``inference/kernel.py`` tilelang source (amax floor, scale rounding, division, clamp,
  cast). Verified against that text.
- V4.1 ``act_quant`` and both ``fp4_act_quant`` branches: read from tenstorrent/tt-metal
  ``reference/deepseek_v41/kernel_cpu.py`` (a torch port that claims bit-exactness with the V4.1
  kernels) and from a third-party quote of the official kernel lines for the E4M3-scale branch.
  Verified only through those secondary sources, not the original file.
- The CUDA casts to E4M3/E2M1 are round-to-nearest-even with saturation (``satfinite``); that is
  the documented PTX ``cvt.rn.satfinite`` behaviour, assumed here, not tested on a GPU.

Everything is computed in float32; results are cast back to the input dtype, which is exact for
bfloat16/float32 inputs (an E4M3 or E2M1 value times its scale has at most 6 significant bits).
"""

from __future__ import annotations

import torch

FP8_MAX = 448.0
FP4_MAX = 6.0

# The kernels multiply amax by the reciprocal held as a float32 constant (fp8_max_inv,
# fp4_max_inv), not divide by the max: the product can round differently, so keep the constant.
_FP8_MAX_INV = torch.tensor(1.0 / FP8_MAX, dtype=torch.float32)
_FP4_MAX_INV = torch.tensor(1.0 / FP4_MAX, dtype=torch.float32)

# amax floors of the kernels. They keep an all-zero block's scale positive, so zeros stay zeros
# instead of 0/0 = NaN.
_FP8_ACT_AMAX_FLOOR = 1e-4  # act_quant
_FP4_E8M0_AMAX_FLOOR = 6 * 2.0**-126  # fp4_act_quant, e8m0 scales: scale >= 2^-126
_FP4_E4M3_AMAX_FLOOR = 6 * 2.0**-9  # fp4_act_quant, e4m3 scales: scale >= 2^-9 (min subnormal)
# Weight writers (our choice; the official converter is not public): scales never below the
# smallest normal float32, so a zero block gets scale 2^-126 and zero codes.
_MIN_POW2_SCALE = 2.0**-126

# E2M1 magnitude by 3-bit code; code bit 3 is the sign.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_FP4_TABLE = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=torch.float32)
# packed byte -> (even element = low nibble, odd element = high nibble)
_FP4_PAIRS = torch.stack((_FP4_TABLE.repeat(16), _FP4_TABLE.repeat_interleave(16)), dim=-1)


# ----------------------------------------------------------------------------------- E8M0 ----


def e8m0_to_float(t: torch.Tensor) -> torch.Tensor:
    """E8M0 scales (``float8_e8m0fnu``, or their raw bytes as uint8) -> float32 2^(e-127).

    Byte 0 is 2^-127 (a float32 subnormal, exact); byte 255 is NaN, as in the OCP MX spec. There is
    no zero and no sign.
    """
    if t.dtype == torch.uint8:
        t = t.view(torch.float8_e8m0fnu)
    if t.dtype != torch.float8_e8m0fnu:
        raise ValueError(f"expected float8_e8m0fnu or uint8 scales, got {t.dtype}")
    return t.float()


_EXPONENT_AND_SIGN = -(1 << 23)  # int32 0xFF800000


def ceil_pow2(x: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2(|x|)) as float32, computed from the float32 bits like the kernels' fast_round_scale.

    Exponent field minus 127, plus one when any mantissa bit is set. Bit-exact with the kernel for
    every input; the result is the true power-of-two ceiling for positive normal floats. Edge cases
    (kernel-consistent, never reached by the round trips because of their amax floors): 0 -> 0.0,
    subnormals -> 2^-126, inf -> inf, NaN -> -0.0.
    """
    magnitude = x.float().contiguous().view(torch.int32) & 0x7FFFFFFF
    # Adding an all-ones mantissa carries into the exponent iff a mantissa bit is set; then the
    # mantissa is cleared. Three elementwise ops (it runs on every cached key of a decode step).
    # NaN's exponent overflows into the sign bit: -0.0, like the kernel.
    return ((magnitude + 0x7FFFFF) & _EXPONENT_AND_SIGN).view(torch.float32)


def float_to_e8m0_ceil(scale: torch.Tensor) -> torch.Tensor:
    """Positive float scales -> ``float8_e8m0fnu``, rounded UP to a power of two (ue8m0).

    torch's own ``.to(float8_e8m0fnu)`` rounds to nearest (3.0 -> 4 but 5.0 -> 4, 1.0000001 -> 1),
    which could put a block's amax past the format max; the reference rounds up, so we do too.
    Zero maps to byte 0 (2^-127, the smallest e8m0), anything above 2^127 to byte 255 (NaN).
    """
    if bool((scale < 0).any()):
        raise ValueError("e8m0 scales must be >= 0; e8m0 has no sign bit")
    byte = (ceil_pow2(scale).view(torch.int32) >> 23) & 0xFF
    return byte.to(torch.uint8).view(torch.float8_e8m0fnu)


def _scale_to_float(scale: torch.Tensor) -> torch.Tensor:
    if scale.dtype in (torch.float8_e8m0fnu, torch.uint8):
        return e8m0_to_float(scale)
    return scale.float()


# ------------------------------------------------------------------------- FP8 E4M3 ----


def to_e4m3_satfinite(x: torch.Tensor) -> torch.Tensor:
    """float -> ``float8_e4m3fn``, round-to-nearest-even, saturating at +-448 like CUDA's satfinite.

    The explicit clamp matters: older torch versions turn overflow into NaN.
    """
    return x.float().clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def _as_e4m3(w8: torch.Tensor) -> torch.Tensor:
    if w8.dtype in (torch.uint8, torch.int8):
        return w8.view(torch.float8_e4m3fn)
    if w8.dtype != torch.float8_e4m3fn:
        raise ValueError(f"expected float8_e4m3fn weights (or their raw bytes), got {w8.dtype}")
    return w8


def _block_pair(block: int | tuple[int, int]) -> tuple[int, int]:
    rows, cols = (block, block) if isinstance(block, int) else block
    if rows <= 0 or cols <= 0:
        raise ValueError(f"block sizes must be positive, got {block}")
    return rows, cols


def dequant_fp8_blocks(
    w8: torch.Tensor,
    scale: torch.Tensor,
    block: int | tuple[int, int],
    dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """W[r, c] = w8[r, c] * scale[r // B0, c // B1] for a 2-D block-scaled FP8 weight.

    ``scale`` is [ceil(out/B0), ceil(in/B1)], E8M0 or float32 (V4-Flash-Base FP8 experts); the
    last block row/column may be partial. B = 128 for V4, 32 for V4.1. The product is exact in
    float32; only the final cast to ``dtype`` can round.
    """
    w8 = _as_e4m3(w8)
    rows, cols = _block_pair(block)
    if w8.dim() != 2:
        raise ValueError(f"expected a 2-D FP8 weight, got shape {tuple(w8.shape)}")
    out_f, in_f = w8.shape
    expected = (-(-out_f // rows), -(-in_f // cols))
    if tuple(scale.shape) != expected:
        raise ValueError(
            f"scale shape {tuple(scale.shape)} does not match weight {tuple(w8.shape)} with block "
            f"{(rows, cols)}: expected {expected}"
        )
    s = _scale_to_float(scale).repeat_interleave(rows, 0).repeat_interleave(cols, 1)
    return (w8.float() * s[:out_f, :in_f]).to(dtype)


def quant_fp8_blocks(
    w: torch.Tensor, block: int | tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Checkpoint writer: 2-D weight -> (``float8_e4m3fn`` weight, ``float8_e8m0fnu`` block scales).

    scale = 2^ceil(log2(amax * fp32(1/448))) per block (the act_quant rule), floored at 2^-126 so
    a zero block gets zero codes; values are divided by it, clamped to +-448 (the rounded
    reciprocal could leave amax/scale a hair above 448) and cast round-to-nearest-even.
    """
    rows, cols = _block_pair(block)
    if w.dim() != 2:
        raise ValueError(f"expected a 2-D weight, got shape {tuple(w.shape)}")
    wf = w.float()
    if not bool(torch.isfinite(wf).all()):
        raise ValueError("cannot quantize a weight with inf/NaN values")
    out_f, in_f = wf.shape
    nb_r, nb_c = -(-out_f // rows), -(-in_f // cols)
    # zero padding to whole blocks leaves every block's amax unchanged
    padded = torch.nn.functional.pad(wf, (0, nb_c * cols - in_f, 0, nb_r * rows - out_f))
    amax = padded.view(nb_r, rows, nb_c, cols).abs().amax(dim=(1, 3))
    scale = ceil_pow2((amax * _FP8_MAX_INV).clamp_min(_MIN_POW2_SCALE))
    full = scale.repeat_interleave(rows, 0).repeat_interleave(cols, 1)[:out_f, :in_f]
    return to_e4m3_satfinite(wf / full), float_to_e8m0_ceil(scale)


# ------------------------------------------------------------------------- FP4 E2M1 ----


def e2m1_round(x: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 value (float32), ties to even, saturating at +-6; the sign is kept (-0.1 -> -0.0).

    In each binade the grid is evenly spaced (step .5 below 2, 1 in [2, 4), 2 in [4, 6]), so
    rounding to a multiple of the step with half-to-even ``torch.round`` is IEEE round-to-nearest-
    even: ties go to the code with a zero mantissa bit (0.25 -> 0, 0.75 -> 1, 1.25 -> 1,
    1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), as CUDA's ``cvt.rn.satfinite.e2m1x2.f32`` does.
    """
    mag = x.float().abs().clamp(max=FP4_MAX)
    step = torch.where(mag < 2, 0.5, torch.where(mag < 4, 1.0, 2.0))
    return torch.copysign(torch.round(mag / step) * step, x.float())


def fp4_codes(x: torch.Tensor) -> torch.Tensor:
    """float -> 4-bit E2M1 codes (uint8, bit 3 = sign) after ``e2m1_round``; NaN is rejected."""
    if bool(torch.isnan(x).any()):
        raise ValueError("E2M1 has no NaN encoding")
    r = e2m1_round(x)
    mag = r.abs()
    # magnitude -> code: {0,.5,1,1.5} -> 2m, {2,3} -> m+2, {4,6} -> m/2+4
    code = torch.where(mag < 2, mag * 2, torch.where(mag < 4, mag + 2, mag / 2 + 4))
    return code.to(torch.uint8) | (torch.signbit(r).to(torch.uint8) << 3)


def _as_bytes(packed: torch.Tensor) -> torch.Tensor:
    if packed.dtype in (torch.int8, torch.uint8, torch.float4_e2m1fn_x2):
        return packed.view(torch.uint8)
    raise ValueError(f"expected packed FP4 as int8/uint8/float4_e2m1fn_x2, got {packed.dtype}")


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Packed E2M1 [..., n] (int8/uint8/float4_e2m1fn_x2) -> float32 [..., 2n].

    Low nibble = even element, high nibble = odd element; bit 3 of a nibble is the sign.
    """
    pairs = _FP4_PAIRS.to(packed.device)
    return torch.nn.functional.embedding(_as_bytes(packed).int(), pairs).flatten(-2)  # one lookup per byte


def pack_fp4(codes_or_values: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8, 0..15) or float values [..., 2n] -> packed int8 [..., n].

    Floats are rounded with ``e2m1_round`` first (RNE, saturating), so grid values pack exactly.
    """
    t = codes_or_values
    if t.is_floating_point():
        codes = fp4_codes(t)
    elif t.dtype == torch.uint8:
        if bool((t > 15).any()):
            raise ValueError("FP4 codes must be in 0..15")
        codes = t
    else:
        raise ValueError(f"expected uint8 codes or float values, got {t.dtype}")
    if codes.shape[-1] % 2:
        raise ValueError(f"last dim must be even to pack two per byte, got {codes.shape[-1]}")
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).view(torch.int8)


def fp4_span(k: int) -> int:
    """Inputs per span of packed FP4 experts held for the GPU (``to_span_pairs``): the GEMM's K
    step for them, 64 where it divides ``k``, else 32 -- two halves, each inside one scale
    group of 32, so each half takes one scale per weight row (fp8_triton_jit.py ``half_product``)."""
    return 64 if k % 64 == 0 else 32


FP4_TILE_ROWS = 128  # weight rows of a tile of packed experts held for the GPU (``to_fp4_tiles``)


def fp4_tiled(n: int, k: int) -> bool:
    """Whether packed experts of ``n`` rows and ``k`` inputs are held in tiles (``to_fp4_tiles``):
    where 128 divides ``n`` and their span is 64 (every real V4 / V4.1 width)."""
    return n % FP4_TILE_ROWS == 0 and fp4_span(k) == 64


def to_fp4_tiles(packed: torch.Tensor) -> torch.Tensor:
    """Packed E2M1 as stored, [..., N, K / 2] (each matrix in the last two dims) -> the layout the GPU
    kernels read (uint8, same shape): ``to_span_pairs``, then, where ``fp4_tiled``, each 128-row x
    64-input tile's 128 x 32 bytes contiguous, tiles in (row tile, span) order, so a GEMM's K step
    reads one 4 KB block instead of 128 strided 32-byte pieces (H200, a layer's experts at 8 / 32
    tokens: 352 / 1111 us against 430 / 1379, BENCHMARKS.md session 8)."""
    pairs = to_span_pairs(packed)
    n, kb = pairs.shape[-2:]
    if not fp4_tiled(n, 2 * kb):
        return pairs
    tiles = pairs.reshape(*pairs.shape[:-2], n // FP4_TILE_ROWS, FP4_TILE_ROWS, kb // 32, 32)
    return tiles.transpose(-3, -2).contiguous().view(pairs.shape)


def from_fp4_tiles(held: torch.Tensor) -> torch.Tensor:
    """``to_fp4_tiles``' inverse: the GPU layout -> packed E2M1 as stored (uint8)."""
    b = _as_bytes(held)
    n, kb = b.shape[-2:]
    if fp4_tiled(n, 2 * kb):
        tiles = b.reshape(*b.shape[:-2], n // FP4_TILE_ROWS, kb // 32, FP4_TILE_ROWS, 32)
        b = tiles.transpose(-3, -2).contiguous().view(b.shape)
    return from_span_pairs(b)


E4M3_TILE = 128  # weight rows and inputs of a tile of E4M3 experts held for the GPU (``to_e4m3_tiles``)


def e4m3_tiled(n: int, k: int) -> bool:
    """Whether E4M3 experts of ``n`` rows and ``k`` inputs are held in tiles (``to_e4m3_tiles``):
    where 128 divides both (every real V4 / V4.1 width)."""
    return n % E4M3_TILE == 0 and k % E4M3_TILE == 0


def to_e4m3_tiles(weight: torch.Tensor) -> torch.Tensor:
    """E4M3 experts [E, N, K] -> the layout the GPU kernels read, [E, N / 128, K / 128, 128, 128]:
    each 128-row x 128-input tile's 16 KB contiguous, tiles in (row tile, K tile) order, so a GEMM's
    K step reads one block instead of 128 rows' 128-byte pieces, K bytes apart (H200, a V4.1 layer's
    experts at 8 / 32 tokens on the bf16 path: 407 / 1337 us against 432 / 1410, BENCHMARKS.md
    session 9). The shape says the layout: every consumer (``from_e4m3_tiles``) can tell."""
    E, n, k = weight.shape
    t = E4M3_TILE
    return weight.reshape(E, n // t, t, k // t, t).transpose(2, 3).contiguous()


def from_e4m3_tiles(held: torch.Tensor) -> torch.Tensor:
    """``to_e4m3_tiles``' inverse for any leading dims: [..., N / 128, K / 128, 128, 128] -> [..., N, K]."""
    *lead, nt, kt, t, _ = held.shape
    return held.transpose(-3, -2).reshape(*lead, nt * t, kt * t)


def is_e4m3_tiles(weight: torch.Tensor) -> bool:
    """Whether ``weight`` holds stacked E4M3 experts in ``to_e4m3_tiles``' layout."""
    return weight.dtype == torch.float8_e4m3fn and weight.dim() == 5


def expert_matrix(weight: torch.Tensor) -> tuple[int, int]:
    """(rows, inputs) of each expert matrix of held stacked experts, whatever their layout."""
    if is_e4m3_tiles(weight):
        return weight.shape[1] * E4M3_TILE, weight.shape[2] * E4M3_TILE
    return weight.shape[-2], weight.shape[-1] * (2 if is_span_packed(weight) else 1)


def is_span_packed(weight: torch.Tensor) -> bool:
    """Whether ``weight`` holds packed E2M1 experts for the GPU kernels (``to_fp4_tiles``' layout:
    uint8, two values a byte); held weights are otherwise E4M3 or wider."""
    return weight.dtype == torch.uint8


def _nibbles(b: torch.Tensor) -> torch.Tensor:
    """Bytes [..., n] -> their E2M1 codes [..., n, 2], the low nibble first."""
    return torch.stack([b & 0xF, b >> 4], -1)


def to_span_pairs(packed: torch.Tensor) -> torch.Tensor:
    """Packed E2M1 as stored (byte j: inputs 2j, 2j + 1) -> the span layout (uint8, same shape):
    within each span of ``fp4_span(K)`` inputs, byte j holds input j (low nibble) and input
    j + span / 2 (high nibble), so a GEMM step unpacks its two halves with no interleave
    (kernels/fp8_triton_jit.py ``e2m1_halves``)."""
    b = _as_bytes(packed)
    k = b.shape[-1] * 2
    span = fp4_span(k)
    halves = _nibbles(b).reshape(*b.shape[:-1], k // span, 2, span // 2)  # inputs in order: [spans, half, j]
    return pack_fp4(halves.transpose(-1, -2).flatten(-3)).view(torch.uint8)  # byte j: (first half, second half)


def from_span_pairs(packed: torch.Tensor) -> torch.Tensor:
    """``to_span_pairs``' inverse: the span layout -> packed E2M1 as stored (uint8)."""
    b = _as_bytes(packed)
    span = fp4_span(b.shape[-1] * 2)
    pairs = _nibbles(b.reshape(*b.shape[:-1], -1, span // 2))  # [spans, j, half]
    return pack_fp4(pairs.transpose(-1, -2).flatten(-3)).view(torch.uint8)


def dequant_fp4_experts(
    packed: torch.Tensor,
    scale: torch.Tensor,
    dtype: torch.dtype = torch.bfloat16,
    group: int = 32,
) -> torch.Tensor:
    """Routed-expert weight: packed E2M1 [out, in/2] with E8M0 scales [out, in/group] -> [out, in]."""
    values = unpack_fp4(packed)
    out_f, in_f = values.shape[-2:]
    if tuple(scale.shape) != (out_f, in_f // group) or in_f % group:
        raise ValueError(
            f"FP4 scale shape {tuple(scale.shape)} does not match packed weight "
            f"{tuple(packed.shape)} (logical [{out_f}, {in_f}]): expected ({out_f}, {in_f // group})"
        )
    s = _scale_to_float(scale).repeat_interleave(group, dim=-1)
    return (values * s).to(dtype)


def fp4_to_fp8_blocks(
    packed: torch.Tensor, scale: torch.Tensor, block: int = 128, group: int = 32, rows: int = 1
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Routed-expert weight: packed E2M1 [..., N, K/2] with E8M0 scales per ``group`` inputs ->
    (E4M3 [..., N, K], E8M0 scales [..., N, K/block]) holding the same values exactly, or None
    when some value has no exact E4M3 code under one scale per ``block``. ``rows`` > 1: one scale per
    ``rows`` consecutive rows and ``block`` inputs (each row still carries its own copy, so every consumer
    reads the same layout), the block's groups those of all its rows -- what ``gluon_moe.grouped_gemm_fp8``
    promotes with one multiply a value instead of two (``tile_scales``).

    A value is c * 2^s_i (c on the E2M1 grid, s_i its group's exponent). The block scale is
    2^S with S = s_max - 6, s_max the largest s_i of the block's groups holding a nonzero value
    (others are ignored: 0 * anything is 0), floored at 2^-126. The code q = c * 2^(s_i - S)
    then has |q| <= 6 * 2^6 = 384 < 448 (and S = s_max - 6 is the smallest S with that
    bound, so small groups keep the most bits). With d = s_max - s_i every |q| is one of
    2^(5-d), 2^(6-d), 2^(7-d), 2^(8-d) (from .5, 1, 2, 4) or 3 * 2^(5-d), 3 * 2^(6-d),
    3 * 2^(7-d) (from 1.5, 3, 6); E4M3 holds 2^e and 3 * 2^e (1.1b x 2^(e+1)) down to 2^-9
    and 3 * 2^-9 (subnormals m * 2^-9, m = 1..7). So a group is exact whenever d <= 14; at
    d = 15 its values .5 and 1.5 are not (2^-10, 3 * 2^-10), at 16 also 1 and 3, at 17 all
    but 4. The check below is that rule on the actual values (every code exact, no nonzero
    value vanished), not the bound, so a group at d >= 15 without such values still converts.
    """
    packed = _as_bytes(packed)
    K = packed.shape[-1] * 2
    if K % block or block % group or tuple(scale.shape) != (*packed.shape[:-1], K // group) \
            or packed.shape[-2] % rows:
        return None
    exps = scale.view(torch.uint8).to(torch.int32)  # E8M0 byte: 2^(byte - 127)
    if bool((exps == 255).any()):  # NaN scale
        return None
    nonzero = ((packed & 0x77) != 0).unflatten(-1, (K // group, group // 2)).any(-1)  # per group, from the codes
    per_block = (*exps.shape[:-1], K // block, block // group)
    s_max = torch.where(nonzero, exps, -1).view(per_block).amax(-1)  # [..., N, K / block]
    if rows > 1:
        tiles = s_max.unflatten(-2, (-1, rows))
        s_max = tiles.amax(-2, keepdim=True).expand(tiles.shape).flatten(-3, -2)
    s_block = torch.where(s_max >= 0, (s_max - 6).clamp_min(1), 127)  # all-zero block: scale 1
    shift = (exps.view(per_block) - s_block[..., None]).clamp(max=6).flatten(-2)
    if bool((nonzero & (shift < -126)).any()):  # 2^shift not a normal float32: far from exact anyway
        return None
    pow2 = ((shift.clamp(min=-126) + 127) << 23).view(torch.float32)  # exact 2^shift
    q = (unpack_fp4(packed).unflatten(-1, (K // group, group)) * pow2[..., None]).flatten(-2)  # exact in fp32
    codes = q.to(torch.float8_e4m3fn)
    if not torch.equal(codes.float(), q):  # some value is not an E4M3 code
        return None
    return codes, s_block.to(torch.uint8).view(torch.float8_e8m0fnu)


def fp4_to_fp8_tiles(
    packed: torch.Tensor, scale: torch.Tensor, block: int = 128, group: int = 32
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``fp4_to_fp8_blocks`` with one scale per ``E4M3_TILE`` rows too where that is exact for every value, else one
    per row; None where neither is. The values are the same either way; the tile form lets the prefill's FP8 MoE
    kernel promote with one multiply a value (``gluon_moe.tile_scales``)."""
    return fp4_to_fp8_blocks(packed, scale, block, group, rows=E4M3_TILE) \
        or fp4_to_fp8_blocks(packed, scale, block, group)


def _groups(x: torch.Tensor, group: int) -> torch.Tensor:
    n = x.shape[-1]
    if group <= 0 or n % group:
        raise ValueError(f"last dim {n} is not a multiple of the quantization block {group}")
    return x.float().unflatten(-1, (n // group, group))


def quant_fp4_blocks(w: torch.Tensor, group: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Checkpoint writer: weight [out, in] -> (packed int8 [out, in/2], e8m0 scales [out, in/group]).

    Same rule as the e8m0 ``fp4_act_quant`` branch: scale = 2^ceil(log2(amax * fp32(1/6))) with
    amax floored at 6*2^-126, then x/scale clamped to +-6 and rounded RNE onto the E2M1 grid.
    """
    if not bool(torch.isfinite(w).all()):
        raise ValueError("cannot quantize a weight with inf/NaN values")
    g = _groups(w, group)
    scale = _e8m0_fp4_scale(g)
    codes = fp4_codes(g / scale.unsqueeze(-1)).flatten(-2)
    return pack_fp4(codes), float_to_e8m0_ceil(scale)


def _e8m0_fp4_scale(g: torch.Tensor) -> torch.Tensor:
    amax = g.abs().amax(dim=-1).clamp_min(_FP4_E8M0_AMAX_FLOOR)
    return ceil_pow2(amax * _FP4_MAX_INV)


# ------------------------------------------------------------------- round trips ----


def fp8_roundtrip(x: torch.Tensor, block: int, dims: slice | None = None) -> torch.Tensor:
    """``act_quant(x, block, "ue8m0", e8m0, inplace=True)``: E4M3 quantize-dequantize per block.

    Per contiguous block of ``block`` elements of the last dim (restricted to ``x[..., dims]``
    when given; the other dims pass through unchanged):
    amax = max(max|x|, 1e-4); s = 2^ceil(log2(amax * fp32(1/448)));
    y = e4m3_rne(clamp(x / s, -448, 448)) * s, cast back to x.dtype.
    V4 window/compressed KV: ``dims=slice(0, 448), block=64`` (RoPE dims stay bf16).
    V4.1 window KV: all 512 dims, ``block=32``.
    """
    if dims is not None:
        y = x.clone()
        y[..., dims] = fp8_roundtrip(x[..., dims], block)
        return y
    g = _groups(x, block)
    amax = g.abs().amax(dim=-1, keepdim=True).clamp_min(_FP8_ACT_AMAX_FLOOR)
    s = ceil_pow2(amax * _FP8_MAX_INV)
    return (to_e4m3_satfinite(g / s).float() * s).flatten(-2).to(x.dtype)


def fp4_roundtrip_e8m0(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """``fp4_act_quant(x, block, inplace=True)`` with E8M0 scales (V4/V4.1 index keys and queries).

    amax = max(max|x|, 6*2^-126); s = 2^ceil(log2(amax * fp32(1/6)));
    y = e2m1_rne(clamp(x / s, -6, 6)) * s, cast back to x.dtype.
    """
    g = _groups(x, block)
    s = _e8m0_fp4_scale(g).unsqueeze(-1)
    return (e2m1_round(g / s) * s).flatten(-2).to(x.dtype)


def fp4_roundtrip_e4m3(x: torch.Tensor, group: int = 16) -> torch.Tensor:
    """``fp4_act_quant(x, 16, inplace=True, scale_dtype=e4m3)``: V4.1 stored compressed KV rows.

    NVFP4-like without a global scale: amax = max(max|x|, 6*2^-9);
    s = e4m3_rne_satfinite(amax / 6) (a true division here, per the quoted kernel line);
    y = e2m1_rne(clamp(x / s, -6, 6)) * s, cast back to x.dtype.
    Because s is rounded to E4M3, amax/s can exceed 6 and is clamped. Idempotent while s is an
    E4M3 normal (amax >= 6*2^-6); with subnormal scales (smaller blocks) a second pass can pick a
    different scale, as the kernel would.
    Unverified detail: whether the kernel's x/s division is IEEE-exact (tilelang fast-math) can
    flip exact E2M1 ties; we use IEEE division.
    """
    g = _groups(x, group)
    amax = g.abs().amax(dim=-1, keepdim=True).clamp_min(_FP4_E4M3_AMAX_FLOOR)
    s = to_e4m3_satfinite(amax / FP4_MAX).float()
    return (e2m1_round(g / s) * s).flatten(-2).to(x.dtype)
