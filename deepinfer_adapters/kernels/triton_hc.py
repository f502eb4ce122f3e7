"""Triton backends of the hyper-connection ops (CUDA tensors only; registered as "triton").

Same signatures and meaning as ``kernels.reference``: ``hc_mix_logits``,
``hc_split_sinkhorn``, ``hc_pre``, ``hc_post``. At decode the torch versions are
chains of tiny kernels (the profile of a 7-layer V4.1 step: ~4,000 launches, most of
them here and in the norms); each op below is one kernel (``hc_mix_logits``: two
when it splits K). Batch invariance (``kernels.invariance``): every op but
``hc_mix_logits`` computes each token alone, with tile shapes that do not depend on
the number of tokens, so its result for a token never depends on the batch: they run
in batch-invariant mode too. ``hc_mix_logits`` splits K by the token count, except in
that mode, where its tiles and K split are fixed by K alone (``mix_config``).

Design.
- ``hc_mix_logits`` x [T, hc, D], fn [N, hc*D] (N = 24 mixes, or hc for the HC head):
  one read of x gives the sum of squares and the N dot products (a skinny GEMM,
  tokens x N, K = hc*D). Programs tile tokens x K: 16 tokens x 128-wide K blocks up
  to 64 tokens, else 64 x 64 (``mix_config``), each program a contiguous range of K
  blocks; when there are too few token tiles to fill the GPU, K is split over
  programs (decode: one block each) and a second kernel (one program per token)
  adds the fp32 partials in a fixed order and applies the rsqrt. bf16 x: fn (fp32,
  or fp64 rounded to fp32 as the reference does) is cut into three bf16 pieces
  hi + mid + lo = fn exactly, so three bf16 tensor-core products per block give
  x . fn to fp32 accuracy; each block's products start from a zero accumulator and
  are added to the running sum with an IEEE fp32 add (tensor-core accumulation may
  truncate; this confines that to one block). Other dtypes: exact fp32 FMA dots.
- ``hc_split_sinkhorn``: one program per 8 tokens, one comb entry per thread; each
  token's 4x4 comb stays in registers for the whole Sinkhorn loop (``iters`` passes),
  pre/post alongside. The IEEE divisions dominate (a subroutine each), hence one
  entry per thread rather than many.
- ``hc_pre`` / ``hc_post``: one program per (token, block of D); hc_pre reads the hc
  streams once, hc_post reads y and the hc residual streams once and writes the hc
  output streams as one [hc, block] tile.

Numerics against the reference (fp32 everywhere inside, output cast once):
- ``hc_pre`` / ``hc_post`` round each product to fp32 and add the streams in
  stream order (FMA contraction off), as torch's separate mul and sum kernels do; a
  GPU torch sum over 4 strided values adds them in that order too, so the fp32 values
  normally agree bit for bit, and bf16 outputs are then identical. The tests allow
  a few fp32 ulps of sum |terms| (one bf16 ulp after the cast) in case torch reduces
  in another order.
- ``hc_split_sinkhorn``: exp is libdevice's expf (torch's expf), divisions are
  IEEE (div.rn), sums over 4 values are tree sums where torch adds in order: the
  results differ from the reference by fp32 ulps, which the Sinkhorn passes do not
  amplify (the tests bound the difference by the reference's own distance from fp64).
- ``hc_mix_logits``: the dot products are summed in another order than cuBLAS's
  SGEMM and, for bf16 x, through tensor cores: the difference is of the order of
  the reference's own fp32 rounding error (a few ulps of sum |x_k fn_k|); the sum of
  squares likewise. rsqrt is rsqrt.approx, as torch's rsqrtf. Where K is split, the
  split depends on the number of tokens, so a token's logits can differ in the last
  bits between batch sizes (not in batch-invariant mode: one split for every T).
Seen on the H200 (tests/gpu/test_hc_norm_rope_gpu.py): hc_pre / hc_post bit-equal to
the reference in every case, bf16 and fp32; Sinkhorn pre / post bit-equal, comb within
2 fp32 ulps; mix_logits no further from the fp64 dot than the reference (bf16 x: at
most 0.26 u sum |terms|, the reference 1.4).

Speed (H200, CUDA-graph replays, benchmarks/bench_hc_norm_rope.py, hidden 5120): at
T = 1 hc_mix_logits 6.8 us (torch 18.8), Sinkhorn 5.3 (195), hc_pre 1.3 (7.8),
hc_post 2.1 (13.6); at T = 8192 326 (1308), 8.6 (270), 112 (1257), 210 (4539), hc_pre /
hc_post within 10% of their bytes floor.

Under Triton's CPU interpreter (TRITON_INTERPRET=1, used to check indexing without a
GPU) libdevice is unavailable and bf16 dots are wrong, so the kernels use tl.exp and
fp32 dots of the same bf16 pieces there.

Triton is imported lazily (importing ``deepinfer_adapters`` needs no GPU stack).
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import torch

from deepinfer_adapters.kernels import invariance, register
from deepinfer_adapters.kernels.triton_support import FLOAT_DTYPES, interpreting, pdl_launch, triton_available

SINKHORN_BLOCK_T = 8  # x 16 comb values = one per thread of 4 warps (the divisions are the cost)
MERGE_CHUNK = 64  # K splits added per load by the merge kernel
MERGE_SINKHORN = True  # hc_mixes: the merge and the Sinkhorn passes in one launch (False: two, for an A/B)
# ... up to this many tokens (decode): one program per token leaves most of a Sinkhorn tile idle,
# where split_sinkhorn takes 8 tokens a program; measured at decode only (session 10)
MERGE_SINKHORN_TOKENS = 64
# hc_mix_logits with bf16 x beyond this many tokens: the weight's three bf16 pieces are loaded (``fn_pieces``)
# instead of split in every program's every step -- the same pieces, the same bits; 8192 tokens 170 -> 137 us
# (H200, session 16). Decode leaves them: its few programs split a block or two each. Memory: 6 bytes a weight
# value, ~2.9 MB a V4.1 HC weight (two a layer), kept while the weight lives
PRESPLIT_FN = True
PRESPLIT_MIN_TOKENS = 64


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def sm_count(device: torch.device) -> int:
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.cache
def _kernels():
    import triton
    import triton.language as tl

    # bound at module level: Triton's interpreter resolves a kernel's names there
    global pdl_start, merge_logits_row, sinkhorn_tokens
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    if not interpreting():
        from triton.language.extra import libdevice  # expf, as torch (tl.exp: ex2.approx of x * log2 e)

    @triton.jit
    def mix_logits(X, FN, OUT, PACC, PSS, T, N, K, stride_xt, stride_fn, stride_ot, steps, inv_k, eps,
                   BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, N_PAD: tl.constexpr,
                   SPLIT_BF16: tl.constexpr, FINAL: tl.constexpr, INTERPRET: tl.constexpr,
                   PRESPLIT: tl.constexpr = False):
        """Tokens [pid0 * BLOCK_T, +BLOCK_T) x K blocks [pid1 * steps, +steps). FINAL (one K
        range): writes the logits; else fp32 partial dots to PACC [splits, T, N_PAD] and
        partial sums of squares to PSS [splits, T]. PRESPLIT (SPLIT_BF16): FN is [3, N, K] bf16,
        the pieces hi, mid, lo (``fn_pieces``), loaded as they are."""
        pdl_start()
        split = tl.program_id(1)
        offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
        mask_t = offs_t < T
        offs_n = tl.arange(0, N_PAD)
        mask_n = offs_n < N
        offs_k = tl.arange(0, BLOCK_K)
        x_rows = X + offs_t.to(tl.int64)[:, None] * stride_xt
        acc = tl.zeros([BLOCK_T, N_PAD], tl.float32)
        ss = tl.zeros([BLOCK_T], tl.float32)
        for i in range(steps):
            k = (split * steps + i) * BLOCK_K + offs_k
            mask_k = k < K
            x = tl.load(x_rows + k[None, :], mask=mask_t[:, None] & mask_k[None, :], other=0.0)
            w_ptr = FN + offs_n[None, :] * stride_fn + k[:, None]
            w_mask = mask_n[None, :] & mask_k[:, None]
            xf = x.to(tl.float32)
            ss += tl.sum(xf * xf, axis=1)
            if PRESPLIT:
                hi = tl.load(w_ptr, mask=w_mask, other=0.0)
                mid = tl.load(w_ptr + N * stride_fn, mask=w_mask, other=0.0)
                lo = tl.load(w_ptr + 2 * N * stride_fn, mask=w_mask, other=0.0)
            elif SPLIT_BF16:  # w = hi + mid + lo exactly; bf16 x bf16 products are exact in fp32
                w = tl.load(w_ptr, mask=w_mask, other=0.0).to(tl.float32)  # [BLOCK_K, N_PAD]; fp64 fn rounds
                hi = w.to(tl.bfloat16)
                r = w - hi.to(tl.float32)
                mid = r.to(tl.bfloat16)
                lo = (r - mid.to(tl.float32)).to(tl.bfloat16)
            else:
                w = tl.load(w_ptr, mask=w_mask, other=0.0).to(tl.float32)
            if SPLIT_BF16:
                if INTERPRET:  # its bf16 dots are wrong: the same exact products as fp32 dots
                    part = tl.dot(xf, lo.to(tl.float32), input_precision="ieee")
                    part = tl.dot(xf, mid.to(tl.float32), part, input_precision="ieee")
                    part = tl.dot(xf, hi.to(tl.float32), part, input_precision="ieee")
                else:
                    part = tl.dot(x, lo)
                    part = tl.dot(x, mid, part)
                    part = tl.dot(x, hi, part)
                acc += part
            else:
                acc = tl.dot(xf, w, acc, input_precision="ieee")
        if FINAL:
            rsqrt = tl.rsqrt(ss * inv_k + eps)
            out = OUT + offs_t.to(tl.int64)[:, None] * stride_ot + offs_n[None, :]
            tl.store(out, acc * rsqrt[:, None], mask=mask_t[:, None] & mask_n[None, :])
        else:
            row = split * T + offs_t
            tl.store(PACC + row[:, None] * N_PAD + offs_n[None, :], acc, mask=mask_t[:, None])
            tl.store(PSS + row, ss, mask=mask_t)

    @triton.jit
    def merge_logits_row(PACC, PSS, OUT, t, T, N, stride_ot, splits, inv_k, eps,
                         N_PAD: tl.constexpr, CHUNK: tl.constexpr):
        """Token t: adds the K splits' partials (CHUNK splits per load, a fixed order), then
        scales by rsqrt(mean square + eps) (the mean times 1 / K plus eps as one FMA)."""
        offs_s = tl.arange(0, CHUNK)
        offs_n = tl.arange(0, N_PAD)
        acc = tl.zeros([CHUNK, N_PAD], tl.float32)
        ss = tl.zeros([CHUNK], tl.float32)
        for s0 in range(0, splits, CHUNK):
            mask_s = s0 + offs_s < splits
            row = (s0 + offs_s) * T + t
            acc += tl.load(PACC + row[:, None] * N_PAD + offs_n[None, :], mask=mask_s[:, None], other=0.0)
            ss += tl.load(PSS + row, mask=mask_s, other=0.0)
        rsqrt = tl.rsqrt(tl.fma(tl.sum(ss, axis=0), inv_k, eps))
        tl.store(OUT + t.to(tl.int64) * stride_ot + offs_n, tl.sum(acc, axis=0) * rsqrt, mask=offs_n < N)

    @triton.jit
    def mix_logits_merge(PACC, PSS, OUT, T, N, stride_ot, splits, inv_k, eps,
                         N_PAD: tl.constexpr, CHUNK: tl.constexpr):
        """Token pid0: ``merge_logits_row``."""
        pdl_start()
        merge_logits_row(PACC, PSS, OUT, tl.program_id(0), T, N, stride_ot, splits, inv_k, eps, N_PAD, CHUNK)

    @triton.jit
    def merge_sinkhorn(PACC, PSS, MIX, SCALE, BASE, PRE, POST, COMB, T, N, stride_m, splits, inv_k, norm_eps,
                       iters, eps, N_PAD: tl.constexpr, CHUNK: tl.constexpr, HC: tl.constexpr,
                       INTERPRET: tl.constexpr):
        """Token pid0: ``merge_logits_row`` into MIX, then ``sinkhorn_tokens`` on that row, in one
        program (the barrier orders the row's stores before its loads): the two launches'
        operations, so their bits."""
        pdl_start()
        t = tl.program_id(0)
        merge_logits_row(PACC, PSS, MIX, t, T, N, stride_m, splits, inv_k, norm_eps, N_PAD, CHUNK)
        tl.debug_barrier()
        offs_t = t + tl.arange(0, 2)  # the token and a masked neighbour (a tile of 2)
        sinkhorn_tokens(MIX, SCALE, BASE, PRE, POST, COMB, offs_t, offs_t < t + 1, stride_m, iters, eps, HC,
                        INTERPRET)

    @triton.jit
    def split_sinkhorn(MIX, SCALE, BASE, PRE, POST, COMB, T, stride_m, iters, eps,
                       HC: tl.constexpr, BLOCK_T: tl.constexpr, INTERPRET: tl.constexpr):
        """BLOCK_T tokens: ``sinkhorn_tokens``."""
        pdl_start()
        offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
        sinkhorn_tokens(MIX, SCALE, BASE, PRE, POST, COMB, offs_t, offs_t < T, stride_m, iters, eps, HC, INTERPRET)

    @triton.jit
    def sinkhorn_tokens(MIX, SCALE, BASE, PRE, POST, COMB, offs_t, mask_t, stride_m, iters, eps,
                        HC: tl.constexpr, INTERPRET: tl.constexpr):
        """Tokens offs_t; pre and post as one [tokens, 2 HC] tile, comb as a
        [tokens, HC (source a), HC (destination b)] tile."""
        t64 = offs_t.to(tl.int64)
        row = MIX + t64 * stride_m
        # pre = sigmoid(m s0 + b) + eps, post = 2 sigmoid(m s1 + b); torch's sigmoid: 1 / (1 + exp(-z))
        c = tl.arange(0, 2 * HC)
        is_pre = (c < HC)[None, :]
        s01 = tl.where(c < HC, tl.load(SCALE).to(tl.float32), tl.load(SCALE + 1).to(tl.float32))
        z = tl.load(row[:, None] + c[None, :], mask=mask_t[:, None], other=0.0).to(tl.float32)
        z = z * s01[None, :] + tl.load(BASE + c).to(tl.float32)[None, :]
        if INTERPRET:
            e = tl.exp(-z)
        else:
            e = libdevice.exp(-z)
        sig = tl.div_rn(1.0, 1.0 + e)
        pp = tl.where(is_pre, sig + eps, 2.0 * sig)
        tl.store(PRE + t64[:, None] * HC + c[None, :], pp, mask=mask_t[:, None] & is_pre)
        tl.store(POST + t64[:, None] * HC + (c - HC)[None, :], pp, mask=mask_t[:, None] & ~is_pre)
        # comb: softmax over the destination + eps, column-normalised, then iters - 1 more passes
        h = tl.arange(0, HC)
        ab = h[:, None] * HC + h[None, :]
        z = tl.load(row[:, None, None] + 2 * HC + ab[None, :, :], mask=mask_t[:, None, None], other=0.0)
        x = z.to(tl.float32) * tl.load(SCALE + 2).to(tl.float32) + tl.load(BASE + 2 * HC + ab).to(tl.float32)[None]
        x = x - tl.max(x, axis=2)[:, :, None]
        if INTERPRET:
            x = tl.exp(x)
        else:
            x = libdevice.exp(x)
        x = tl.div_rn(x, tl.sum(x, axis=2)[:, :, None]) + eps
        x = tl.div_rn(x, tl.sum(x, axis=1)[:, None, :] + eps)
        for _ in range(iters - 1):
            x = tl.div_rn(x, tl.sum(x, axis=2)[:, :, None] + eps)
            x = tl.div_rn(x, tl.sum(x, axis=1)[:, None, :] + eps)
        tl.store(COMB + t64[:, None, None] * (HC * HC) + ab[None, :, :], x, mask=mask_t[:, None, None])

    @triton.jit
    def hc_pre(X, PRE, OUT, D, stride_xt, stride_xh, stride_pt, stride_ot,
               HC: tl.constexpr, BLOCK_D: tl.constexpr):
        """out = sum_a pre_a x_a for one token x BLOCK_D; products rounded, streams added in order."""
        pdl_start()
        t = tl.program_id(0).to(tl.int64)
        offs = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
        mask = offs < D
        x = X + t * stride_xt + offs
        p = PRE + t * stride_pt
        acc = tl.load(p) * tl.load(x, mask=mask, other=0.0).to(tl.float32)
        for a in tl.static_range(1, HC):
            acc += tl.load(p + a) * tl.load(x + a * stride_xh, mask=mask, other=0.0).to(tl.float32)
        tl.store(OUT + t * stride_ot + offs, acc.to(OUT.dtype.element_ty), mask=mask)

    @triton.jit
    def hc_post(Y, R, POST, COMB, OUT, D, stride_yt, stride_rt, stride_rh, stride_pt, stride_ct,
                stride_ot, stride_oh, HC: tl.constexpr, BLOCK_D: tl.constexpr):
        """out_b = post_b y + sum_a comb[a, b] r_a for one token x BLOCK_D, as an [HC (b), BLOCK_D] tile."""
        pdl_start()
        t = tl.program_id(0).to(tl.int64)
        offs = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
        mask = offs < D
        b = tl.arange(0, HC)
        r = R + t * stride_rt + offs
        comb = COMB + t * stride_ct + b  # row a of comb: comb + a * HC
        mixed = tl.load(comb)[:, None] * tl.load(r, mask=mask, other=0.0).to(tl.float32)[None, :]
        for a in tl.static_range(1, HC):
            r_a = tl.load(r + a * stride_rh, mask=mask, other=0.0).to(tl.float32)
            mixed += tl.load(comb + a * HC)[:, None] * r_a[None, :]
        y = tl.load(Y + t * stride_yt + offs, mask=mask, other=0.0).to(tl.float32)
        out = tl.load(POST + t * stride_pt + b)[:, None] * y[None, :] + mixed
        tl.store(OUT + t * stride_ot + b[:, None] * stride_oh + offs[None, :], out.to(OUT.dtype.element_ty),
                 mask=mask[None, :])

    return triton, mix_logits, mix_logits_merge, split_sinkhorn, merge_sinkhorn, hc_pre, hc_post


# ------------------------------------------------------------------------ hc_mix_logits ----
def rows(x: torch.Tensor, width: int) -> torch.Tensor:
    """x as [rows, width] with unit stride along width (a view when possible; also ``triton_hc_post_norm``'s)."""
    x2 = x.reshape(-1, width)
    return x2 if x2.stride(-1) == 1 or x2.shape[0] == 0 else x2.contiguous()


@dataclass(frozen=True)
class MixConfig:
    """hc_mix_logits tiling: ``block_t`` tokens x ``steps`` blocks of ``block_k`` per program;
    ``splits`` programs share a token tile (1: no merge kernel)."""

    block_t: int
    block_k: int
    steps: int
    splits: int
    num_warps: int
    num_stages: int


INVARIANT_MIX_STEPS = 4  # K blocks per program in batch-invariant mode (K=20480, bf16: 40 programs a token tile)


def mix_config(T: int, K: int, bf16: bool, sms: int) -> MixConfig:
    """Token tiles of 16 (the smallest dot) up to 64 tokens, else 64; K is split until there
    are about two programs per SM. bf16 blocks: 16 x 128 (4 warps) or 64 x 64 (4 warps, 4
    stages), the shapes that stay in registers (ptxas, sm_90a); fp32: 32-wide (FMA dots).
    Batch-invariant mode: 16-token tiles and a K split fixed by K alone, for every T."""
    if invariance.enabled():
        block_k = 128 if bf16 else 32
        n_k = -(-K // block_k)
        return MixConfig(16, block_k, INVARIANT_MIX_STEPS, -(-n_k // INVARIANT_MIX_STEPS), 4, 2)
    if T <= 64:
        block_t, block_k, warps, stages = 16, 128 if bf16 else 32, 4, 2
    elif bf16:  # 4 warps, 4 stages: 170 us at 8192 tokens where 8 warps, 3 stages took 321 (137 / 252 with
        # the weight's pieces loaded, ``PRESPLIT_FN``; floor 81; H200, session 16)
        block_t, block_k, warps, stages = 64, 64, 4, 4
    else:
        block_t, block_k, warps, stages = 64, 32, 8, 2
    n_k = -(-K // block_k)
    tiles = -(-T // block_t)
    splits = max(1, min(n_k, -(-2 * sms // tiles)))
    steps = -(-n_k // splits)
    return MixConfig(block_t, block_k, steps, -(-n_k // steps), warps, stages)


def hc_mix_logits(x: torch.Tensor, fn: torch.Tensor, norm_eps: float) -> torch.Tensor:
    """See ``reference.hc_mix_logits``: x [..., hc, D] -> [..., N] fp32."""
    N = fn.shape[0]
    out, partials = _mix_partials(x, fn, norm_eps)
    if partials is not None:
        _merge(out, partials, fn.shape[1], norm_eps)
    return out.view(*x.shape[:-2], N)


def _merge(out: torch.Tensor, partials: tuple, K: int, norm_eps: float) -> None:
    """``mix_logits_merge``: the partials of ``_mix_partials`` summed and scaled into out [T, N]."""
    _, _, k_merge, *_ = _kernels()
    pacc, pss, splits, n_pad = partials
    T, N = out.shape
    k_merge[(T,)](pacc, pss, out, T, N, out.stride(0), splits, 1.0 / K, float(norm_eps), N_PAD=n_pad,
                  CHUNK=MERGE_CHUNK, num_warps=4, **pdl_launch())


_PIECES: dict[int, tuple] = {}  # id(fn) -> (weakref to fn, fn._version, its pieces)


def fn_pieces(fn: torch.Tensor) -> torch.Tensor | None:
    """[3, N, K] bf16: hi + mid + lo = fn (as fp32) exactly, ``mix_logits``' in-kernel split computed once
    per weight (cached while the tensor lives and is not written to). None while a CUDA graph is being
    captured (the kernel then splits in place: the same bits): a graph would keep reading the pieces it
    was captured with after the weight is written in place (a weight update), and a capture cannot fill
    the cache (captured ops do not run)."""
    if fn.is_cuda and torch.cuda.is_current_stream_capturing():
        return None
    hit = _PIECES.get(id(fn))
    if hit is not None and hit[0]() is fn and hit[1] == fn._version:
        return hit[2]
    w = fn.float()
    hi = w.bfloat16()
    r = w - hi.float()
    mid = r.bfloat16()
    pieces = torch.stack([hi, mid, (r - mid.float()).bfloat16()])
    key = id(fn)
    _PIECES[key] = (weakref.ref(fn, lambda _, key=key: _PIECES.pop(key, None)), fn._version, pieces)
    return pieces


def _mix_partials(x: torch.Tensor, fn: torch.Tensor, norm_eps: float):
    """hc_mix_logits' product: (logits [T, N] fp32, None) when K is not split, else (the buffer
    the logits go to, (partial dots [splits, T, N_PAD], partial sums of squares [splits, T],
    splits, N_PAD)) for a merge."""
    N, K = fn.shape
    x2 = rows(x, K)
    fn = fn if fn.stride(-1) == 1 else fn.contiguous()
    T = x2.shape[0]
    out = torch.empty(T, N, device=x.device, dtype=torch.float32)
    if T == 0:
        return out, None
    bf16 = x2.dtype == torch.bfloat16
    triton, k_mix, *_ = _kernels()
    cfg = mix_config(T, K, bf16, sm_count(x.device))
    n_pad = max(16, _pow2(N))
    final = cfg.splits == 1
    if final:
        pacc = pss = out  # unused
    else:
        pacc = torch.empty(cfg.splits, T, n_pad, device=x.device, dtype=torch.float32)
        pss = torch.empty(cfg.splits, T, device=x.device, dtype=torch.float32)
    inv_k = 1.0 / K  # torch's mean multiplies by 1/K
    pieces = fn_pieces(fn) if bf16 and PRESPLIT_FN and T > PRESPLIT_MIN_TOKENS else None
    presplit = pieces is not None
    w = pieces if presplit else fn
    k_mix[(triton.cdiv(T, cfg.block_t), cfg.splits)](
        x2, w, out, pacc, pss, T, N, K, x2.stride(0), w.stride(-2), out.stride(0), cfg.steps, inv_k, float(norm_eps),
        BLOCK_T=cfg.block_t, BLOCK_K=cfg.block_k, N_PAD=n_pad, SPLIT_BF16=bf16, FINAL=final, INTERPRET=interpreting(),
        PRESPLIT=presplit, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_launch())
    return out, None if final else (pacc, pss, cfg.splits, n_pad)


def supports_mix_logits(x: torch.Tensor, fn: torch.Tensor, norm_eps: float) -> bool:
    return (x.is_cuda and fn.is_cuda and x.dim() >= 2 and fn.dim() == 2 and x.dtype in FLOAT_DTYPES
            and fn.dtype in (torch.float32, torch.float64, torch.bfloat16) and fn.shape[0] <= 64
            and fn.shape[1] == x.shape[-2] * x.shape[-1] and triton_available())


# -------------------------------------------------------------------- hc_split_sinkhorn ----
def hc_split_sinkhorn(mixes: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, hc: int, iters: int,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """See ``reference.hc_split_sinkhorn``: mixes [..., (2 + hc) * hc] -> pre, post [..., hc], comb [..., hc, hc]."""
    lead = mixes.shape[:-1]
    m = rows(mixes, mixes.shape[-1])
    T = m.shape[0]
    pre, post, comb = _empty_mixes(T, hc, mixes.device)
    if T:
        triton, _, _, k_sinkhorn, *_ = _kernels()
        k_sinkhorn[(triton.cdiv(T, SINKHORN_BLOCK_T),)](
            m, scale.contiguous(), base.contiguous(), pre, post, comb, T, m.stride(0), int(iters), float(eps),
            HC=hc, BLOCK_T=SINKHORN_BLOCK_T, INTERPRET=interpreting(), num_warps=4, enable_fp_fusion=False,
            **pdl_launch())
    return pre.view(*lead, hc), post.view(*lead, hc), comb.view(*lead, hc, hc)


# ------------------------------------------------------------------------------ hc_mixes ----
def hc_mixes(x: torch.Tensor, fn: torch.Tensor, norm_eps: float, scale: torch.Tensor, base: torch.Tensor, hc: int,
             iters: int, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """See ``reference.hc_mixes``. Where K is split (up to ``MERGE_SINKHORN_TOKENS`` tokens), the
    merge of the partials and the Sinkhorn passes run in one launch (``merge_sinkhorn``), not two."""
    logits, partials = _mix_partials(x, fn, norm_eps)
    if partials is not None and (not MERGE_SINKHORN or logits.shape[0] > MERGE_SINKHORN_TOKENS):  # two launches
        _merge(logits, partials, fn.shape[1], norm_eps)
        partials = None
    if partials is None:
        return hc_split_sinkhorn(logits.view(*x.shape[:-2], -1), scale, base, hc, iters, eps)
    pacc, pss, splits, n_pad = partials
    T, N = logits.shape
    pre, post, comb = _empty_mixes(T, hc, x.device)
    k_merge_sinkhorn = _kernels()[4]
    k_merge_sinkhorn[(T,)](pacc, pss, logits, scale.contiguous(), base.contiguous(), pre, post, comb, T, N,
                           logits.stride(0), splits, 1.0 / fn.shape[1], float(norm_eps), int(iters), float(eps),
                           N_PAD=n_pad, CHUNK=MERGE_CHUNK, HC=hc, INTERPRET=interpreting(), num_warps=4,
                           enable_fp_fusion=False, **pdl_launch())
    lead = x.shape[:-2]
    return pre.view(*lead, hc), post.view(*lead, hc), comb.view(*lead, hc, hc)


def supports_mixes(x: torch.Tensor, fn: torch.Tensor, norm_eps: float, scale: torch.Tensor, base: torch.Tensor,
                   hc: int, iters: int, eps: float) -> bool:
    return supports_mix_logits(x, fn, norm_eps) and _sinkhorn_fits(fn.shape[0], scale, base, hc, iters)


def supports_sinkhorn(mixes: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, hc: int, iters: int,
                      eps: float) -> bool:
    return mixes.is_cuda and _sinkhorn_fits(mixes.shape[-1], scale, base, hc, iters)


def _sinkhorn_fits(width: int, scale: torch.Tensor, base: torch.Tensor, hc: int, iters: int) -> bool:
    """The Sinkhorn kernel takes mixes ``width`` wide with these parameters (CUDA)."""
    return (scale.is_cuda and base.is_cuda and 1 <= hc <= 16 and hc & (hc - 1) == 0 and iters >= 1
            and width == (2 + hc) * hc and base.numel() == (2 + hc) * hc and scale.numel() == 3
            and triton_available())


def _empty_mixes(T: int, hc: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """pre [T, hc], post [T, hc], comb [T, hc, hc] fp32, to be written by a Sinkhorn kernel."""
    return (torch.empty(T, hc, device=device, dtype=torch.float32),
            torch.empty(T, hc, device=device, dtype=torch.float32),
            torch.empty(T, hc, hc, device=device, dtype=torch.float32))


# ------------------------------------------------------------------------ hc_pre / post ----
def block_d(T: int, D: int) -> int:
    """Small blocks when there are few tokens (programs for every SM), 1024 otherwise.
    Elementwise along D, so the choice never changes a value."""
    return min(_pow2(D), 256 if T <= 64 else 1024)


def hc_pre(x: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    """See ``reference.hc_pre``: x [..., hc, D], pre [..., hc] fp32 -> [..., D] in x's dtype."""
    hc, D = x.shape[-2:]
    x3 = x.reshape(-1, hc, D)
    x3 = x3 if x3.stride(-1) == 1 else x3.contiguous()
    p = rows(pre, hc)
    T = x3.shape[0]
    out = torch.empty(T, D, device=x.device, dtype=x.dtype)
    if T and D:
        triton, *_, k_pre, _ = _kernels()
        bd = block_d(T, D)
        k_pre[(T, triton.cdiv(D, bd))](x3, p, out, D, x3.stride(0), x3.stride(1), p.stride(0), out.stride(0),
                                        HC=hc, BLOCK_D=bd, num_warps=4, enable_fp_fusion=False, **pdl_launch())
    return out.view(*x.shape[:-2], D)


def supports_pre(x: torch.Tensor, pre: torch.Tensor) -> bool:
    return (x.is_cuda and pre.is_cuda and x.dim() >= 2 and x.dtype in FLOAT_DTYPES and pre.dtype == torch.float32
            and pre.shape == x.shape[:-1] and triton_available())


def post_operands(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor,
                  comb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``hc_post``'s operands as its kernel reads them, unit stride along their last dims: y [T, D], residual
    [T, hc, D], post [T, hc], comb [T, hc * hc] (also ``triton_hc_post_norm``'s)."""
    hc, D = residual.shape[-2:]
    r = residual.reshape(-1, hc, D)
    return (rows(y, D), r if r.stride(-1) == 1 else r.contiguous(), rows(post, hc),
            rows(comb.reshape(-1, hc * hc), hc * hc))


def hc_post(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """See ``reference.hc_post``: y [..., D], residual [..., hc, D] -> [..., hc, D] in y's dtype."""
    hc, D = residual.shape[-2:]
    y2, r, p, c = post_operands(y, residual, post, comb)
    T = y2.shape[0]
    out = torch.empty(T, hc, D, device=y.device, dtype=y.dtype)
    if T and D:
        triton, *_, k_post = _kernels()
        bd = block_d(T, D)
        k_post[(T, triton.cdiv(D, bd))](y2, r, p, c, out, D, y2.stride(0), r.stride(0), r.stride(1), p.stride(0),
                                         c.stride(0), out.stride(0), out.stride(1), HC=hc, BLOCK_D=bd, num_warps=4,
                                         enable_fp_fusion=False, **pdl_launch())
    return out.view(*residual.shape)


def supports_post(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> bool:
    if not (y.is_cuda and residual.is_cuda and post.is_cuda and comb.is_cuda and residual.dim() >= 2):
        return False
    hc = residual.shape[-2]
    return (y.dtype in FLOAT_DTYPES and residual.dtype in FLOAT_DTYPES and post.dtype == comb.dtype == torch.float32
            and hc & (hc - 1) == 0 and y.shape == residual.shape[:-2] + residual.shape[-1:]
            and post.shape == residual.shape[:-1] and comb.shape == residual.shape[:-1] + (hc,)
            and triton_available())


register("hc_mix_logits", "triton", hc_mix_logits, supports=supports_mix_logits, priority=10)
register("hc_split_sinkhorn", "triton", hc_split_sinkhorn, supports=supports_sinkhorn, priority=10)
register("hc_mixes", "triton", hc_mixes, supports=supports_mixes, priority=10)
register("hc_pre", "triton", hc_pre, supports=supports_pre, priority=10)
register("hc_post", "triton", hc_post, supports=supports_post, priority=10)
