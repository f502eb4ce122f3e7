"""Triton kernels of the FP8 GEMM and MoE backends (imported lazily by
kernels/triton_fp8_gemm.py and kernels/triton_moe.py; this module imports triton).

The activation quantization follows model_impl/quant.py fp8_roundtrip (the
reference's act_quant): amax floored at 1e-4, scale = 2^ceil(log2(amax * fp32(1/448)))
from the float32 bits, x * (1 / scale) (exact for a power of two), clamp to +-448,
round-to-nearest-even E4M3 (cvt.rn.satfinite).
"""

import triton
import triton.language as tl

from deepinfer_adapters.kernels.triton_pdl import pdl_start
from deepinfer_adapters.kernels.triton_support import interpreting

if not interpreting():
    from triton.language.extra import libdevice  # expf as torch's (tl.exp: ex2.approx of x * log2 e)


@triton.jit
def ceil_pow2(v):
    """2^ceil(log2 v) from the float32 bits, as quant.ceil_pow2 (v positive, normal)."""
    bits = v.to(tl.int32, bitcast=True)
    exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(tl.int32)
    return (exponent << 23).to(tl.float32, bitcast=True)


@triton.jit
def weight_scale(sw, W_E8M0: tl.constexpr):
    """A loaded weight scale as fp32: E8M0 byte e -> 2^(e - 127) (byte 0 reads as 0, 255 as
    inf), or the fp32 scale as it is."""
    if W_E8M0:
        sw = (sw.to(tl.int32) << 23).to(tl.float32, bitcast=True)
    return sw


@triton.jit
def pow2_reciprocal(s):
    """1 / s for a power of two s (exact; x * (1/s) == x / s)."""
    exponent = (s.to(tl.int32, bitcast=True) >> 23) & 0xFF
    return ((254 - exponent) << 23).to(tl.float32, bitcast=True)


@triton.jit
def quantize_rows(x):
    """x [G, BLOCK] fp32 -> (E4M3 codes [G, BLOCK], fp32 scale per row [G])."""
    amax = tl.maximum(tl.max(tl.abs(x), 1), 1e-4)
    scale = ceil_pow2(amax * (1.0 / 448.0))
    q = tl.minimum(tl.maximum(x * pow2_reciprocal(scale)[:, None], -448.0), 448.0).to(tl.float8e4nv)
    return q, scale


@triton.jit
def quantize_store(x, Q_ROW, S_ROW, offs, group, mask, n, BLOCK: tl.constexpr, DEQUANT_OUT: tl.constexpr,
                   SCALE_GROUPS: tl.constexpr = 1):
    """Quantize x [G, BLOCK] (``quantize_rows``); store the codes at Q_ROW + offs and the scales
    at S_ROW + group, or (DEQUANT_OUT) the round-tripped values in Q's dtype. ``n``: row length.
    SCALE_GROUPS > 1: the codes re-expressed with one scale per SCALE_GROUPS blocks (``widen_scales``), the
    scales stored at S_ROW + group // SCALE_GROUPS (``group``'s first block a multiple of SCALE_GROUPS)."""
    q, scale = quantize_rows(x)
    if DEQUANT_OUT:
        tl.store(Q_ROW + offs, (q.to(tl.float32) * scale[:, None]).to(Q_ROW.dtype.element_ty), mask=mask)
    elif SCALE_GROUPS > 1:
        q, wide = widen_scales(q, scale, SCALE_GROUPS)
        tl.store(Q_ROW + offs, q, mask=mask)
        wide_group = tl.min(group) // SCALE_GROUPS + tl.arange(0, wide.shape[0])
        tl.store(S_ROW + wide_group, wide, mask=wide_group * (SCALE_GROUPS * BLOCK) < n)
    else:
        tl.store(Q_ROW + offs, q, mask=mask)
        tl.store(S_ROW + group, scale, mask=group * BLOCK < n)


