"""Triton backend of ``index_scores`` (CUDA bf16; registered as "triton").

Same meaning as ``reference.index_scores``: scores[i, t] = sum_h w[i, h] relu(q[i, h] . k_t),
with q.k rounded to bf16, each head's term rounded to bf16, the sum over heads in fp32
rounded to bf16 -- where the reference's tensors are bf16.

Why: the reference materialises q.k for every (query, head, key): at an 8192-token
prefill of a ratio-1 index layer that is 8192 x 32 x 8192 values, ~4 GB in bf16 and
twice that as the fp32 copies the next ops make, per layer. Here one program takes
ROWS // H queries (with shared keys; one with its own) and a range of keys: per block of
keys one tensor-core product [ROWS, d] x [d, BLOCK_K] gives every query's every head's dot
products (query-heads are the M dimension), then the roundings, ReLU, weights and the sum
over heads happen in registers, and only the [n, m] scores are written. The query tile
is loaded once per program and each key tile serves ROWS // H queries (session 14: one
query a program, an 8192-token prefill's index scores took 3.6 ms a layer). Prefill passes
each query's visible key count: a query block's products stop at its last visible key and
the keys past it are written -inf (the indexer's causal mask; session 16: the three index
layers of the 8192-token prefill 7.25 -> 3.80 ms).

Numerics against the reference: the dots are exact bf16 products summed in fp32 (as
cuBLAS's bf16 GEMM) in another order, so a q.k can land on the neighbouring bf16 value;
the head sum is a tree instead of torch's order. Results agree to about one bf16 ulp
(tests/gpu/test_index_scores_gpu.py). Every product has the same shape (ROWS rows, shared
keys or own), rows of a product never mix, and no sum crosses keys, so a query's scores
never depend on the batch, on the other queries of its tile or on the key split: it also
runs in batch-invariant mode.

Measured (H200, 2026-11-30, tests/gpu/test_index_scores_gpu.py, the first form: one query a
program, a 32-row product): bit-identical to the reference on every tested shape (n 1..300,
m 1..4096, shared and per-query keys); on the real-width 8192-token prefill
(benchmarks/bench_real_width.py) it took the whole prefill from 390.9 to 286.1 ms with
bit-identical logits. The 128-row form (session 14) is bit-identical to the reference on the
same shapes too (every value exact, session 15's GPU run) and passes the invariance tests;
8192 x 2048 in 0.68-0.73 ms (benchmarks/bench_index_scores.py, BENCHMARKS.md sessions 14-15).
Session 16's tile sweep (``bench_index_scores.py --sweep``, causal 8192 x 8192): every tile gave the
same bits; 64 rows a product 1.21 ms against 128 rows 1.40 (keys 32 / 64 / 128 a product, 4 or 8 warps,
3 or 4 stages: 1.32-2.36 ms).
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.pooled_rows import PooledRows
from deepinfer_adapters.kernels.triton_support import pdl_launch, triton_available

BLOCK_K = 64  # keys per product
ROWS = 64  # query-head rows per product: ROWS // H queries share each key tile (one query with own keys)
TARGET_PROGRAMS = 264  # key ranges split across programs until about this many run (2 an SM)
NUM_WARPS = 4
NUM_STAGES = None  # Triton's default


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def index_scores_kernel(Q, K, W, VIS, OUT, TABLE, N, M, q_blocks, keys_per_program, rows_a_block, stride_qn,
                            stride_qh, stride_kn, stride_km, stride_wn, stride_on, stride_tb, H: tl.constexpr,
                            D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, OWN_KEYS: tl.constexpr,
                            POOLED: tl.constexpr, HAS_VIS: tl.constexpr):
        """Program (query block, key range): rows r of the [BLOCK_Q H, D] query tile are query r // H,
        head r % H (OWN_KEYS: one query, each with its own keys, in rows 0 .. H, the rest zero -- the
        same product shape, so a query's scores have the same bits either way; POOLED: those keys are rows of
        the pool K, key t of query b at K row TABLE[b, t // rows_a_block] rows_a_block + t % rows_a_block,
        ``PooledRows``). HAS_VIS: keys at or
        past a query's VIS entry are -inf; the block's products stop at the largest VIS of its queries, the
        rest of its range is only written; the blocks run last query first (the longest ones start first)."""
        pdl_start()
        if HAS_VIS:
            block = q_blocks - 1 - tl.program_id(0)
        else:
            block = tl.program_id(0)
        rows = tl.arange(0, BLOCK_Q * H)
        if OWN_KEYS:
            query = block + 0 * rows
            valid = rows < H
            out_q = block + 0 * tl.arange(0, BLOCK_Q)
            out_valid = tl.arange(0, BLOCK_Q) == 0
        else:
            query = block * BLOCK_Q + rows // H
            valid = query < N
            out_q = block * BLOCK_Q + tl.arange(0, BLOCK_Q)
            out_valid = out_q < N
        query = query.to(tl.int64)
        d = tl.arange(0, D)
        q = tl.load(Q + query[:, None] * stride_qn + (rows % H)[:, None] * stride_qh + d[None, :],
                    mask=valid[:, None], other=0.0)  # [BLOCK_Q H, D]
        w = tl.load(W + query * stride_wn + rows % H, mask=valid, other=0.0).to(tl.float32)
        key_rows = K + (block.to(tl.int64) * stride_kn if OWN_KEYS and not POOLED else 0)
        out_rows = OUT + out_q.to(tl.int64)[:, None] * stride_on
        k_lo = tl.program_id(1) * keys_per_program
        k_hi = tl.minimum(k_lo + keys_per_program, M)
        k_seen = k_hi  # products up to here
        if HAS_VIS:
            vis = tl.load(VIS + out_q, mask=out_valid, other=0)
            k_seen = tl.maximum(k_lo, tl.minimum(k_hi, tl.max(vis, axis=0)))
        for k0 in range(k_lo, k_seen, BLOCK_K):
            keys = k0 + tl.arange(0, BLOCK_K)
            mask = keys < k_hi
            if POOLED:  # the key rows through the query's block table
                block_of = tl.load(TABLE + block.to(tl.int64) * stride_tb + keys // rows_a_block, mask=mask, other=0)
                at = block_of * rows_a_block + keys % rows_a_block
            else:
                at = keys.to(tl.int64)
            k = tl.load(key_rows + at[None, :] * stride_km + d[:, None], mask=mask[None, :], other=0.0)  # [D, BLOCK_K]
            qk = tl.dot(q, k).to(tl.bfloat16).to(tl.float32)  # [BLOCK_Q H, BLOCK_K]: every head's q.k
            term = (tl.maximum(qk, 0.0) * w[:, None]).to(tl.bfloat16).to(tl.float32)
            score = tl.sum(tl.reshape(term, (BLOCK_Q, H, BLOCK_K)), axis=1)
            if HAS_VIS:
                score = tl.where(keys[None, :] < vis[:, None], score, float("-inf"))
            tl.store(out_rows + keys[None, :], score.to(OUT.dtype.element_ty),
                     mask=out_valid[:, None] & mask[None, :])
        if HAS_VIS:  # the keys none of the block's queries sees
            unseen = tl.full([BLOCK_Q, BLOCK_K], float("-inf"), tl.float32).to(OUT.dtype.element_ty)
            for k0 in range(k_lo + tl.cdiv(k_seen - k_lo, BLOCK_K) * BLOCK_K, k_hi, BLOCK_K):
                keys = k0 + tl.arange(0, BLOCK_K)
                tl.store(out_rows + keys[None, :], unseen, mask=out_valid[:, None] & (keys < k_hi)[None, :])

    return triton, index_scores_kernel


def index_scores(q: torch.Tensor, keys: torch.Tensor | PooledRows, weights: torch.Tensor,
                 visible: torch.Tensor | None = None) -> torch.Tensor:
    n, H, D = q.shape
    m = keys.shape[-2]
    out = torch.empty(n, m, device=q.device, dtype=q.dtype)
    if n and m:
        triton, kernel = _kernel()
        q = q if q.stride(-1) == 1 else q.contiguous()
        pooled = isinstance(keys, PooledRows)
        table = keys.table if pooled else out  # (a pointer the kernel does not read unless pooled)
        rows_a_block = keys.rows_a_block if pooled else 1
        keys = keys.pool if pooled else keys if keys.stride(-1) == 1 else keys.contiguous()
        weights = weights.contiguous()
        own = pooled or keys.dim() == 3
        block_q = max(1, ROWS // H)
        q_blocks = n if own else triton.cdiv(n, block_q)
        k_blocks = triton.cdiv(m, BLOCK_K)
        # whole key ranges per program where enough programs run (the query tile is loaded once);
        # split otherwise (decode). A score's arithmetic is the same whatever the split.
        per_program = BLOCK_K * min(k_blocks, max(1, q_blocks * k_blocks // TARGET_PROGRAMS))
        vis = out if visible is None else visible.contiguous()  # (a pointer the kernel does not read)
        kernel[(q_blocks, triton.cdiv(m, per_program))](
            q, keys, weights, vis, out, table, n, m, q_blocks, per_program, rows_a_block, q.stride(0), q.stride(1),
            keys.stride(0) if own and not pooled else 0, keys.stride(-2), weights.stride(0), out.stride(0),
            table.stride(0), H=H, D=D, BLOCK_Q=block_q, BLOCK_K=BLOCK_K, OWN_KEYS=own, POOLED=pooled,
            HAS_VIS=visible is not None, num_warps=NUM_WARPS,
            **({} if NUM_STAGES is None else {"num_stages": NUM_STAGES}), **pdl_launch())
    return out


def supports(q: torch.Tensor, keys: torch.Tensor | PooledRows, weights: torch.Tensor,
             visible: torch.Tensor | None = None) -> bool:
    n, H, D = q.shape
    pow2 = lambda v: v >= 16 and v & (v - 1) == 0  # noqa: E731  (tensor-core tile sizes)
    if isinstance(keys, PooledRows):
        if not (keys.table.dtype == torch.long and keys.table.shape[0] == n and keys.table.stride(1) == 1
                and keys.pool.dim() == 2 and keys.pool.stride(1) == 1):
            return False
        keys = keys.pool
    return (q.is_cuda and q.dtype == torch.bfloat16 and keys.dtype == torch.bfloat16 and keys.dim() in (2, 3)
            and keys.shape[-1] == D and (keys.dim() == 2 or keys.shape[0] == n) and weights.shape == (n, H)
            and pow2(H) and pow2(D) and (visible is None or (visible.shape == (n,) and not visible.is_floating_point()))
            and triton_available())


register("index_scores", "triton", index_scores, supports=supports, priority=10)
