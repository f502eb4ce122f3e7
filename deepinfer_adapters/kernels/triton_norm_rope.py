"""Triton backends of ``rms_norm``, ``hc_pre_norm``, ``rms_norm_in_dtype`` and ``apply_rope`` (CUDA
tensors only; registered as "triton").

Same signatures and meaning as ``kernels.reference``. The torch versions are 6-10
small kernels each (casts, square, mean, rsqrt, products; complex view, multiply,
cat); here each is one. Both compute each row (position) alone with tile shapes set
by the row width only, so a row's result never depends on the batch: they also run in
batch-invariant mode (``kernels.invariance``).

Design.
- ``rms_norm`` x [..., N]: rows of one program each when N >= 2048, else several
  rows per program (a [rows, N] tile of ~4096 values); the whole row sits in
  registers (N <= 16384), one read and one write. The tile shape depends on N only,
  so a row's result does not depend on how many rows share the call. ``hc_pre_norm``: the same
  kernel, each row first collapsed from its hc streams (the sublayers' input: one launch, not two).
- ``apply_rope`` x [S, ..., dim], freqs [S, rd/2] complex64 (read as fp32 pairs):
  one program per (position, block of heads); the first dim - rd values of each
  row are copied, the last rd are loaded as one contiguous tile, split into
  (even, odd) pairs, rotated and interleaved back. Out of place, as the reference, or
  (``overwrite``) in place: only the rd rotated values are read and written.

Numerics against the reference (fp32 inside, one cast to x's dtype at the end):
- ``rms_norm``: the same operations in the same order -- fp32 squares, their sum
  times 1/N (torch's mean multiplies by 1/N), + eps, rsqrt (rsqrt.approx, as torch's
  rsqrtf), x * r, then weight * (x * r) -- except that the sum of squares is added
  in a different tree: a few fp32 ulps on r, hence on every output; bf16 outputs
  round to the same value or its neighbour (one bf16 ulp).
- ``rms_norm_in_dtype`` (V4's query norm): torch's ops in x's dtype, each result rounded to it,
  the same kernel rounding after each step; only the sum's tree differs (the rounded mean moves
  by one ulp of x's dtype where the fp32 sum falls at a rounding boundary).
- ``apply_rope``: (xr fr - xi fi, xr fi + xi fr) in fp32 like torch's complex64
  product (whether each pair becomes an FMA is up to the compilers on both sides:
  an fp32 ulp of the larger product); the copied part is exact.
Seen on the H200 (tests/gpu/test_hc_norm_rope_gpu.py): apply_rope bit-equal in every
case; rms_norm fp32 within 2 ulps, bf16 bit-equal but for ~1e-5 of the elements (one
bf16 ulp).

Speed (H200, CUDA-graph replays, benchmarks/bench_hc_norm_rope.py): at T = 1 every
call 1.3-2.1 us (torch 5-12.5); at T = 8192 rms_norm [T, 5120] 59 us (553), q
[T, 64, 512] rms_norm / rope 290 / 299 us (2699 / 1358), within 15% of the bytes floor.

Triton is imported lazily (importing ``deepinfer_adapters`` needs no GPU stack).
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.triton_support import FLOAT_DTYPES, pdl_launch, triton_available

NORM_MAX_WIDTH = 16384  # widest row kept in registers
NORM_TILE = 4096  # values per program for narrow rows
ROPE_TILE = 4096  # values per program (heads x dim)


def norm_rows(block_n: int) -> int:
    """The rms_norm kernel's rows a program for rows of ``block_n`` values: NORM_TILE values a program where rows
    are narrow, one row otherwise (``triton_hc_post_norm`` norms a row in the same tile to give the same bits)."""
    return max(1, NORM_TILE // block_n)


def norm_warps(values: int) -> int:
    """The warps of the rms_norm kernel for a tile of ``values``: they set its square sum's tree
    (``triton_hc_post_norm`` norms a row in the same number to give the same bits)."""
    return max(4, min(16, values // 1024))


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@functools.cache
def _kernels():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def rms_norm(X, PRE, W, OUT, R, N, stride_x, stride_xh, stride_p, stride_o, inv_n, eps, HC: tl.constexpr,
                 HAS_WEIGHT: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr,
                 IN_DTYPE: tl.constexpr = False):
        """HC > 0: each row is first the hc_pre collapse of X's HC streams (products rounded,
        streams added in order, cast to OUT's dtype), as ``triton_hc.hc_pre`` computes it.
        IN_DTYPE (weightless): every step rounded to OUT's dtype, as torch's ops in that dtype
        (``reference.rms_norm_in_dtype``): squares, mean, + eps, rsqrt, the product."""
        pdl_start()
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        cols = tl.arange(0, BLOCK_N)
        mask_c = cols < N
        mask_r = rows < R
        mask = mask_r[:, None] & mask_c[None, :]
        rows = rows.to(tl.int64)
        x_ptr = X + rows[:, None] * stride_x + cols[None, :]
        if HC == 0:
            x = tl.load(x_ptr, mask=mask, other=0.0).to(tl.float32)
        else:
            pre = PRE + rows * stride_p
            x = tl.load(pre, mask=mask_r, other=0.0)[:, None] * tl.load(x_ptr, mask=mask, other=0.0).to(tl.float32)
            for a in tl.static_range(1, HC):
                x += (tl.load(pre + a, mask=mask_r, other=0.0)[:, None]
                      * tl.load(x_ptr + a * stride_xh, mask=mask, other=0.0).to(tl.float32))
            x = x.to(OUT.dtype.element_ty).to(tl.float32)
        if IN_DTYPE:
            dt = OUT.dtype.element_ty
            mean = (tl.sum((x * x).to(dt).to(tl.float32), axis=1) * inv_n).to(dt).to(tl.float32)
            r = tl.rsqrt((mean + eps).to(dt).to(tl.float32)).to(dt).to(tl.float32)
        else:
            r = tl.rsqrt(tl.sum(x * x, axis=1) * inv_n + eps)
        y = x * r[:, None]
        if HAS_WEIGHT:
            y = tl.load(W + cols, mask=mask_c, other=0.0).to(tl.float32)[None, :] * y
        tl.store(OUT + rows[:, None] * stride_o + cols[None, :], y.to(OUT.dtype.element_ty), mask=mask)

    @triton.jit
    def apply_rope(X, F, OUT, M, stride_xs, stride_xm, stride_os, stride_om, sign,
                   NOPE: tl.constexpr, RD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_NOPE: tl.constexpr,
                   COPY_NOPE: tl.constexpr = True):
        """Position pid0, rows (heads) [pid1 * BLOCK_M, +BLOCK_M) of [M, NOPE + RD]; sign -1: conjugate.
        COPY_NOPE False: OUT is X (in place), the first NOPE values stay where they are."""
        pdl_start()
        s = tl.program_id(0).to(tl.int64)
        offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        mask_m = (offs_m < M)[:, None]
        offs_m = offs_m.to(tl.int64)
        x = X + s * stride_xs + offs_m[:, None] * stride_xm
        out = OUT + s * stride_os + offs_m[:, None] * stride_om
        if NOPE > 0 and COPY_NOPE:
            c = tl.arange(0, BLOCK_NOPE)[None, :]
            tl.store(out + c, tl.load(x + c, mask=mask_m & (c < NOPE)), mask=mask_m & (c < NOPE))
        j = tl.arange(0, RD // 2)
        f = tl.load(F + s * RD + 2 * j[:, None] + tl.arange(0, 2)[None, :])  # [RD/2, 2] (cos, sin)
        fr, fi = tl.split(f)
        fi = fi * sign
        d = tl.arange(0, RD)[None, :]
        pairs = tl.reshape(tl.load(x + NOPE + d, mask=mask_m).to(tl.float32), (BLOCK_M, RD // 2, 2))
        xr, xi = tl.split(pairs)
        re = xr * fr[None, :] - xi * fi[None, :]
        im = xr * fi[None, :] + xi * fr[None, :]
        rot = tl.reshape(tl.join(re, im), (BLOCK_M, RD))
        tl.store(out + NOPE + d, rot.to(OUT.dtype.element_ty), mask=mask_m)

    return triton, rms_norm, apply_rope


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """See ``reference.rms_norm``: y = w * x * rsqrt(mean(x^2) + eps), fp32 inside, x's dtype out."""
    return _last_dim_norm(x, weight, eps, in_dtype=False)


