"""Triton backend of ``linear`` for bf16 weights with fp32 activations (registered as
"triton"): in batch-invariant mode for every row count, otherwise for decode's few rows.

Where it matters: the LM head (129280 x 5120 bf16) and the MoE gate. In batch-invariant
mode cuBLAS's kernel choice by row count is ruled out and the reference would evaluate the
GEMM in fp64, converting the whole weight to fp64 on every call (the head: 1.3 GB read,
5.3 GB written and read again per decode step). Outside it, up to ``DECODE_ROWS`` rows this
kernel is one launch (plus the split sum) where ``cublas_split`` is ~9 small kernels around
cuBLAS: the gate at one row ~5 us against ~16 (H200 profile, session 6); from more rows
``cublas_split`` runs.

Arithmetic (as ``cublas_split``): x = hi + lo with hi = bf16(x), lo = bf16(x - hi); the
products hi w and lo w are exact in fp32 and accumulate in fp32 over K. When x's values are
bf16 (the head and gate inputs: a bf16 activation cast up), lo is 0 and the result is the
fp32 GEMM up to summation order. Invariance: one tile shape for every row count, K walked
in the same order, each row of a tile computed by the same tensor-core instructions
wherever it sits, so a row's result never depends on the other rows of the call
(tests/gpu/test_linear_gpu.py). A few column tiles (the MoE gate) split K, by N and K
alone, the partials added in split order. The row tile alone follows the row count (``row_tile``):
16 rows for a decode step, where a 64-row tile's two products per step (hi and lo) cost
as much as reading the head's weight; the H200 gives a row the same bits in 16- and 64-row
tiles (the same test: rows alone against 300 rows batched).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from deepinfer_adapters.kernels import invariance, register
from deepinfer_adapters.kernels.triton_fp8_gemm import TARGET_PROGRAMS, split_k, sum_splits
from deepinfer_adapters.kernels.triton_support import pdl_launch, triton_available


@dataclass(frozen=True)
class LinearConfig:
    """Tiles (the row tile follows M: ``row_tile``); any choice is batch-invariant, as long as
    it does not depend on the rows (benchmarks/bench_invariant_linear.py times a few)."""

    block_n: int = 128
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 3
    programs: int = TARGET_PROGRAMS  # split K (by N and K alone) while fewer column tiles than this
    min_steps: int = 4  # K steps a split keeps at least (the gate: 10 splits of 512, not 40 of 128)


# H200 (benchmarks/bench_invariant_linear.py, session 5): the head at 1 row 304 us with 128-deep
# steps against 371 with 64 (its floor ~320 us at the copy rate, cuBLAS 322); the gate (N = 384:
# 3 column tiles) 33-46 us unsplit, against 18 for cuBLAS's split-K: hence the K split
CONFIG = LinearConfig()
# Weights with fewer column tiles than programs (K split; the gate): narrower column tiles and
# shorter splits. H200 (bench_invariant_linear.py, session 10): the gate at 1 / 8 / 32 rows 6.2 /
# 6.4 / 7.1 us against CONFIG's 8.8 / 8.9 / 10.6. Chosen by the weight's shape alone: invariant. Splits of at least
# 4 steps or 32-row column tiles were slower in the model: V4.1 B=1 graphs 2.000 / 1.990 ms against 1.980 / 1.977
# (H200, alternating, session 23).
SPLIT_CONFIG = LinearConfig(block_n=64, programs=2 * TARGET_PROGRAMS, min_steps=2)


# A bf16 x with a bf16 result too (V4.1's ratio-1 compressor wkv, the indexer's weights_proj and wk at decode; before,
# cuBLAS's split-K GEMM + reduce, ~8 us a call in the B=1 timelines), the fp32 sum rounded once to bf16 -- the
# reference's value up to fp32 summation order (a bf16 ulp where that order crosses a rounding boundary). In
# batch-invariant mode these calls took the fp64 reference before. H200 (session 28, part s28a, 7 / 5 alternating
# rounds): B=1 1.707 against cuBLAS's 1.721 / 1.708 ms, B=8 4.321 against 4.367 / 4.312 (neutral); batch-invariant
# B=1 2.389 against the fp64 reference's 2.454 / 2.452 ms (5 of 5 rounds).
BF16_RESULTS = True
# outside batch-invariant mode: this backend up to this many rows. Up to 64 (so head, gates and V4's
# compressor linears at B = 32 too) measured neutral against cuBLAS on the H200 (session 13: V4 widths
# B = 8 / 32 0.999 / 1.003, V4.1 B = 32 10.81 / 10.78 ms, same runs)
DECODE_ROWS = 16


def row_tile(M: int) -> int:
    return 16 if M <= 16 else 64


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def split_linear_kernel(X, W, OUT, M, N, K, k_per_split, stride_xm, stride_wn, stride_om, stride_os,
                            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        """OUT[pid 2] = this program's K range of x w^T (fp32 sums, stored in OUT's dtype): the whole K when
        unsplit."""
        pdl_start()
        rows = tl.program_id(0) * BM + tl.arange(0, BM)
        cols = tl.program_id(1) * BN + tl.arange(0, BN)
        mask_m = rows < M
        mask_n = cols < N
        acc = tl.zeros([BM, BN], tl.float32)
        k_lo = tl.program_id(2) * k_per_split
        for k0 in range(k_lo, tl.minimum(K, k_lo + k_per_split), BK):
            ks = k0 + tl.arange(0, BK)
            mask_k = ks < K
            x = tl.load(X + rows.to(tl.int64)[:, None] * stride_xm + ks[None, :],
                        mask=mask_m[:, None] & mask_k[None, :], other=0.0)
            w = tl.load(W + cols.to(tl.int64)[None, :] * stride_wn + ks[:, None],
                        mask=mask_n[None, :] & mask_k[:, None], other=0.0)
            hi = x.to(tl.bfloat16)
            lo = (x - hi.to(tl.float32)).to(tl.bfloat16)
            acc = tl.dot(hi, w, acc)
            acc = tl.dot(lo, w, acc)
        out = OUT + tl.program_id(2) * stride_os + rows.to(tl.int64)[:, None] * stride_om + cols[None, :]
        tl.store(out, acc, mask=mask_m[:, None] & mask_n[None, :])

    return triton, split_linear_kernel


def linear(x: torch.Tensor, weight: torch.Tensor, out_dtype: torch.dtype = torch.float32, *,
           config: LinearConfig | None = None) -> torch.Tensor:
    """See ``reference.linear``: x [.., K] fp32 (or bf16, for an fp32 result; with ``BF16_RESULTS`` for a bf16 one
    too) @ weight [N, K] bf16 ^T, fp32 rounded once to ``out_dtype``."""
    triton, kernel = _kernel()
    lead, K = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, K)
    x2 = x2 if x2.stride(-1) == 1 else x2.contiguous()
    M, N = x2.shape[0], weight.shape[0]
    cfg = config or (SPLIT_CONFIG if triton.cdiv(N, CONFIG.block_n) < CONFIG.programs else CONFIG)
    n_tiles = triton.cdiv(N, cfg.block_n)
    split, k_per_split = split_k(n_tiles, K, cfg.block_k * cfg.min_steps, cfg.programs)  # by N and K alone
    # unsplit, the kernel stores its fp32 sums in out_dtype (rounded once, as a cast after it would)
    parts = torch.empty((split, M, N), device=x.device, dtype=out_dtype if split == 1 else torch.float32)
    if M and N:
        bm = row_tile(M)
        kernel[(triton.cdiv(M, bm), n_tiles, split)](
            x2, weight, parts, M, N, K, k_per_split, x2.stride(0), weight.stride(0), parts.stride(1),
            parts.stride(0), BM=bm, BN=cfg.block_n, BK=cfg.block_k, num_warps=cfg.num_warps,
            num_stages=cfg.num_stages, **pdl_launch())
    out = parts[0] if split == 1 else sum_splits(parts, out_dtype)
    return out.view(*lead, N)


def supports(x: torch.Tensor, weight: torch.Tensor, out_dtype: torch.dtype = torch.float32, **_) -> bool:
    # a bf16 x with an fp32 result (the gate): hi = x and lo = 0 in the kernel, the bits of x.float(); with
    # BF16_RESULTS a bf16 result of a bf16 x too
    bf16_x = x.dtype == torch.bfloat16 and (out_dtype == torch.float32 or (BF16_RESULTS and out_dtype == x.dtype))
    return (x.is_cuda and weight.is_cuda and (x.dtype == torch.float32 or bf16_x) and weight.dtype == torch.bfloat16
            and weight.stride(-1) == 1 and (invariance.enabled() or x.numel() <= DECODE_ROWS * x.shape[-1])
            and triton_available())


register("linear", "triton", linear, supports=supports, priority=20)
