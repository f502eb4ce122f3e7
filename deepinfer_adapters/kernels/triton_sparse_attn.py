"""Triton backend of ``sparse_attn`` (CUDA tensors only; registered as "triton").

Same signature and meaning as ``kernels.reference.sparse_attn``: q [S, H, d], one
latent kv [N, d] (K = V), per-head sink logit [H], idx [S, K] (-1 = skip):
o = sum_k e^{l_k} kv_k / (sum_k e^{l_k} + e^{sink_h}), l = scale * q.k.

Design. The gathered kv rows are shared by all heads of a query, so heads are
the M dimension of both products (as in FlashMLA's sparse kernels):
- bf16 q and kv (the model's numerics): one program = one query x ``block_h``
  heads. Per block of 64 indices it gathers one [64, d] tile of rows, used both
  as K (scores [block_h, 64] = q @ tile^T, one tensor-core dot over all of d) and
  as V (acc [block_h, d] += p @ tile): each row is read once per program, fp32
  accumulation, q kept in registers for the whole loop.
- Online softmax over blocks of 64 indices (``reference.SPARSE_ATTN_BLOCK``), fp32
  running max / denominator / accumulator, running max starting at -1e30 as in
  the reference, so a row with no valid index yields exactly 0.
- ``Config.split_blocks`` > 0 (split-K, off by default): each query's indices are
  cut into chunks of that many blocks, one program each, and a second kernel
  merges the partial (max, denominator, accumulator) triples. More programs for
  small batches (2.4-3.3x faster at S <= 8), but partials cost S x chunks x H x d x 8 B
  of traffic (1.7-3.5x slower for an 8k prefill) and p is rounded against each
  chunk's own running max (see Numerics).
- Any other dtypes (float32 numerics): a second kernel with exact fp32 dots
  (``input_precision="ieee"``), d in chunks, output dims split over programs.
- Block shapes depend on H and d only, never on S: a query's result does not
  depend on how many others share the call (tested bitwise). Different block
  shapes pick different tensor-core instructions, whose fp32 sums differ in the
  last bits, which is why the choice cannot follow S.
- Tried and dropped: issuing the next block's index and row loads before this
  block's math by hand (2-3x slower: register pressure, and it loses Triton's own
  pipelining); splitting the output dims over programs with recomputed scores (no
  faster than splitting heads).

Numerics against the reference:
- Scores: the reference sums q.k in fp64 and rounds once to fp32; here bf16
  products are exact in fp32 and summed in fp32 (tensor-core order), so scores
  differ by a few fp32 ulps (~1e-7 relative).
- Probabilities: with ``probs_bf16`` the reference rounds p = exp(l - running max)
  to bf16 before P @ V, the running max being the one after each block of 64
  indices. This kernel uses the same blocks of 64 at the same offsets, so it
  rounds the same p against the same running max; only the few fp32 ulps of the
  scores can move a p across a bf16 rounding boundary (a 2^-9 relative step on
  that one p). The denominator uses the unrounded fp32 p, as the reference does.
  Without ``probs_bf16`` p enters P @ V as two bf16 terms (p_hi + residual), i.e.
  to ~2^-17 relative. Under split-K, p is rounded against the running max of its
  chunk instead: the same 2^-9 rounding at other points, ~2e-3 relative on the
  output (the size of switching between bf16 and fp32 probabilities).
- P @ V sums exact bf16 x bf16 products in fp32 (the reference: in fp64, rounded
  to fp32). The output is cast to q's dtype, so for bf16 outputs the two agree to
  about one bf16 ulp (tests/gpu/test_sparse_attn_gpu.py measures it).
- exp is Triton's (``ex2.approx`` based, ~2 ulp) against the reference's fp64 exp
  rounded to fp32.

Triton is imported lazily (importing ``deepinfer_adapters`` needs no GPU stack).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import invariance, register
from deepinfer_adapters.kernels.reference import SPARSE_ATTN_BLOCK
from deepinfer_adapters.kernels.triton_support import pdl_launch, triton_available

BLOCK_K = SPARSE_ATTN_BLOCK  # indices per online-softmax block: the reference's rounding points
# split-K's merge: output dims a program (0: all of d). A decode query's 64 heads x 512 dims on 4 programs read
# 10 partials of 32 KB each in turn (~330 KB through one SM); split over d, 32 programs read 41 KB each. Elementwise
# along d: the same bits either way
MERGE_BLOCK_D = 64
# how the merge reads its partials (``sparse_attn_merge``'s LOADS): "loop" (one split after the other, each waiting
# out its L2 round trip: the merge ended ~4.3 us after the attention at a decode query's 10 splits, session 35's B=1
# timeline) or "unrolled" (the same sums in the same order: the same bits, the loads issued ahead). H200, V4.1 at
# real widths, 7 alternating rounds (session 35, part s35c): B=1 1.554 against 1.557 / 1.564 ms (paired -9.4 us, 6
# of 7; B=8 does not split, 4 queries at most). All partials in one load, summed in Triton's order (other bits):
# +3 us at B=1 (removed; code at d58e615)
MERGE_LOADS = "unrolled"


@dataclass(frozen=True)
class Config:
    """Block shapes. bf16 kernel: ``block_h`` heads x the whole d per program (block_dv,
    block_d unused). fp32 kernel: ``block_h`` heads x ``block_dv`` output dims, scores
    accumulated over d in chunks of ``block_d``."""

    block_h: int  # heads per program (>= 16: tensor-core M)
    num_warps: int
    num_stages: int
    block_dv: int = 64
    block_d: int = 32
    split_blocks: int = 0  # bf16 kernel: > 0 splits each query's indices into chunks of this many
    #                        blocks of 64, one program each, merged by a second kernel (split-K)


_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def supports(q: torch.Tensor, kv: torch.Tensor, sink: torch.Tensor, idx: torch.Tensor, scale: float,
             probs_bf16: bool = True) -> bool:
    return (q.is_cuda and kv.is_cuda and q.dim() == 3 and kv.dim() == 2 and idx.dim() == 2
            and q.shape[-1] == kv.shape[-1] and q.shape[0] == idx.shape[0] and q.shape[-1] <= 512
            and q.dtype in _DTYPES and kv.dtype in _DTYPES and triton_available())


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def uses_bf16_kernel(q: torch.Tensor, kv: torch.Tensor) -> bool:
    return q.dtype == kv.dtype == torch.bfloat16


def default_config(H: int, d: int, bf16: bool = True) -> Config:
    """Block shapes by widths only, never by the number of queries: a query's result
    must not depend on how many others share the call (different tiles pick different
    tensor-core instructions, whose fp32 sums differ in the last bits)."""
    if not bf16:  # exact fp32 dots (CUDA-core FMAs): small tiles
        return Config(block_h=16, num_warps=4, num_stages=1, block_dv=min(_pow2(d), 64), block_d=min(_pow2(d), 32))
    # 32 heads x 4 warps: the compromise among fixed shapes (BENCHMARKS.md):
    # about 30% at most behind the best one at each measured size (decode S = 1..128, prefill 8k);
    # 16 heads is 50% behind at S >= 128, 64 heads x 8 warps 60% behind at S = 1.
    return Config(block_h=32, num_warps=4, num_stages=2)


@functools.cache
def _kernels():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def sparse_attn_bf16(Q, KV, SINK, IDX, OUT, PM, PL, PACC, scale,
                         stride_qs, stride_qh, stride_kvn, stride_is, stride_os, stride_oh,
                         H, D, K, NS,
                         BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, D_PAD: tl.constexpr,
                         PROBS_BF16: tl.constexpr, SPLIT_K: tl.constexpr):
        """bf16 q and kv: one [BLOCK_K, d] tile of gathered rows per step serves as K and V.
        SPLIT_K > 0: this program covers indices [pid2 * SPLIT_K, +SPLIT_K) and writes its
        running max, denominator and unnormalised accumulator to PM / PL / PACC."""
        pdl_start()
        s = tl.program_id(0).to(tl.int64)
        offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
        mask_h = offs_h < H
        offs_d = tl.arange(0, D_PAD)
        mask_d = offs_d < D
        offs_k = tl.arange(0, BLOCK_K)
        q = tl.load(Q + s * stride_qs + offs_h[:, None] * stride_qh + offs_d[None, :],
                    mask=mask_h[:, None] & mask_d[None, :], other=0.0)
        idx_row = IDX + s * stride_is
        m_i = tl.full([BLOCK_H], -1e30, tl.float32)
        l_i = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, D_PAD], tl.float32)
        if SPLIT_K > 0:
            k_lo = tl.program_id(2) * SPLIT_K
            k_hi = tl.minimum(K, k_lo + SPLIT_K)
        else:
            k_lo = 0
            k_hi = K
        for k0 in range(k_lo, k_hi, BLOCK_K):
            kk = k0 + offs_k
            ids = tl.load(idx_row + kk, mask=kk < k_hi, other=-1)
            valid = ids >= 0
            kv = tl.load(KV + ids.to(tl.int64)[:, None] * stride_kvn + offs_d[None, :],
                         mask=valid[:, None] & mask_d[None, :], other=0.0)
            scores = tl.dot(q, tl.trans(kv))
            scores = tl.where(valid[None, :], scores * scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(scores, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(scores - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            p_hi = p.to(tl.bfloat16)
            acc = tl.dot(p_hi, kv, acc)
            if not PROBS_BF16:  # fp32 probabilities: add the bf16 residual (p to ~2^-17)
                acc = tl.dot((p - p_hi.to(tl.float32)).to(tl.bfloat16), kv, acc)
            m_i = m_new
        if SPLIT_K > 0:
            part = (s * NS + tl.program_id(2)) * H + offs_h  # partials are [S, NS, H(, D)] fp32
            tl.store(PM + part, m_i, mask=mask_h)
            tl.store(PL + part, l_i, mask=mask_h)
            tl.store(PACC + part[:, None] * D + offs_d[None, :], acc, mask=mask_h[:, None] & mask_d[None, :])
        else:
            sink = tl.load(SINK + offs_h, mask=mask_h, other=0.0)
            denom = l_i + tl.exp(sink - m_i)  # no valid index: m_i = -1e30, denom = inf, out = 0
            out = acc / denom[:, None]
            o_ptrs = OUT + s * stride_os + offs_h[:, None] * stride_oh + offs_d[None, :]
            tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=mask_h[:, None] & mask_d[None, :])

    @triton.jit
    def sparse_attn_merge(PM, PL, PACC, SINK, OUT, F, sign, stride_os, stride_oh, H, D, splits, NS: tl.constexpr,
                          BLOCK_H: tl.constexpr, D_PAD: tl.constexpr, LOADS: tl.constexpr, ROPE_RD: tl.constexpr):
        """Merge split-K partials: o = sum_j e^(m_j-M) acc_j / (sum_j e^(m_j-M) l_j + e^(sink-M)), for
        output dims [pid2 * D_PAD, +D_PAD) (each program recomputes its heads' M and denominator: the same
        values in every program). The NS (= ``splits``) splits' partials are added in split order
        (``MERGE_LOADS``): "unrolled", a loop of a constant trip count, which the compiler unrolls so that the loads
        are issued ahead of the sums; "loop", a loop over the runtime count, each split's loads after the last's
        sums. ROPE_RD > 0: the output's last ROPE_RD dims rotated as ``apply_rope`` (F the (cos, sin) pairs [S,
        ROPE_RD], ``sign`` -1 for the conjugate) rotates the stored output, with its bits: rounded to OUT's dtype
        first, then the same fp32 arithmetic (``sparse_attn``'s ``out_freqs``)."""
        pdl_start()
        s = tl.program_id(0).to(tl.int64)
        offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
        mask_h = offs_h < H
        offs_d = tl.program_id(2) * D_PAD + tl.arange(0, D_PAD)
        mask_d = offs_d < D
        big_m = tl.full([BLOCK_H], -1e30, tl.float32)
        for j in range(0, splits if LOADS == "loop" else NS):
            big_m = tl.maximum(big_m, tl.load(PM + (s * NS + j) * H + offs_h, mask=mask_h, other=-1e30))
        l_sum = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, D_PAD], tl.float32)
        for j in range(0, splits if LOADS == "loop" else NS):
            part = (s * NS + j) * H + offs_h
            w = tl.exp(tl.load(PM + part, mask=mask_h, other=-1e30) - big_m)
            l_sum += w * tl.load(PL + part, mask=mask_h, other=0.0)
            a = tl.load(PACC + part[:, None] * D + offs_d[None, :], mask=mask_h[:, None] & mask_d[None, :],
                        other=0.0)
            acc += w[:, None] * a
        sink = tl.load(SINK + offs_h, mask=mask_h, other=0.0)
        out = acc / (l_sum + tl.exp(sink - big_m))[:, None]
        if ROPE_RD > 0:
            # pairs never straddle programs (D_PAD and D - ROPE_RD even); j: a pair's place among the rotated ones
            xr, xi = tl.split(tl.reshape(out.to(OUT.dtype.element_ty).to(tl.float32), (BLOCK_H, D_PAD // 2, 2)))
            j = tl.program_id(2) * (D_PAD // 2) - (D - ROPE_RD) // 2 + tl.arange(0, D_PAD // 2)
            rotated = (j >= 0) & (j < ROPE_RD // 2)
            fr = tl.load(F + s * ROPE_RD + 2 * j, mask=rotated, other=1.0)
            fi = tl.load(F + s * ROPE_RD + 2 * j + 1, mask=rotated, other=0.0) * sign
            re = xr * fr[None, :] - xi * fi[None, :]  # apply_rope's expressions: its fused multiply-adds too
            im = xr * fi[None, :] + xi * fr[None, :]
            out = tl.reshape(tl.join(tl.where(rotated[None, :], re, xr), tl.where(rotated[None, :], im, xi)),
                             (BLOCK_H, D_PAD))
        o_ptrs = OUT + s * stride_os + offs_h[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=mask_h[:, None] & mask_d[None, :])

    @triton.jit
    def sparse_attn_f32(Q, KV, SINK, IDX, OUT, scale,
                        stride_qs, stride_qh, stride_kvn, stride_is, stride_os, stride_oh,
                        H, D, K,
                        BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr,
                        D_PAD: tl.constexpr, BLOCK_DV: tl.constexpr, PROBS_BF16: tl.constexpr):
        """Any other dtypes: exact fp32 dots, d in chunks, output dims split over programs."""
        pdl_start()
        s = tl.program_id(0).to(tl.int64)
        offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
        mask_h = offs_h < H
        offs_dv = tl.program_id(2) * BLOCK_DV + tl.arange(0, BLOCK_DV)
        mask_dv = offs_dv < D
        offs_k = tl.arange(0, BLOCK_K)
        q_rows = Q + s * stride_qs + offs_h[:, None] * stride_qh
        idx_row = IDX + s * stride_is
        m_i = tl.full([BLOCK_H], -1e30, tl.float32)
        l_i = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_DV], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + offs_k
            ids = tl.load(idx_row + kk, mask=kk < K, other=-1)
            valid = ids >= 0
            rows = KV + ids.to(tl.int64)[:, None] * stride_kvn
            scores = tl.zeros([BLOCK_H, BLOCK_K], tl.float32)
            for d0 in tl.static_range(0, D_PAD, BLOCK_D):
                offs_d = d0 + tl.arange(0, BLOCK_D)
                mask_d = offs_d < D
                qc = tl.load(q_rows + offs_d[None, :], mask=mask_h[:, None] & mask_d[None, :], other=0.0)
                kc = tl.load(rows + offs_d[None, :], mask=valid[:, None] & mask_d[None, :], other=0.0)
                scores += tl.dot(qc.to(tl.float32), tl.trans(kc.to(tl.float32)), input_precision="ieee")
            scores = tl.where(valid[None, :], scores * scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(scores, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(scores - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            if PROBS_BF16:
                p = p.to(tl.bfloat16).to(tl.float32)
            v = tl.load(rows + offs_dv[None, :], mask=valid[:, None] & mask_dv[None, :], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
            m_i = m_new
        sink = tl.load(SINK + offs_h, mask=mask_h, other=0.0)
        denom = l_i + tl.exp(sink - m_i)
        out = acc / denom[:, None]
        o_ptrs = OUT + s * stride_os + offs_h[:, None] * stride_oh + offs_dv[None, :]
        tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=mask_h[:, None] & mask_dv[None, :])

    return triton, sparse_attn_bf16, sparse_attn_merge, sparse_attn_f32


def sparse_attn(q: torch.Tensor, kv: torch.Tensor, sink: torch.Tensor, idx: torch.Tensor, scale: float,
                probs_bf16: bool = True, *, config: Config | None = None,
                out_freqs: torch.Tensor | None = None) -> torch.Tensor:
    """See the module doc and ``reference.sparse_attn``. Returns [S, H, d] in q's dtype. ``out_freqs`` [S, rd/2]
    complex64: the output's last rd dims rotated by their conjugate, ``apply_rope(out, out_freqs, inverse=True)``'s
    bits (in split-K's merge where it runs, else by the RoPE kernel after)."""
    S, H, d = q.shape
    if kv.shape[-1] != d or idx.shape[0] != S:
        raise ValueError(f"sparse_attn: q {list(q.shape)}, kv {list(kv.shape)}, idx {list(idx.shape)} do not match")
    dev = q.device
    q = q if q.stride(-1) == 1 else q.contiguous()
    kv = kv if kv.stride(-1) == 1 else kv.contiguous()
    idx = idx.to(dev)  # the model builds index rows on the host
    idx = idx if idx.stride(-1) == 1 else idx.contiguous()
    if idx.dtype not in (torch.int32, torch.int64):
        idx = idx.long()
    sink = sink.to(device=dev, dtype=torch.float32).contiguous()
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if S == 0:
        return out
    bf16 = uses_bf16_kernel(q, kv)
    cfg = config or default_config(H, d, bf16)
    triton, k_bf16, k_merge, k_f32 = _kernels()
    K = idx.shape[1]
    strides = (q.stride(0), q.stride(1), kv.stride(0), idx.stride(0), out.stride(0), out.stride(1))
    if bf16:
        split_k = cfg.split_blocks * BLOCK_K
        ns = max(1, triton.cdiv(K, split_k)) if split_k else 1
        if split_k and ns > 1:
            pm = torch.empty(S, ns, H, device=dev, dtype=torch.float32)
            pl = torch.empty_like(pm)
            pacc = torch.empty(S, ns, H, d, device=dev, dtype=torch.float32)
        else:
            split_k, pm = 0, None
            pl = pacc = out  # unused
        grid = (S, triton.cdiv(H, cfg.block_h), ns)
        k_bf16[grid](q, kv, sink, idx, out, pm if split_k else out, pl, pacc, float(scale), *strides, H, d, K, ns,
                     BLOCK_H=cfg.block_h, BLOCK_K=BLOCK_K, D_PAD=_pow2(d), PROBS_BF16=bool(probs_bf16),
                     SPLIT_K=split_k, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_launch())
        if split_k:
            merge_d = min(MERGE_BLOCK_D or _pow2(d), _pow2(d))
            rope = out_freqs is not None and merge_d % 2 == 0 and d % 2 == 0
            f = torch.view_as_real(out_freqs.resolve_conj()).reshape(S, -1).contiguous() if rope else sink
            k_merge[(S, triton.cdiv(H, 16), triton.cdiv(d, merge_d))](
                pm, pl, pacc, sink, out, f, -1.0, out.stride(0), out.stride(1), H, d, ns, NS=ns, BLOCK_H=16,
                D_PAD=merge_d, LOADS=MERGE_LOADS, ROPE_RD=f.shape[-1] if rope else 0, num_warps=4, **pdl_launch())
            out_freqs = None if rope else out_freqs
    else:
        args = (q, kv, sink, idx, out, float(scale), *strides, H, d, K)
        dv = min(cfg.block_dv, _pow2(d))
        k_f32[(S, triton.cdiv(H, cfg.block_h), triton.cdiv(d, dv))](
            *args, BLOCK_H=cfg.block_h, BLOCK_K=BLOCK_K, BLOCK_D=min(cfg.block_d, _pow2(d)), D_PAD=_pow2(d),
            BLOCK_DV=dv, PROBS_BF16=bool(probs_bf16), num_warps=cfg.num_warps, num_stages=cfg.num_stages,
            **pdl_launch())
    if out_freqs is not None:  # no merge ran (or it could not rotate): the RoPE kernel, in place
        out = kernels.apply_rope(out, out_freqs, inverse=True, overwrite=True)
    return out


register("sparse_attn", "triton", sparse_attn, supports=supports, priority=10)

# Decode outside batch-invariant mode: up to this many queries a call splits each query's indices over
# programs (``DECODE_SPLIT_CONFIG``: 16 heads x one block of 64 indices a program, then the merge), above
# FlashMLA, whose prefill kernel runs one program per query for all 64 heads, so one decode query keeps
# one SM busy (H200, bench_sparse_attn.py, session 17: 13.4 against 20.1 us at one query; at 8 queries
# 18.4 for the best split against 20.3; V4.1 B=1 2.45 -> 2.39 ms). Split-K rounds p against each split's
# running max (see Numerics), so a query's bits would differ between decode and a recomputing prefill:
# never in batch-invariant mode. 0: off.
DECODE_SPLIT_QUERIES = 4
DECODE_SPLIT_CONFIG = Config(block_h=16, num_warps=4, num_stages=2, split_blocks=1)


def supports_decode_split(q: torch.Tensor, kv: torch.Tensor, sink: torch.Tensor, idx: torch.Tensor, scale: float,
                          probs_bf16: bool = True, **_) -> bool:
    return (0 < q.shape[0] <= DECODE_SPLIT_QUERIES and not invariance.enabled() and uses_bf16_kernel(q, kv)
            and supports(q, kv, sink, idx, scale, probs_bf16))


def sparse_attn_decode_split(q: torch.Tensor, kv: torch.Tensor, sink: torch.Tensor, idx: torch.Tensor, scale: float,
                             probs_bf16: bool = True) -> torch.Tensor:
    """``sparse_attn`` with ``DECODE_SPLIT_CONFIG`` (a few decode queries, outside batch-invariant mode)."""
    return sparse_attn(q, kv, sink, idx, scale, probs_bf16, config=DECODE_SPLIT_CONFIG)


register("sparse_attn", "triton_decode_split", sparse_attn_decode_split, supports=supports_decode_split,
         priority=30)  # above FlashMLA (20)

# a decode step's output rotated back (the output path's inverse RoPE) in split-K's merge instead of a kernel of its
# own after it: one launch less on a layer's chain at B <= DECODE_SPLIT_QUERIES; the same bits
# (``sparse_attn_inverse_rope``). False: the composed op (the merge, then the RoPE kernel). H200, V4.1 at real widths,
# 7 alternating rounds (session 36, part s36d): B=1 -1.3 us (4 of 7), neutral -- wo_a's GEMV, launched early under
# PDL, ended ~12.9 us after its input either way (timelines s35d, s36d); kept for the launch it saves eager steps
MERGE_INVERSE_ROPE = True


def supports_inverse_rope_decode_split(q: torch.Tensor, kv: torch.Tensor, sink: torch.Tensor, idx: torch.Tensor,
                                       scale: float, freqs: torch.Tensor, probs_bf16: bool = True) -> bool:
    """Where ``sparse_attn`` would take this backend's split decode (not where a test or a user pinned another)."""
    return (MERGE_INVERSE_ROPE and freqs.is_cuda and freqs.dtype == torch.complex64 and freqs.dim() == 2
            and freqs.shape[0] == q.shape[0] and 2 * freqs.shape[1] <= q.shape[-1]
            and kernels.chosen("sparse_attn", q, kv, sink, idx, scale, probs_bf16) == "triton_decode_split")


def sparse_attn_inverse_rope_decode_split(q: torch.Tensor, kv: torch.Tensor, sink: torch.Tensor, idx: torch.Tensor,
                                          scale: float, freqs: torch.Tensor, probs_bf16: bool = True) -> torch.Tensor:
    return sparse_attn(q, kv, sink, idx, scale, probs_bf16, config=DECODE_SPLIT_CONFIG, out_freqs=freqs)


register("sparse_attn_inverse_rope", "triton_decode_split", sparse_attn_inverse_rope_decode_split,
         supports=supports_inverse_rope_decode_split, priority=30)
