"""FlashMLA's SM90 sparse kernel (``kernels/flashmla_sparse.py``) against the torch reference
(skipped without CUDA or without the sgl-flash-mla wheel; carry it as ../shared/reference/gpu.md says).

Tolerance as for the Triton kernel (tests/gpu/test_sparse_attn_gpu.py): bf16 probabilities
rounded against the kernel's own running max move outputs by about one bf16 ulp, rel <= 4e-3
over a tensor; a window layer's prefill layout (fewer than 128 indices, padded by the wrapper)
and a decode-sized call are included.
"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import flashmla_sparse, invariance, reference

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)"),
    pytest.mark.skipif(torch.cuda.is_available() and flashmla_sparse._flash_mla() is None,
                       reason="sgl-flash-mla (legacy SM90 kernels) not installed"),
]


@pytest.mark.parametrize("S,N,K", [(4096, 8192, 640), (33, 200, 100), (1, 700, 640)])
def test_flashmla_sparse_matches_reference(S, N, K):
    g = torch.Generator(device="cuda").manual_seed(S + K)
    H, d = 64, 512
    q = torch.randn(S, H, d, device="cuda", generator=g).bfloat16()
    kv = torch.randn(N, d, device="cuda", generator=g).bfloat16()
    sink = torch.randn(H, device="cuda", generator=g)
    idx = torch.randint(0, N, (S, K), device="cuda", generator=g)
    idx[:, 1::7] = -1  # invalid entries inside the list
    assert flashmla_sparse.supports(q, kv, sink, idx, d**-0.5)
    out = flashmla_sparse.sparse_attn(q, kv, sink, idx, d**-0.5)
    ref = reference.sparse_attn(q, kv, sink, idx, d**-0.5)
    rel = float((out.float() - ref.float()).norm() / ref.float().norm())
    print(f"REPORT flashmla S={S} K={K}: rel={rel:.2e}")
    assert out.shape == ref.shape and out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    assert rel <= 4e-3


def test_flashmla_rows_do_not_depend_on_the_batch():
    """Each query alone gives the bits it gets among 300 others: why it also runs in batch-invariant mode."""
    g = torch.Generator(device="cuda").manual_seed(5)
    S, N, K, H, d = 300, 4000, 640, 64, 512
    q = torch.randn(S, H, d, device="cuda", generator=g).bfloat16()
    kv = torch.randn(N, d, device="cuda", generator=g).bfloat16()
    sink = torch.randn(H, device="cuda", generator=g)
    idx = torch.randint(0, N, (S, K), device="cuda", generator=g)
    full = flashmla_sparse.sparse_attn(q, kv, sink, idx, d**-0.5)
    same = [torch.equal(flashmla_sparse.sparse_attn(q[i:i + 1], kv, sink, idx[i:i + 1], d**-0.5), full[i:i + 1])
            for i in (0, 7, 299)]
    part = torch.equal(flashmla_sparse.sparse_attn(q[5:40], kv, sink, idx[5:40], d**-0.5), full[5:40])
    print(f"REPORT flashmla rows alone == batched: {same}, slice {part}")
    assert all(same) and part
    with invariance.batch_invariant(True):
        assert kernels.chosen("sparse_attn", q, kv, sink, idx, d**-0.5) == "flashmla"
