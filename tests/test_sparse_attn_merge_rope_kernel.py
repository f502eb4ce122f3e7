"""``sparse_attn(..., out_freqs=)`` (kernels/triton_sparse_attn.py) under the CPU interpreter: split-K's merge rotates
the output's last dims back (the output path's inverse RoPE) with the bits of the merge's output rotated by the RoPE
kernel after it -- rotated dims inside one merge program, over several, or in part of one -- and writes every
element; where no merge runs (K <= 64) the dispatched RoPE runs after. tests/gpu/test_sparse_attn_gpu.py checks the compiled
kernel's bits (fused multiply-adds) and the dispatch; the CPU model tests cover the composed op."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import triton_norm_rope, triton_sparse_attn as tri

for S, H, d, K, rd, merge_d in [(2, 16, 64, 130, 16, 16), (1, 16, 64, 200, 32, 16), (2, 20, 48, 130, 8, 16),
                                (1, 16, 64, 40, 16, 16)]:
    g = torch.Generator().manual_seed(S * 100 + d + rd)
    q = torch.randn(S, H, d, generator=g).bfloat16()
    kv = torch.randn(300, d, generator=g).bfloat16()
    sink = torch.randn(H, generator=g)
    idx = torch.randint(0, 300, (S, K), generator=g, dtype=torch.int32)
    idx[:, ::7] = -1
    freqs = torch.polar(torch.ones(S, rd // 2), torch.rand(S, rd // 2, generator=g) * 6)
    tri.MERGE_BLOCK_D = merge_d
    plain = tri.sparse_attn(q, kv, sink, idx, d**-0.5, config=tri.DECODE_SPLIT_CONFIG)
    # no merge at K <= 64: the dispatched RoPE after (on the CPU the torch reference, on CUDA the Triton kernel)
    want = (triton_norm_rope.apply_rope if K > 64 else kernels.apply_rope)(plain, freqs, inverse=True)
    got = tri.sparse_attn(q, kv, sink, idx, d**-0.5, config=tri.DECODE_SPLIT_CONFIG, out_freqs=freqs)
    moved = (want != plain).any(-1).any(-1)
    print(S, d, rd, int(torch.equal(got, want)), int(moved.all()), int(torch.equal(got[..., :d - rd], plain[..., :d - rd])))
"""


def test_merge_rotates_the_output_back_with_the_rope_kernels_bits():
    lines = run_interpreted(SCRIPT).strip().splitlines()
    assert lines == ["2 64 16 1 1 1", "1 64 32 1 1 1", "2 48 8 1 1 1", "1 64 16 1 1 1"]
