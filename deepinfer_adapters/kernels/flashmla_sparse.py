"""FlashMLA's SM90 sparse-attention prefill kernel as a ``sparse_attn`` backend ("flashmla").

DeepSeek's FlashMLA dropped its SM90 kernels upstream; the ``sgl-flash-mla`` wheel (1.0.0,
stable torch ABI) keeps them in ``torch.ops.flash_mla_legacy`` and loads on the H200's
torch 2.11 (../shared/reference/gpu.md: 524 TFLOP/s on q [4096, 64, 512] with 640 indices
and a sink, rel. error 2e-3 against an fp32 reference). ``flash_mla_sparse_fwd`` has our
op's meaning: q [S, H, 512] bf16 (H 64 or 128), one latent kv row per index (K = V), indices
per query (-1 = none), a per-head sink added to the softmax denominator. Our layouts fit
with a head dim on kv and indices ([N, 1, d], [S, 1, K] int32); K is padded with -1 to a
multiple of 128 (trailing invalid indices change nothing).

Numerics: bf16 probabilities like the reference, rounded against the kernel's own running
max and blocks, so outputs agree at the bf16 level (about one bf16 ulp, rel ~2e-3), not
bit for bit. Each query is computed alone (no split over keys in this prefill kernel).

Measured (H200, 2026-11-30): tests/gpu/test_flashmla_gpu.py passes (rel 7e-4..9e-4 against
the fp32 reference at S = 1, 33, 4096). benchmarks/bench_sparse_attn.py (H 64, d 512, K 640,
CUDA-graph replays): 20.0 / 20.4 / 21.7 / 33.4 us at S = 1 / 8 / 32 / 128 decode queries
against 44.5 / 43.7 / 44.9 / 66.7 for our Triton kernel, and 1.27 ms against 3.35 ms for an
8192-token prefill. So it is chosen wherever it applies, batch-invariant mode included: one
program per query and no split over keys, so a query's result does not depend on the other
queries of the call (tests/gpu/test_flashmla_gpu.py checks rows alone against 300 together).
The exception: up to ``triton_sparse_attn.DECODE_SPLIT_QUERIES`` queries outside batch-invariant
mode, where one program a query leaves the GPU idle and the Triton kernel's split config runs
(13.4 against 20.1 us at one query, session 17).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from deepinfer_adapters.kernels import register

HEAD_DIM = 512
INDEX_MULTIPLE = 128


@functools.cache
def _flash_mla():
    """The flash_mla module when its legacy (SM90) kernels load here, else None."""
    try:
        import flash_mla
    except Exception:  # not installed, or its extension does not load with this torch
        return None
    return flash_mla if flash_mla.has_legacy() else None


def sparse_attn(q: torch.Tensor, kv: torch.Tensor, sink: torch.Tensor, idx: torch.Tensor, scale: float,
                probs_bf16: bool = True) -> torch.Tensor:
    """See ``reference.sparse_attn``."""
    pad = -idx.shape[1] % INDEX_MULTIPLE
    indices = idx.to(torch.int32)
    if pad:
        indices = F.pad(indices, (0, pad), value=-1)
    out, _, _ = _flash_mla().flash_mla_sparse_fwd(
        q.contiguous(), kv.unsqueeze(1).contiguous(), indices.unsqueeze(1).contiguous(), scale, d_v=HEAD_DIM,
        attn_sink=sink.float().contiguous(), use_legacy=True, return_log2_lse=False)
    return out


def supports(q: torch.Tensor, kv: torch.Tensor, sink: torch.Tensor, idx: torch.Tensor, scale: float,
             probs_bf16: bool = True, **_) -> bool:
    return (q.is_cuda and q.dtype == torch.bfloat16 and kv.dtype == torch.bfloat16 and probs_bf16
            and q.shape[-1] == HEAD_DIM and kv.shape[-1] == HEAD_DIM and q.shape[1] in (64, 128)
            and torch.cuda.get_device_capability(q.device) == (9, 0) and _flash_mla() is not None)


register("sparse_attn", "flashmla", sparse_attn, supports=supports, priority=20)  # above the Triton kernel
