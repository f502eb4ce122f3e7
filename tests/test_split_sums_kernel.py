"""The swapped decode GEMM summing its own split-K partials (``fp8_triton_jit.last_split_sums``) under
Triton's CPU interpreter: the same bits as the partials summed by a second launch (``sum_splits``), for
row counts and widths that leave tiles partly masked; a control where the tile counters do not start at
0 (the last program is picked too early) must differ. The GPU test (memory ordering between programs,
counters reset for the next launch, CUDA graphs) is tests/gpu/test_fp8_linear_gpu.py."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import split_counters
from deepinfer_adapters.kernels import triton_fp8_gemm as tri
from deepinfer_adapters.model_impl.quant import quant_fp8_blocks

g = torch.Generator().manual_seed(0)
cfg = tri.GemmConfig(16, 64, 1, 4, 3, programs=24)
checked = 0
for M, N, K in ((1, 128, 1024), (3, 192, 512), (5, 160, 768)):
    w8, scale = quant_fp8_blocks(torch.randn(N, K, generator=g) / 16, (32, 32))
    q, s = tri.act_quant(torch.randn(M, K, generator=g).bfloat16(), 32)
    run = lambda: tri.gemm(q, s, 32, w8, scale, (32, 32), torch.bfloat16, swapped=True, bf16_steps=False, config=cfg)
    tri.SPLIT_SUMS_IN_GEMM = False
    two_launches = run()
    tri.SPLIT_SUMS_IN_GEMM = True
    fused = run()
    assert fused.shape == (M, N) and fused.dtype == torch.bfloat16
    assert torch.equal(fused, two_launches), (M, N, K)
    fresh = split_counters.counters
    split_counters.counters = lambda device, tiles: torch.ones(tiles, dtype=torch.int32)  # a control
    try:
        assert not torch.equal(run(), two_launches), (M, N, K)
    finally:
        split_counters.counters = fresh
    checked += 1
print("OK", checked)
"""


def test_split_sums_in_the_gemm_are_the_second_launch_bit_for_bit_under_the_interpreter():
    assert run_interpreted(SCRIPT).split() == ["OK", "3"]