@triton.jit
def widen_scales(q, scale, SCALE_GROUPS: tl.constexpr):
    """E4M3 codes q [G, BLOCK] with power-of-two scales [G] -> (codes, scales [G / SCALE_GROUPS]): each run of
    SCALE_GROUPS blocks under its largest scale, a code times its scale's exact ratio to it and rounded to E4M3
    again. Only values falling below E4M3's normal range (2^-6 of the wide scale) lose bits: each value moves
    by at most half the subnormal step, 2^-10 of the wide scale. Why: a GEMM on FP8 products can then sum
    SCALE_GROUPS blocks' products on the tensor cores before scaling them (``gluon_moe.grouped_gemm_fp8``,
    ``fp8_blockwise``)."""
    G: tl.constexpr = q.shape[0]
    runs = tl.reshape(scale, [G // SCALE_GROUPS, SCALE_GROUPS])
    wide = tl.max(runs, 1)
    ratio = tl.reshape(runs * pow2_reciprocal(wide)[:, None], [G])
    return (q.to(tl.float32) * ratio[:, None]).to(tl.float8e4nv), wide


@triton.jit
def act_quant_kernel(X, Q, S, K, stride_xm, stride_qm, stride_sm,
                     BLOCK: tl.constexpr, GROUPS: tl.constexpr, DEQUANT_OUT: tl.constexpr,
                     SCALE_GROUPS: tl.constexpr = 1):
    """One row x GROUPS blocks of BLOCK values: E4M3 codes + fp32 scales (one per SCALE_GROUPS blocks:
    ``widen_scales``), or (DEQUANT_OUT) the round-tripped values in Q's dtype."""
    pdl_start()
    row = tl.program_id(0).to(tl.int64)
    group = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    offs = group[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    mask = offs < K
    x = tl.load(X + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
    quantize_store(x, Q + row * stride_qm, S + row * stride_sm, offs, group, mask, K, BLOCK, DEQUANT_OUT,
                   SCALE_GROUPS)


@triton.jit
def scaled_activation(a, as_ptr, kb, mask_m, A_SB: tl.constexpr, QUANT_A: tl.constexpr):
    """An FP8 GEMM step's activation tile and its per-row scales: quantized here (QUANT_A: a is
    bf16, as act_quant_kernel would) or the E4M3 tile as loaded with its stored scales."""
    if QUANT_A:
        q, sa = quantize_rows(a.to(tl.float32))
    else:
        q = a
        sa = tl.load(as_ptr + kb // A_SB, mask=mask_m, other=0.0)
    return q, sa


# Packed E2M1 bytes -> E4M3 bytes holding each value / 64, four bytes a register: a nibble's exponent and
# mantissa bits go to E4M3's low exponent and top mantissa bits, its sign to bit 7. E2M1's bias is 1 and
# E4M3's 7, so 2^(e-1) (1 + m/2) becomes 2^(e-7) (1 + m/2), and the subnormal m/2 E4M3's subnormal m 2^-7:
# every value / 64, exactly. Low nibbles (the span's first half) and high nibbles (its second), from
# register ``src`` into register e.
def _e4m3_bits(half: str, src: str) -> str:
    if half == "low":
        return f"""and.b32 e, {src}, 0x07070707;
shl.b32 e, e, 2;
and.b32 t, {src}, 0x08080808;
shl.b32 t, t, 4;
or.b32 e, e, t;
"""
    return f"""shr.b32 e, {src}, 2;
and.b32 e, e, 0x1C1C1C1C;
and.b32 t, {src}, 0x80808080;
or.b32 e, e, t;
"""


# ... then the hardware E4M3x2 -> f16x2 conversion (sm_89+): f16 values / 64 (W_FP4 == 2)
_E4M3X4_TO_F16 = """mov.b32 {a, b}, e;
cvt.rn.f16x2.e4m3x2 $0, a;
cvt.rn.f16x2.e4m3x2 $1, b;
}"""
_PTX_REGS = """{
.reg .b32 e, t;
.reg .b16 a, b;
"""
_E2M1_LOW_PTX = tl.constexpr(_PTX_REGS + _e4m3_bits("low", "$2") + _E4M3X4_TO_F16)
_E2M1_HIGH_PTX = tl.constexpr(_PTX_REGS + _e4m3_bits("high", "$2") + _E4M3X4_TO_F16)
# ... or the E4M3 bytes themselves, for FP8 tensor-core products (``fp4_gemm_rows_kernel``)
_E2M1_LOW_E4M3_PTX = tl.constexpr("{\n.reg .b32 e, t;\n" + _e4m3_bits("low", "$1") + "mov.b32 $0, e;\n}")
_E2M1_HIGH_E4M3_PTX = tl.constexpr("{\n.reg .b32 e, t;\n" + _e4m3_bits("high", "$1") + "mov.b32 $0, e;\n}")


@triton.jit
def e2m1_values(codes):
    """fp32 values of E2M1 codes (int32, 0..15; bit 3 the sign). A magnitude code c = (e, m) >= 2
    is 2^(e-1) (1 + m/2): fp32 bits (c << 22) + (126 << 23); c = 1 is 0.5 (126 << 23), c = 0 is 0."""
    mag = codes & 7
    bits = tl.where(mag >= 2, (mag << 22) + (126 << 23), tl.where(mag == 1, 126 << 23, 0))
    return (bits | ((codes & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def tile_rows(ROW_IDX, row0, row_end, BLOCK: tl.constexpr, GATHER_A: tl.constexpr):
    """A row tile of a grouped GEMM: (output rows row0 .. row0 + BLOCK, their mask (< row_end), the
    A row of each: ROW_IDX[row] when GATHER_A, else the row itself, int64)."""
    rows = row0 + tl.arange(0, BLOCK)
    mask = rows < row_end
    if GATHER_A:
        a_rows = tl.load(ROW_IDX + rows, mask=mask, other=0).to(tl.int64)
    else:
        a_rows = rows.to(tl.int64)
    return rows, mask, a_rows


@triton.jit
def weight_rows_ptr(W, expert, stride_we, stride_wn, cols, pid_n, K, BLOCK_N: tl.constexpr, TILE_K: tl.constexpr,
                    TILE_B: tl.constexpr, TILED: tl.constexpr):
    """[BLOCK_N] pointers to this program's weight rows at input 0: rows ``stride_wn`` apart, or
    (TILED) the first TILE_B bytes of the program's row tile, row r at TILE_B r -- the weight held in
    tiles of BLOCK_N rows x TILE_K inputs (TILE_B bytes a row), each tile contiguous, tiles in (row
    tile, K tile) order: ``quant.to_fp4_tiles`` (TILE_K 64, TILE_B 32) and ``quant.to_e4m3_tiles``
    (TILE_K = TILE_B = 128)."""
    if TILED:
        return (W + expert * stride_we + pid_n.to(tl.int64) * (K // TILE_K) * (BLOCK_N * TILE_B)
                + tl.arange(0, BLOCK_N).to(tl.int64) * TILE_B)
    return W + expert * stride_we + cols.to(tl.int64) * stride_wn


@triton.jit
def weight_step_ptr(rows_ptr, kb, BLOCK_N: tl.constexpr, TILE_K: tl.constexpr, TILE_B: tl.constexpr,
                    TILED: tl.constexpr):
    """``weight_rows_ptr``'s rows at input ``kb`` (a multiple of TILE_K when TILED: tile kb / TILE_K
    of the row tile, BLOCK_N x TILE_B bytes each; else byte kb / (TILE_K / TILE_B) of each row)."""
    if TILED:
        return rows_ptr + (kb // TILE_K) * (BLOCK_N * TILE_B)
    return rows_ptr + kb // (TILE_K // TILE_B)


@triton.jit
def e4m3_step_ptr(w_ptr, kb, KSTEP: tl.constexpr, BLOCK_N: tl.constexpr, TILED: tl.constexpr):
    """[KSTEP, BLOCK_N] pointers to E4M3 weight rows ``w_ptr`` ([1, BLOCK_N], ``weight_rows_ptr``) at
    inputs kb .. kb + KSTEP; TILED: in 128 x 128 tiles (``quant.to_e4m3_tiles``; the step inside one)."""
    if TILED:
        inner = kb % 128 if KSTEP < 128 else 0
        return weight_step_ptr(w_ptr, kb, BLOCK_N, 128, 128, True) + (inner + tl.arange(0, KSTEP))[:, None]
    return w_ptr + (kb + tl.arange(0, KSTEP))[:, None]


@triton.jit
def e2m1_halves(w_ptr, mask_n, KSTEP: tl.constexpr, MODE: tl.constexpr):
    """The two halves of a [KSTEP, BLOCK_N] weight tile of packed E2M1 in the span layout
    (quant.to_span_pairs, span = KSTEP): byte j of a span holds input j in its low nibble and
    input j + KSTEP / 2 in its high one, so a loaded [KSTEP / 2, BLOCK_N] byte tile splits into
    inputs kb .. kb + KSTEP/2 - 1 and the next KSTEP / 2 with no interleave (an interleave of the
    nibbles through join / permute / reshape ran 50-100x slower on the H200). ``w_ptr``
    [1, BLOCK_N]: the weight rows at the span's first byte (``weight_step_ptr``). MODE (the kernel's
    W_FP4) 2: f16 values / 64, four bytes per register operation (``_E2M1_LOW_PTX``); 1: fp32 values from integer operations on each
    nibble (the CPU interpreter's way; ~2.5x slower on the H200, BENCHMARKS.md session 7). Exact in
    both. (Session 7's third mode, bf16 values built from the nibbles and scaled in bf16x2 multiplies,
    was exact and no faster: removed in session 8.)"""
    packed = tl.load(w_ptr + tl.arange(0, KSTEP // 2)[:, None], mask=mask_n[None, :], other=0)
    if MODE == 2:
        lo = tl.inline_asm_elementwise(_E2M1_LOW_PTX, "=r,=r,r", [packed], dtype=tl.float16, is_pure=True, pack=4)
        hi = tl.inline_asm_elementwise(_E2M1_HIGH_PTX, "=r,=r,r", [packed], dtype=tl.float16, is_pure=True, pack=4)
    else:
        packed = packed.to(tl.int32)
        lo = e2m1_values(packed & 0xF)
        hi = e2m1_values((packed >> 4) & 0xF)
    return lo, hi


@triton.jit
def half_product(acc, w, a_ptr, ws_ptr, k0, mask_m, mask_n, HALF: tl.constexpr, W_BK: tl.constexpr,
                 W_E8M0: tl.constexpr, MODE: tl.constexpr):
    """acc + A[:, k0 .. k0 + HALF) (W x its block's scale, as bf16): one half of an ``e2m1_halves``
    tile, inside one scale block (HALF <= W_BK), so one scale per column. MODE 2: w holds value / 64
    (the scale times 64: exact while the scale is below 2^122)."""
    a = tl.load(a_ptr + (k0 + tl.arange(0, HALF))[None, :], mask=mask_m[:, None], other=0.0)
    sw = weight_scale(tl.load(ws_ptr + k0 // W_BK, mask=mask_n, other=0), W_E8M0)
    if MODE == 2:
        sw = sw * 64.0
    return tl.dot(a, (w.to(tl.float32) * sw[None, :]).to(tl.bfloat16), acc)


@triton.jit(do_not_specialize=["M"])  # one compile for every batch size
def fp8_gemm_kernel(A, A_SCALE, W, W_SCALE, OUT, ROW_IDX, TILE_EXPERT, TILE_ROW0, TILE_ROW1,
                    M, N, K, k_per_split,
                    stride_am, stride_asm, stride_we, stride_wn, stride_wse, stride_wsn,
                    stride_om, stride_os,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KSTEP: tl.constexpr, SUB: tl.constexpr,
                    A_SB: tl.constexpr, W_BN: tl.constexpr, W_BK: tl.constexpr, W_E8M0: tl.constexpr,
                    GROUPED: tl.constexpr, GATHER_A: tl.constexpr, SCATTER_OUT: tl.constexpr,
                    QUANT_A: tl.constexpr, W_FP4: tl.constexpr = 0, W_TILED: tl.constexpr = False):
    """OUT[r, n] = sum_k A[r, k] W[e, n, k] with block scales. GROUPED: program row
    tile i covers rows [TILE_ROW0[i], TILE_ROW1[i]) of expert TILE_EXPERT[i] (-1: none).
    GATHER_A: A's row for output row r is ROW_IDX[r]; SCATTER_OUT: so is OUT's. A_SB == 0:
    A is bf16, unscaled, and KSTEP may span several weight scale blocks (each weight value
    gets its own block's scale). QUANT_A (A_SB == KSTEP): A is bf16 and each step's A tile is
    quantized here, per row, exactly as act_quant_kernel would (decode rows: one launch less).
    W_FP4 (A_SB == 0 only; 1: integer unpack, 2: PTX): W holds packed
    E2M1 in the span layout, K / 2 bytes a row (``e2m1_halves``; span KSTEP, each half inside
    one scale block); W_TILED (grouped, BLOCK_N 128): W in 128-row tiles, ``quant.to_fp4_tiles``' packed
    E2M1 or ``quant.to_e4m3_tiles``' E4M3 (KSTEP * SUB dividing 128)."""
    pdl_start()
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    if GROUPED:
        expert = tl.load(TILE_EXPERT + pid_m).to(tl.int64)
        row0 = tl.load(TILE_ROW0 + pid_m)
        row_end = tl.load(TILE_ROW1 + pid_m)
    else:
        expert = 0
        row0 = pid_m * BLOCK_M
        row_end = M
    if expert >= 0:
        rows, mask_m, a_rows = tile_rows(ROW_IDX, row0, row_end, BLOCK_M, GATHER_A)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = cols < N
        a_ptr = A + a_rows[:, None] * stride_am
        as_ptr = A_SCALE + a_rows * stride_asm
        if W_FP4:
            w4_ptr = weight_rows_ptr(W, expert, stride_we, stride_wn, cols, pid_n, K, BLOCK_N, 64, 32,
                                     W_TILED)[None, :]
        else:  # E4M3 rows, or (W_TILED) 128 x 128 tiles
            w_ptr = weight_rows_ptr(W, expert, stride_we, stride_wn, cols, pid_n, K, BLOCK_N, 128, 128,
                                    W_TILED)[None, :]
        ws_ptr = W_SCALE + expert * stride_wse + (cols // W_BN).to(tl.int64) * stride_wsn
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        k_lo = pid_k * k_per_split
        k_hi = tl.minimum(K, k_lo + k_per_split)
        # K has no masks: the wrapper makes K and k_per_split multiples of KSTEP * SUB, so
        # every load is whole 16-byte vectors (a K mask made Triton fall back to byte loads)
        for k0 in range(k_lo, k_hi, KSTEP * SUB):
            if A_SB > 0 and W_BK % (KSTEP * SUB) == 0:
                # one weight scale over this iteration's K (k0 is a multiple of KSTEP * SUB): each
                # product gets its activation scale, the weight scale comes once, after SUB of them
                # (a power of two: the same bits as scaling each product)
                sw = weight_scale(tl.load(ws_ptr + k0 // W_BK, mask=mask_n, other=0), W_E8M0)
                part = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
                for j in tl.static_range(SUB):
                    kb = k0 + j * KSTEP
                    ks = kb + tl.arange(0, KSTEP)
                    a = tl.load(a_ptr + ks[None, :], mask=mask_m[:, None], other=0.0)
                    w = tl.load(e4m3_step_ptr(w_ptr, kb, KSTEP, BLOCK_N, W_TILED), mask=mask_n[None, :], other=0.0)
                    a, sa = scaled_activation(a, as_ptr, kb, mask_m, A_SB, QUANT_A)
                    part += tl.dot(a, w) * sa[:, None]
                acc += part * sw[None, :]
            else:
                for j in tl.static_range(SUB):
                    kb = k0 + j * KSTEP
                    if W_FP4:  # two chained half-depth products: the order of one KSTEP-deep product
                        lo, hi = e2m1_halves(weight_step_ptr(w4_ptr, kb, BLOCK_N, 64, 32, W_TILED), mask_n, KSTEP,
                                             W_FP4)
                        acc = half_product(acc, lo, a_ptr, ws_ptr, kb, mask_m, mask_n, KSTEP // 2, W_BK, W_E8M0,
                                           W_FP4)
                        acc = half_product(acc, hi, a_ptr, ws_ptr, kb + KSTEP // 2, mask_m, mask_n, KSTEP // 2, W_BK,
                                           W_E8M0, W_FP4)
                    else:
                        ks = kb + tl.arange(0, KSTEP)
                        a = tl.load(a_ptr + ks[None, :], mask=mask_m[:, None], other=0.0)
                        w = tl.load(e4m3_step_ptr(w_ptr, kb, KSTEP, BLOCK_N, W_TILED), mask=mask_n[None, :],
                                    other=0.0)
                        if KSTEP > W_BK:  # [KSTEP, BLOCK_N] scales: each row of w its own K block's
                            sw = tl.load(ws_ptr[None, :] + (ks // W_BK)[:, None], mask=mask_n[None, :], other=0)
                        else:
                            sw = tl.load(ws_ptr + kb // W_BK, mask=mask_n, other=0)
                        sw = weight_scale(sw, W_E8M0)
                        if A_SB > 0:
                            a, sa = scaled_activation(a, as_ptr, kb, mask_m, A_SB, QUANT_A)
                            acc += tl.dot(a, w) * (sa[:, None] * sw[None, :])
                        elif KSTEP > W_BK:
                            acc = tl.dot(a, (w.to(tl.float32) * sw).to(tl.bfloat16), acc)
                        else:
                            acc = tl.dot(a, (w.to(tl.float32) * sw[None, :]).to(tl.bfloat16), acc)
        out_rows = a_rows if SCATTER_OUT else rows.to(tl.int64)
        out_ptr = OUT + pid_k * stride_os + out_rows[:, None] * stride_om + cols[None, :]
        tl.store(out_ptr, acc.to(OUT.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def dequant_blocks(x, scales, BLOCK: tl.constexpr):
    """x [R, C] (E4M3 codes) times one scale per BLOCK columns (scales [R, C / BLOCK]), as bf16:
    exact, E4M3 x a power of two fits bf16."""
    R: tl.constexpr = x.shape[0]
    C: tl.constexpr = x.shape[1]
    y = tl.reshape(x.to(tl.float32), (R, C // BLOCK, BLOCK)) * scales[:, :, None]
    return tl.reshape(y, (R, C)).to(tl.bfloat16)


@triton.jit
def bf16_operands(w, a, ws_ptr, as_ptr, kb, mask_n, mask_t, KSTEP: tl.constexpr, A_SB: tl.constexpr,
                  W_BK: tl.constexpr, W_E8M0: tl.constexpr, QUANT_A: tl.constexpr):
    """A K step's weight tile w [BLOCK_N, KSTEP] (E4M3) and activation tile a [BLOCK_T, KSTEP] (E4M3
    with stored scales, or QUANT_A: bf16, quantized here per A_SB as act_quant_kernel would) as exact
    bf16 values: every scale block of the step gets its own scale."""
    w_blocks = (kb // W_BK + tl.arange(0, KSTEP // W_BK))[None, :]
    sw = weight_scale(tl.load(ws_ptr[:, None] + w_blocks, mask=mask_n[:, None], other=0), W_E8M0)
    BLOCK_T: tl.constexpr = a.shape[0]
    if QUANT_A:
        q, sa = quantize_rows(tl.reshape(a.to(tl.float32), (BLOCK_T * (KSTEP // A_SB), A_SB)))
        ab = tl.reshape(q.to(tl.float32) * sa[:, None], (BLOCK_T, KSTEP)).to(tl.bfloat16)
    else:
        a_blocks = (kb // A_SB + tl.arange(0, KSTEP // A_SB))[None, :]
        ab = dequant_blocks(a, tl.load(as_ptr[:, None] + a_blocks, mask=mask_t[:, None], other=0.0), A_SB)
    return dequant_blocks(w, sw, W_BK), ab


@triton.jit(do_not_specialize=["M"])
def fp8_gemm_rows_kernel(A, A_SCALE, W, W_SCALE, OUT, M, N, K, k_per_split,
                         stride_am, stride_asm, stride_wn, stride_wsn, stride_om, stride_os,
                         BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr, KSTEP: tl.constexpr, SUB: tl.constexpr,
                         A_SB: tl.constexpr, W_BN: tl.constexpr, W_BK: tl.constexpr, W_E8M0: tl.constexpr,
                         QUANT_A: tl.constexpr, BF16_STEPS: tl.constexpr = False):
    """``fp8_gemm_kernel`` (ungrouped, FP8 activations) for a few rows, with the product swapped:
    program (N tile, K split) computes OUT^T[BLOCK_N, BLOCK_T] = W A^T, so the weight tile is
    the 64-row operand of Hopper's FP8 tensor-core instruction (wgmma needs 64 rows) and the
    M <= BLOCK_T rows of a decode step the narrow one; the rows-first kernel must pad them to
    16 and, below 64, run FP8 through the older instruction after converting the weight tile.
    Each KSTEP product is scaled by its rows' activation scales and the weight block's scale
    (KSTEP <= W_BK), as the rows-first kernel's per-step branch does.
    BF16_STEPS (KSTEP a multiple of A_SB and W_BK): both operands are dequantized in registers
    (E4M3 x a power of two: exact in bf16) and meet in one bf16 product KSTEP deep, so a step
    spans several scale blocks and the accumulator is never rescaled (``bf16_operands``)."""
    pdl_start()
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    toks = tl.arange(0, BLOCK_T)
    mask_t = toks < M
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = cols < N
    a_ptr = A + toks.to(tl.int64)[:, None] * stride_am
    as_ptr = A_SCALE + toks.to(tl.int64) * stride_asm
    w_ptr = W + cols.to(tl.int64)[:, None] * stride_wn
    ws_ptr = W_SCALE + (cols // W_BN).to(tl.int64) * stride_wsn
    acc = tl.zeros([BLOCK_N, BLOCK_T], tl.float32)
    k_lo = pid_k * k_per_split
    k_hi = tl.minimum(K, k_lo + k_per_split)
    for k0 in range(k_lo, k_hi, KSTEP * SUB):
        for j in tl.static_range(SUB):
            kb = k0 + j * KSTEP
            ks = kb + tl.arange(0, KSTEP)
            a = tl.load(a_ptr + ks[None, :], mask=mask_t[:, None], other=0.0)
            w = tl.load(w_ptr + ks[None, :], mask=mask_n[:, None], other=0.0)
            if BF16_STEPS:
                wb, ab = bf16_operands(w, a, ws_ptr, as_ptr, kb, mask_n, mask_t, KSTEP, A_SB, W_BK, W_E8M0, QUANT_A)
                acc = tl.dot(wb, tl.trans(ab), acc)
            else:
                sw = weight_scale(tl.load(ws_ptr + kb // W_BK, mask=mask_n, other=0), W_E8M0)
                a, sa = scaled_activation(a, as_ptr, kb, mask_t, A_SB, QUANT_A)
                acc += tl.dot(w, tl.trans(a)) * (sw[:, None] * sa[None, :])
    out_ptr = OUT + pid_k * stride_os + toks.to(tl.int64)[None, :] * stride_om + cols[:, None]
    tl.store(out_ptr, acc.to(OUT.dtype.element_ty), mask=mask_n[:, None] & mask_t[None, :])


@triton.jit
def e2m1_e4m3_halves(packed, PTX: tl.constexpr):
    """E4M3 codes of value / 64 for the low and the high nibbles of packed E2M1 bytes (any shape):
    four bytes per register operation (PTX) or the same bits from integer operations (Triton's CPU
    interpreter, which runs no inline asm)."""
    if PTX:
        lo = tl.inline_asm_elementwise(_E2M1_LOW_E4M3_PTX, "=r,r", [packed], dtype=tl.float8e4nv, is_pure=True,
                                       pack=4)
        hi = tl.inline_asm_elementwise(_E2M1_HIGH_E4M3_PTX, "=r,r", [packed], dtype=tl.float8e4nv, is_pure=True,
                                       pack=4)
    else:
        b = packed.to(tl.int32)
        lo = (((b & 0x07) << 2) | ((b & 0x08) << 4)).to(tl.uint8).to(tl.float8e4nv, bitcast=True)
        hi = (((b >> 2) & 0x1C) | (b & 0x80)).to(tl.uint8).to(tl.float8e4nv, bitcast=True)
    return lo, hi


@triton.jit
def fp4_span_scales(as_ptr, ws_ptr, kb, mask_t, mask_n, A_SB: tl.constexpr, W_BK: tl.constexpr):
    """The scales of the two halves of the span at ``kb``: (activation scales [BLOCK_T], weight
    scale bytes [BLOCK_N]) each. Loaded an iteration ahead of their products: loaded inside their
    own iteration, each K step would wait out a global load's latency."""
    return (tl.load(as_ptr + kb // A_SB, mask=mask_t, other=0.0), tl.load(ws_ptr + kb // W_BK, mask=mask_n, other=0),
            tl.load(as_ptr + (kb + 32) // A_SB, mask=mask_t, other=0.0),
            tl.load(ws_ptr + (kb + 32) // W_BK, mask=mask_n, other=0))


@triton.jit
def fp4_block_scales(ws_ptr, as_ptr, kb, mask_n, mask_t, A_SB: tl.constexpr, PTX: tl.constexpr):
    """BLOCK_ACC's scales of the 128-input block at ``kb``: each weight row's four E8M0 bytes as one
    int32 word (byte j: inputs kb + 32 j ..; ``ws_ptr`` points to words, rows past N to a valid row)
    [BLOCK_N], and the rows' activation scales of the block's four 32-input quarters [BLOCK_T] each
    (one load where A_SB spans the block). PTX: the words through an inline load, which Triton places
    in the layout its users want (a tl.load of as many values as threads stays in its own, and the
    four scales taken from it then cross layouts through shared memory, four times an iteration)."""
    if PTX:
        words = tl.inline_asm_elementwise("ld.global.nc.b32 $0, [$1];", "=r,l", [ws_ptr + kb // 128], dtype=tl.int32,
                                          is_pure=True, pack=1)
    else:
        words = tl.load(ws_ptr + kb // 128, mask=mask_n, other=0)
    sa0 = tl.load(as_ptr + kb // A_SB, mask=mask_t, other=0.0)
    if A_SB % 128 == 0:
        return words, sa0, sa0, sa0, sa0
    sa2 = tl.load(as_ptr + (kb + 64) // A_SB, mask=mask_t, other=0.0)
    if A_SB == 64:
        return words, sa0, sa0, sa2, sa2
    return (words, sa0, tl.load(as_ptr + (kb + 32) // A_SB, mask=mask_t, other=0.0), sa2,
            tl.load(as_ptr + (kb + 96) // A_SB, mask=mask_t, other=0.0))


@triton.jit
def fp4_half_product(acc, w, sa, sw, a_ptr, k0, mask_t, HALF: tl.constexpr):
    """acc + (W A^T) over inputs k0 .. k0 + HALF: one FP8 tensor-core product of the weight half ``w``
    (E4M3 of value / 64, [BLOCK_N, HALF], inside one weight scale block) with the rows' E4M3 codes,
    times (weight scale x 64) x activation scale -- powers of two: exact -- added to the fp32 acc.
    (Issuing both halves' products before scaling either still compiled to a wait after each.)"""
    a = tl.load(a_ptr + (k0 + tl.arange(0, HALF))[None, :], mask=mask_t[:, None], other=0.0)
    scale = (weight_scale(sw, True) * 64.0)[:, None] * sa[None, :]
    return acc + tl.dot(w, tl.trans(a)) * scale


@triton.jit
def fp4_weighted_quarter(w, words, j: tl.constexpr, a_ptr, k0, mask_t, HALF: tl.constexpr):
    """(W A^T) over inputs k0 .. k0 + HALF (quarter ``j`` of a 128-input block) times the weight scales
    only: byte ``j`` of each row's scale word (the activation scale and the codes' 1/64 are the
    caller's). The E8M0 byte becomes fp32 bits in two operations: shifted straight to the exponent
    field, masked."""
    a = tl.load(a_ptr + (k0 + tl.arange(0, HALF))[None, :], mask=mask_t[:, None], other=0.0)
    if j == 3:
        bits = (words >> 1) & 0x7F800000
    else:
        bits = (words << (23 - 8 * j)) & 0x7F800000
    return tl.dot(w, tl.trans(a)) * bits.to(tl.float32, bitcast=True)[:, None]


@triton.jit
def fp4_add_quarter(acc, blk, part, sa, A_SB: tl.constexpr):
    """A quarter's product into the block sum (activation scales per 128 or wider: the scale is
    applied once the block is summed) or, scaled by its activation scale, into the accumulator."""
    if A_SB % 128 == 0:
        blk += part
    else:
        acc += part * (sa * 64.0)[None, :]
    return acc, blk


@triton.jit
def fp4_block_span(acc, blk, w_ptr, words, s: tl.constexpr, kb, sa_lo, sa_hi, a_ptr, mask_n, mask_t,
                   BLOCK_N: tl.constexpr, A_SB: tl.constexpr, TILED: tl.constexpr, PTX: tl.constexpr):
    """Span ``s`` (inputs kb + 64 s ..) of a 128-input block: its packed bytes unpacked to two E4M3
    halves, each half's product (quarters 2 s and 2 s + 1) added by ``fp4_add_quarter``."""
    k0 = kb + 64 * s
    packed = tl.load(weight_step_ptr(w_ptr, k0, BLOCK_N, 64, 32, TILED) + tl.arange(0, 32)[None, :],
                     mask=mask_n[:, None], other=0)
    lo, hi = e2m1_e4m3_halves(packed, PTX)
    acc, blk = fp4_add_quarter(acc, blk, fp4_weighted_quarter(lo, words, 2 * s, a_ptr, k0, mask_t, 32), sa_lo, A_SB)
    return fp4_add_quarter(acc, blk, fp4_weighted_quarter(hi, words, 2 * s + 1, a_ptr, k0 + 32, mask_t, 32), sa_hi,
                           A_SB)


@triton.jit
def fp4_gemm_rows_kernel(A, A_SCALE, W, W_SCALE, OUT, ROW_IDX, TILE_EXPERT, TILE_ROW0, TILE_ROW1, N, K, k_per_split,
                         stride_am, stride_asm, stride_we, stride_wn, stride_wse, stride_wsn, stride_om, stride_os,
                         BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr, A_SB: tl.constexpr, W_BK: tl.constexpr,
                         GATHER_A: tl.constexpr, SCATTER_OUT: tl.constexpr, PTX: tl.constexpr,
                         TILED: tl.constexpr = False, BLOCK_ACC: tl.constexpr = False):
    """Grouped GEMM of packed E2M1 experts (quant.to_fp4_tiles' layout, spans of 64, E8M0 scales per
    W_BK = 32 inputs) with E4M3 activations (fp32 scales per A_SB), the product swapped as in
    ``fp8_gemm_rows_kernel``: program (row tile i, N tile, K split) computes OUT^T[BLOCK_N, BLOCK_T]
    = W A^T for rows [TILE_ROW0[i], TILE_ROW1[i]) of expert TILE_EXPERT[i] (-1: none), so the
    unpacked weight tile is the register operand of Hopper's 64-row FP8 tensor-core instruction and
    a decode step's one or two rows per expert the narrow one. Each span's two halves become E4M3
    in registers (``e2m1_e4m3_halves``: a few integer operations per four values; the bf16 path's
    unpack also converts and scales each value) and each half is one 32-deep product rescaled by
    its blocks' scales, as the rows-first kernel's FP8 path does. TILED: the weights in 128-row tiles
    (``quant.fp4_tiled``; BLOCK_N 128), else rows ``stride_wn`` apart. GATHER_A: A's row for tile row r
    is ROW_IDX[r]; SCATTER_OUT: so is OUT's.
    BLOCK_ACC (K per split a multiple of 128): a 128-input block per iteration, W_SCALE holding the
    scale bytes as int32 words (four a word, strides in words). Activation scales per 128 or wider
    (V4): the block's four products summed under their weight scales only, its activation scale
    applied once (the same products, summed in another association); narrower (V4.1): each product
    scaled by both, as span by span (offline SASS, benchmarks/sass_count.py: 4.7 -> 3.0 instructions
    a weight value at V4's scales)."""
    pdl_start()
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    expert = tl.load(TILE_EXPERT + pid_m).to(tl.int64)
    row0 = tl.load(TILE_ROW0 + pid_m)
    row_end = tl.load(TILE_ROW1 + pid_m)
    if expert >= 0:
        rows, mask_t, a_rows = tile_rows(ROW_IDX, row0, row_end, BLOCK_T, GATHER_A)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = cols < N
        a_ptr = A + a_rows[:, None] * stride_am
        as_ptr = A_SCALE + a_rows * stride_asm
        w_ptr = weight_rows_ptr(W, expert, stride_we, stride_wn, cols, pid_n, K, BLOCK_N, 64, 32, TILED)[:, None]
        ws_ptr = W_SCALE + expert * stride_wse + tl.minimum(cols, N - 1).to(tl.int64) * stride_wsn  # rows < N
        acc = tl.zeros([BLOCK_N, BLOCK_T], tl.float32)
        k_lo = pid_k * k_per_split
        k_hi = tl.minimum(K, k_lo + k_per_split)
        if BLOCK_ACC:
            # W_SCALE as int32 words: a row's four scale bytes of a 128-input block in one load; the
            # scales loaded a block ahead, like the span scales below
            words, sa0, sa1, sa2, sa3 = fp4_block_scales(ws_ptr, as_ptr, k_lo, mask_n, mask_t, A_SB, PTX)
            for kb in range(k_lo, k_hi, 128):  # one 128-input block (two spans) per iteration
                n_words, n_sa0, n_sa1, n_sa2, n_sa3 = fp4_block_scales(ws_ptr, as_ptr, tl.minimum(kb + 128, k_hi - 128),
                                                                       mask_n, mask_t, A_SB, PTX)
                blk = tl.zeros([BLOCK_N, BLOCK_T], tl.float32)
                acc, blk = fp4_block_span(acc, blk, w_ptr, words, 0, kb, sa0, sa1, a_ptr, mask_n, mask_t, BLOCK_N, A_SB,
                                          TILED, PTX)
                acc, blk = fp4_block_span(acc, blk, w_ptr, words, 1, kb, sa2, sa3, a_ptr, mask_n, mask_t, BLOCK_N, A_SB,
                                          TILED, PTX)
                if A_SB % 128 == 0:
                    acc += blk * (sa0 * 64.0)[None, :]
                words, sa0, sa1, sa2, sa3 = n_words, n_sa0, n_sa1, n_sa2, n_sa3
        else:
            sa_lo, sw_lo, sa_hi, sw_hi = fp4_span_scales(as_ptr, ws_ptr, k_lo, mask_t, mask_n, A_SB, W_BK)
            for kb in range(k_lo, k_hi, 64):  # one 64-input span (32 bytes a weight row) per iteration
                # the next span's scales (the last iteration reloads its own: no mask, no branch)
                n_sa_lo, n_sw_lo, n_sa_hi, n_sw_hi = fp4_span_scales(as_ptr, ws_ptr, tl.minimum(kb + 64, k_hi - 64),
                                                                     mask_t, mask_n, A_SB, W_BK)
                packed = tl.load(weight_step_ptr(w_ptr, kb, BLOCK_N, 64, 32, TILED) + tl.arange(0, 32)[None, :],
                                 mask=mask_n[:, None], other=0)
                lo, hi = e2m1_e4m3_halves(packed, PTX)
                acc = fp4_half_product(acc, lo, sa_lo, sw_lo, a_ptr, kb, mask_t, 32)
                acc = fp4_half_product(acc, hi, sa_hi, sw_hi, a_ptr, kb + 32, mask_t, 32)
                sa_lo, sw_lo, sa_hi, sw_hi = n_sa_lo, n_sw_lo, n_sa_hi, n_sw_hi
        out_rows = a_rows if SCATTER_OUT else rows.to(tl.int64)
        out_ptr = OUT + pid_k * stride_os + out_rows[None, :] * stride_om + cols[:, None]
        tl.store(out_ptr, acc.to(OUT.dtype.element_ty), mask=mask_n[:, None] & mask_t[None, :])


@triton.jit
def swiglu_quant_kernel(H, RW, Q, S, I, stride_h, stride_q, stride_s, limit, splits, stride_hs,
                        BLOCK: tl.constexpr, GROUPS: tl.constexpr, HAS_LIMIT: tl.constexpr,
                        DEQUANT_OUT: tl.constexpr, SUM_TO_BF16: tl.constexpr = False,
                        SCALE_GROUPS: tl.constexpr = 1):
    """One sorted MoE row x GROUPS blocks: clamp, silu(gate) * up, times the route weight,
    rounded to bf16 (the reference's w2 input), then quantized like act_quant_kernel
    (DEQUANT_OUT: the round-tripped values in Q's dtype instead of codes and scales). H may be a
    K-split GEMM's fp32 partials (``splits`` of them, ``stride_hs`` apart): added first as
    split_sum_kernel adds them (one by one in split order, fp32) and rounded to bf16 where
    SUM_TO_BF16 -- the GEMM's result as its split sum would have stored it. SCALE_GROUPS: as act_quant_kernel's."""
    pdl_start()
    row = tl.program_id(0).to(tl.int64)
    group = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    offs = group[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    mask = offs < I
    gate = tl.load(H + row * stride_h + offs, mask=mask, other=0.0)
    up = tl.load(H + row * stride_h + I + offs, mask=mask, other=0.0)
    for s in range(1, splits):
        gate += tl.load(H + s * stride_hs + row * stride_h + offs, mask=mask, other=0.0)
        up += tl.load(H + s * stride_hs + row * stride_h + I + offs, mask=mask, other=0.0)
    if SUM_TO_BF16:
        gate, up = gate.to(tl.bfloat16), up.to(tl.bfloat16)
    gate, up = gate.to(tl.float32), up.to(tl.float32)
    if HAS_LIMIT:
        up = tl.minimum(tl.maximum(up, -limit), limit)
        gate = tl.minimum(gate, limit)
    h = gate / (1.0 + tl.exp(-gate)) * up
    h = (tl.load(RW + row) * h).to(tl.bfloat16).to(tl.float32)
    quantize_store(h, Q + row * stride_q, S + row * stride_s, offs, group, mask, I, BLOCK, DEQUANT_OUT,
                   SCALE_GROUPS)


@triton.jit
def swiglu_kernel(GATE, UP, RW, OUT, I, stride_g, stride_u, stride_o, limit,
                  BLOCK: tl.constexpr, HAS_LIMIT: tl.constexpr, HAS_RW: tl.constexpr, INTERPRET: tl.constexpr):
    """reference.swiglu for one row x BLOCK: torch's fp32 steps in its order, silu as
    x / (1 + exp(-x)) with libdevice's expf and an IEEE division (as torch's CUDA silu)."""
    pdl_start()
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < I
    gate = tl.load(GATE + row * stride_g + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(UP + row * stride_u + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_LIMIT:
        up = tl.minimum(tl.maximum(up, -limit), limit)
        gate = tl.minimum(gate, limit)
    if INTERPRET:  # no libdevice in Triton's CPU interpreter
        e = tl.exp(-gate)
    else:
        e = libdevice.exp(-gate)
    h = tl.div_rn(gate, 1.0 + e) * up
    if HAS_RW:
        h = tl.load(RW + row) * h
    tl.store(OUT + row * stride_o + offs, h.to(OUT.dtype.element_ty), mask=mask)


@triton.jit
def combine_kernel(OUT, ROWS, SHARED, Y, D, stride_o, stride_s, stride_y, K: tl.constexpr, GATHER: tl.constexpr,
                   HAS_SHARED: tl.constexpr, BLOCK: tl.constexpr):
    """Y[t] = sum over j < K of OUT[row j of t] in fp32, added one by one from j = 0 (the order
    of the reference's expert loop when the rows are in ascending expert order), then
    (HAS_SHARED) SHARED[t] added, cast to Y's dtype. Row j of t: ROWS[t K + j] (GATHER) or t K + j."""
    pdl_start()
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < D
    acc = tl.zeros([BLOCK], tl.float32)
    for j in tl.static_range(K):
        if GATHER:
            row = tl.load(ROWS + t * K + j).to(tl.int64)
        else:
            row = t * K + j
        acc += tl.load(OUT + row * stride_o + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_SHARED:
        acc += tl.load(SHARED + t * stride_s + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + t * stride_y + cols, acc.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def dequant_bf16_kernel(W, S, OUT, N, K, stride_wn, stride_sn, stride_on, B0: tl.constexpr, B1: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """OUT = bf16(W x S) for one [BLOCK_N, BLOCK_K] tile: W E4M3 [N, K], S fp32 [N / B0, K / B1] (each a
    bf16 value: the product is exact in fp32 and rounds to bf16 once, as torch's bf16 multiply does).
    One pass: 1 byte read and 2 written a value (two torch ops moved 7)."""
    pdl_start()
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows < N)[:, None] & (cols < K)[None, :]
    w = tl.load(W + rows.to(tl.int64)[:, None] * stride_wn + cols[None, :], mask=mask, other=0.0)
    s = tl.load(S + (rows // B0).to(tl.int64)[:, None] * stride_sn + (cols // B1)[None, :], mask=mask, other=0.0)
    tl.store(OUT + rows.to(tl.int64)[:, None] * stride_on + cols[None, :], (w.to(tl.float32) * s).to(tl.bfloat16),
             mask=mask)


@triton.jit
def split_sum_kernel(PARTS, OUT, size, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """OUT = PARTS[0] + PARTS[1] + ... in fp32, added one by one in that order, rounded once
    to OUT's dtype (split-K partials [SPLIT, size]: the order never depends on the shape)."""
    pdl_start()
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < size
    acc = tl.load(PARTS + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT):
        acc += tl.load(PARTS + s * size + offs, mask=mask, other=0.0)
    tl.store(OUT + offs, acc.to(OUT.dtype.element_ty), mask=mask)


@triton.jit
def e2m1_round(t):
    """Nearest E2M1 value of fp32 t, ties to even, saturating at +-6, sign kept (quant.e2m1_round):
    each binade's grid is evenly spaced, so t / step is rounded half-to-even by the 1.5 * 2^23 trick."""
    mag = tl.minimum(tl.abs(t), 6.0)
    step = tl.where(mag < 2.0, 0.5, tl.where(mag < 4.0, 1.0, 2.0))
    units = mag * (1.0 / step)  # step is a power of two: exact
    rounded = ((units + 12582912.0) - 12582912.0) * step
    sign = t.to(tl.uint32, bitcast=True) & 0x80000000
    return (rounded.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def e4m3_round_positive(v):
    """A positive fp32 v rounded to E4M3, to nearest even, saturating at 448 (as cvt.rn.satfinite;
    written out in fp32 so that Triton's CPU interpreter, whose fp8 cast rounds otherwise, agrees):
    3 mantissa bits below v's leading one, never finer than the subnormal step 2^-9."""
    exponent = ((v.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    quantum = tl.maximum(exponent - 3, -9)
    units = v * ((127 - quantum) << 23).to(tl.float32, bitcast=True)  # v / 2^quantum: exact
    rounded = ((units + 12582912.0) - 12582912.0) * ((127 + quantum) << 23).to(tl.float32, bitcast=True)
    return tl.minimum(rounded, 448.0)


@triton.jit
def fp4_roundtrip_kernel(X, Y, n, stride_x, stride_y, GROUP: tl.constexpr, GROUPS: tl.constexpr,
                         E4M3_SCALE: tl.constexpr):
    """One row x GROUPS groups of GROUP values: quant.fp4_roundtrip_e8m0 (power-of-two scale) or,
    with E4M3_SCALE, quant.fp4_roundtrip_e4m3 (scale amax / 6 rounded to E4M3, true divisions)."""
    pdl_start()
    row = tl.program_id(0).to(tl.int64)
    group = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    offs = group[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    mask = offs < n
    x = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), 1)
    if E4M3_SCALE:
        amax = tl.maximum(amax, 6.0 * 0.001953125)  # 6 * 2^-9
        scale = e4m3_round_positive(tl.math.div_rn(amax, tl.full(amax.shape, 6.0, tl.float32)))
        t = tl.math.div_rn(x, tl.broadcast_to(scale[:, None], x.shape))
    else:
        scale = ceil_pow2(tl.maximum(amax, 6.0 * 1.1754943508222875e-38) * (1.0 / 6.0))  # 6 * 2^-126
        t = x * pow2_reciprocal(scale)[:, None]
    tl.store(Y + row * stride_y + offs, (e2m1_round(t) * scale[:, None]).to(Y.dtype.element_ty), mask=mask)