def rms_norm_in_dtype(x: torch.Tensor, eps: float) -> torch.Tensor:
    """See ``reference.rms_norm_in_dtype``: the rms_norm kernel with every step rounded to x's dtype."""
    return _last_dim_norm(x, None, eps, in_dtype=True)


def _last_dim_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float, in_dtype: bool) -> torch.Tensor:
    N = x.shape[-1]
    x2 = x.reshape(-1, N)
    x2 = x2 if x2.stride(-1) == 1 else x2.contiguous()
    return _norm(x2, None, weight, eps, in_dtype=in_dtype).view(x.shape)


def hc_pre_norm(x: torch.Tensor, pre: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """See ``reference.hc_pre_norm``: x [..., hc, D], pre [..., hc] fp32 -> [..., D] in x's dtype;
    one launch where hc_pre + rms_norm are two, the same arithmetic (the same bits as the two
    Triton kernels, tests/gpu/test_hc_norm_rope_gpu.py)."""
    hc, D = x.shape[-2:]
    x3 = x.reshape(-1, hc, D)
    x3 = x3 if x3.stride(-1) == 1 else x3.contiguous()
    p = pre.reshape(-1, hc)
    p = p if p.stride(-1) == 1 else p.contiguous()
    return _norm(x3, p, weight, eps).view(*x.shape[:-2], D)


def _norm(x: torch.Tensor, pre: torch.Tensor | None, weight: torch.Tensor | None, eps: float,
          in_dtype: bool = False) -> torch.Tensor:
    """x [R, N] (pre None) or [R, hc, N] collapsed with pre [R, hc] first."""
    R, N = x.shape[0], x.shape[-1]
    out = torch.empty(R, N, device=x.device, dtype=x.dtype)
    if R and N:
        triton, k_norm, _ = _kernels()
        block_n = _pow2(N)
        block_r = norm_rows(block_n)
        w = x if weight is None else weight.contiguous()  # unused when weightless
        hc = 0 if pre is None else x.shape[1]
        k_norm[(triton.cdiv(R, block_r),)](
            x, x if pre is None else pre, w, out, R, N, x.stride(0), x.stride(1) if hc else 0,
            pre.stride(0) if hc else 0, out.stride(0), 1.0 / N, float(eps), HC=hc, HAS_WEIGHT=weight is not None,
            BLOCK_R=block_r, BLOCK_N=block_n, IN_DTYPE=in_dtype, num_warps=norm_warps(block_r * block_n),
            enable_fp_fusion=False, **pdl_launch())
    return out


def supports_rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> bool:
    return (x.is_cuda and x.dim() >= 1 and x.dtype in FLOAT_DTYPES and 0 < x.shape[-1] <= NORM_MAX_WIDTH
            and (weight is None or (weight.is_cuda and weight.shape == x.shape[-1:]))
            and triton_available())


def supports_hc_pre_norm(x: torch.Tensor, pre: torch.Tensor, weight: torch.Tensor | None, eps: float) -> bool:
    return (x.is_cuda and pre.is_cuda and x.dim() >= 2 and x.dtype in FLOAT_DTYPES and pre.dtype == torch.float32
            and pre.shape == x.shape[:-1] and 0 < x.shape[-1] <= NORM_MAX_WIDTH and 1 <= x.shape[-2] <= 16
            and (weight is None or (weight.is_cuda and weight.shape == x.shape[-1:])) and triton_available())


def apply_rope(x: torch.Tensor, freqs: torch.Tensor, inverse: bool = False, overwrite: bool = False) -> torch.Tensor:
    """See ``reference.apply_rope``: rotate the last rd = 2 * freqs.shape[-1] dims of x [S, ..., dim].
    ``overwrite``: in place where x's rows can be addressed as [S, M, dim] (only the rd rotated values
    move: a prefill's q [8192, 64, 512] 290 us out of place for 8x the bytes), else out of place."""
    S, dim = x.shape[0], x.shape[-1]
    rd = 2 * freqs.shape[-1]
    x3 = x.reshape(S, -1, dim)
    x3 = x3 if x3.stride(-1) == 1 else x3.contiguous()
    M = x3.shape[1]
    f = torch.view_as_real(freqs.resolve_conj()).reshape(S, rd)  # [S, rd] fp32: (cos, sin) pairs
    f = f if f.stride(-1) == 1 else f.contiguous()
    in_place = overwrite and x3.data_ptr() == x.data_ptr()  # x3 a view of x (reshape and contiguous copied nothing)
    out = x3 if in_place else torch.empty(S, M, dim, device=x.device, dtype=x.dtype)
    if S and M:
        triton, _, k_rope = _kernels()
        # in place only the rd rotated values of a row move: rows a program by rd (a prefill's q [8192, 64, 512]
        # took 80 us at 8 heads a program, 8192 x 8 programs of 1 KB; session 16's profile)
        block_m = min(_pow2(M), max(1, ROPE_TILE // _pow2(rd if in_place else dim)))
        nope = dim - rd
        k_rope[(S, triton.cdiv(M, block_m))](x3, f, out, M, x3.stride(0), x3.stride(1), out.stride(0), out.stride(1),
                                             -1.0 if inverse else 1.0, NOPE=nope, RD=rd, BLOCK_M=block_m,
                                             BLOCK_NOPE=_pow2(nope), COPY_NOPE=not in_place, num_warps=4,
                                             **pdl_launch())
    return x if in_place else out.view(x.shape)


def supports_rope(x: torch.Tensor, freqs: torch.Tensor, inverse: bool = False, overwrite: bool = False) -> bool:
    rd = 2 * freqs.shape[-1] if freqs.dim() == 2 else 0
    return (x.is_cuda and freqs.is_cuda and x.dim() >= 2 and x.dtype in FLOAT_DTYPES and freqs.dtype == torch.complex64
            and freqs.dim() == 2 and freqs.shape[0] == x.shape[0] and rd >= 2 and rd & (rd - 1) == 0
            and x.shape[-1] >= rd and triton_available())


def supports_rms_norm_in_dtype(x: torch.Tensor, eps: float) -> bool:
    return supports_rms_norm(x, None, eps)


register("rms_norm", "triton", rms_norm, supports=supports_rms_norm, priority=10)
register("rms_norm_in_dtype", "triton", rms_norm_in_dtype, supports=supports_rms_norm_in_dtype, priority=10)
register("hc_pre_norm", "triton", hc_pre_norm, supports=supports_hc_pre_norm, priority=10)
register("apply_rope", "triton", apply_rope, supports=supports_rope, priority=10)
