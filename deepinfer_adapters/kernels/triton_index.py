"""Triton backend of ``index_scores`` (CUDA bf16; registered as "triton").

Same meaning as ``reference.index_scores``: scores[i, t] = sum_h w[i, h] relu(q[i, h] . k_t),
with q.k rounded to bf16, each head's term rounded to bf16, the sum over heads in fp32
rounded to bf16 -- where the reference's tensors are bf16.

Why: the reference materialises q.k for every (query, head, key): at an 8192-token
prefill of a ratio-1 index layer that is 8192 x 32 x 8192 values, ~4 GB in bf16 and
twice that as the fp32 copies the next ops make, per layer. Here one program takes one
query and a block of keys: a single tensor-core product [H, d] x [d, BLOCK_K] gives
every head's dot products (H is the M dimension), then the roundings, ReLU, weights and
the sum over heads happen in registers, and only the [n, m] scores are written.

Numerics against the reference: the dots are exact bf16 products summed in fp32 (as
cuBLAS's bf16 GEMM) in another order, so a q.k can land on the neighbouring bf16 value;
the head sum is a tree instead of torch's order. Results agree to about one bf16 ulp
(tests/gpu/test_index_scores_gpu.py). Each query is computed alone with a tile set by
H and d only, so its scores never depend on the batch: it also runs in batch-invariant
mode.

Measured (H200, 2026-11-30, tests/gpu/test_index_scores_gpu.py): bit-identical to the
reference on every tested shape (n 1..300, m 1..4096, shared and per-query keys); on the
real-width 8192-token prefill (benchmarks/bench_real_width.py) it takes the whole prefill
from 390.9 to 286.1 ms with bit-identical logits.
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.triton_support import pdl_launch, triton_available

BLOCK_K = 64  # keys per program


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def index_scores_kernel(Q, K, W, OUT, M, stride_qn, stride_qh, stride_kn, stride_km, stride_wn, stride_on,
                            H: tl.constexpr, D: tl.constexpr, BLOCK_K: tl.constexpr):
        pdl_start()
        i = tl.program_id(0).to(tl.int64)
        keys = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
        mask = keys < M
        h = tl.arange(0, H)
        d = tl.arange(0, D)
        q = tl.load(Q + i * stride_qn + h[:, None] * stride_qh + d[None, :])  # [H, D]
        k = tl.load(K + i * stride_kn + keys.to(tl.int64)[None, :] * stride_km + d[:, None],
                    mask=mask[None, :], other=0.0)  # [D, BLOCK_K]
        qk = tl.dot(q, k).to(tl.bfloat16).to(tl.float32)  # [H, BLOCK_K]
        w = tl.load(W + i * stride_wn + h).to(tl.float32)
        term = (tl.maximum(qk, 0.0) * w[:, None]).to(tl.bfloat16).to(tl.float32)
        tl.store(OUT + i * stride_on + keys, tl.sum(term, axis=0).to(OUT.dtype.element_ty), mask=mask)

    return triton, index_scores_kernel


def index_scores(q: torch.Tensor, keys: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    n, H, D = q.shape
    m = keys.shape[-2]
    out = torch.empty(n, m, device=q.device, dtype=q.dtype)
    if n and m:
        triton, kernel = _kernel()
        q = q if q.stride(-1) == 1 else q.contiguous()
        keys = keys if keys.stride(-1) == 1 else keys.contiguous()
        weights = weights.contiguous()
        shared = keys.dim() == 2
        kernel[(n, triton.cdiv(m, BLOCK_K))](
            q, keys, weights, out, m, q.stride(0), q.stride(1), 0 if shared else keys.stride(0), keys.stride(-2),
            weights.stride(0), out.stride(0), H=H, D=D, BLOCK_K=BLOCK_K, num_warps=4, **pdl_launch())
    return out


def supports(q: torch.Tensor, keys: torch.Tensor, weights: torch.Tensor) -> bool:
    n, H, D = q.shape
    pow2 = lambda v: v >= 16 and v & (v - 1) == 0  # noqa: E731  (tensor-core tile sizes)
    return (q.is_cuda and q.dtype == torch.bfloat16 and keys.dtype == torch.bfloat16 and keys.dim() in (2, 3)
            and keys.shape[-1] == D and (keys.dim() == 2 or keys.shape[0] == n) and weights.shape == (n, H)
            and pow2(H) and pow2(D) and triton_available())


register("index_scores", "triton", index_scores, supports=supports, priority=10)
