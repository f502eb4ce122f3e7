"""``fp4_gemm_rows_kernel`` (packed E2M1 experts x E4M3 activations, the decode default for
weights="fp4") under Triton's CPU interpreter, through ``triton_fp8_gemm.gemm``: a grouped GEMM
with gathered rows, an idle tile and four K spans, against the float64 sum of the dequantized
weights (``quant.dequant_fp4_experts`` of the stored bytes) times the scaled activation codes, in
both layouts ``quant.to_fp4_tiles`` produces: 128-row tiles (N = 256: two N tiles) and plain
spans (N = 40, not a multiple of 128: the last N tile masked). The interpreter takes the integer
unpack (the GPU the PTX one, whose text tests/test_fp4_ptx.py runs; tests/gpu/test_moe_gpu.py
runs the compiled kernel in the MoE). A control feeds the stored layout as if it were the held
one: far off. With activation scales per 128, also the per-128-block accumulation
(``FP4_BLOCK_ACCUMULATE``, the default where K is a multiple of 128; its scale bytes read four to an
int32 word), with activation scales per 32 and per 128."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_fp8_gemm as tg
from deepinfer_adapters.model_impl.quant import dequant_fp4_experts, fp4_tiled, to_fp4_tiles

g = torch.Generator().manual_seed(0)
E, K, R = 3, 256, 5  # two 128-input blocks: the scales carried to the next iteration
a = (torch.randn(R, K, generator=g) * 50).to(torch.float8_e4m3fn)
row_idx = torch.tensor([4, 1, 0, 3, 2], dtype=torch.int32)  # sorted row r reads A row row_idx[r]
groups = tg.Groups(expert=torch.tensor([2, 0, -1], dtype=torch.int32), row0=torch.tensor([0, 2, 5], dtype=torch.int32),
                   row1=torch.tensor([2, 5, 5], dtype=torch.int32), row_idx=row_idx)
for N in (256, 40):
    stored = torch.randint(0, 256, (E, N, K // 2), generator=g, dtype=torch.uint8)
    wscale = torch.randint(120, 131, (E, N, K // 32), generator=g, dtype=torch.uint8)
    held = to_fp4_tiles(stored)
    for a_block in (32, 128):
        sa = torch.pow(2.0, torch.randint(-8, 3, (R, K // a_block), generator=g).float())
        av = a.double() * sa.double().repeat_interleave(a_block, 1)
        want = torch.zeros(R, N, dtype=torch.float64)
        for e, r0, r1 in ((2, 0, 2), (0, 2, 5)):
            w = dequant_fp4_experts(stored[e], wscale[e].view(torch.float8_e8m0fnu), torch.float64)
            want[r0:r1] = av[row_idx[r0:r1].long()] @ w.T
        tg.FP4_BLOCK_ACCUMULATE = False  # span by span (the path where K is not a multiple of 128)
        for name, weights in (("held", held), ("control", stored)):
            out = tg.gemm(a, sa, a_block, weights, wscale, (1, 32), torch.float32, rows=R, groups=groups)
            rel = ((out.double() - want).abs().max() / want.abs().max()).item()
            print(N, int(fp4_tiled(N, K)), name, a_block, f"{rel:.3e}")
        # the default: 128-input blocks, the scale bytes read as int32 words (a_block 128: each block summed
        # under the weight scales, then scaled once; 32: each product scaled by both)
        tg.FP4_BLOCK_ACCUMULATE = True
        out = tg.gemm(a, sa, a_block, held, wscale, (1, 32), torch.float32, rows=R, groups=groups)
        rel = ((out.double() - want).abs().max() / want.abs().max()).item()
        print(N, int(fp4_tiled(N, K)), "block_acc", a_block, f"{rel:.3e}")
        # prefill-sized row tiles (64 rows, 8 warps; bench_fp4_experts' fp4_rows_t64)
        out = tg.gemm(a, sa, a_block, held, wscale, (1, 32), torch.float32, rows=R, groups=groups,
                      config=tg.GemmConfig(64, 128, 1, 8, 3))
        rel = ((out.double() - want).abs().max() / want.abs().max()).item()
        print(N, int(fp4_tiled(N, K)), "block_acc_t64", a_block, f"{rel:.3e}")
"""


def test_fp4_rows_kernel_matches_dequantized_weights_under_the_interpreter():
    lines = [line.split() for line in run_interpreted(SCRIPT).strip().splitlines()]
    rel = {(int(n), name, int(block)): float(value) for n, _, name, block, value in lines}
    assert {(int(n), int(t)) for n, t, *_ in lines} == {(256, 1), (40, 0)}  # both layouts ran
    assert len(rel) == 16
    for n in (256, 40):
        for block in (32, 128):
            assert rel[(n, "held", block)] < 1e-6  # fp32 sums of exact products
            assert rel[(n, "control", block)] > 0.1
            assert rel[(n, "block_acc", block)] < 1e-6  # FP4_BLOCK_ACCUMULATE
            assert rel[(n, "block_acc_t64", block)] < 1e-6



def test_packed_weights_refuse_tiles_and_arguments_their_kernels_cannot_take():
    """Typed errors before any launch: a tiled packed weight with an N tile other than its 128-row
    tile (either path), and the FP8 path without groups or with a K step forced."""
    import torch

    from deepinfer_adapters.kernels import triton_fp8_gemm as tg
    from deepinfer_adapters.model_impl.quant import to_fp4_tiles

    E, N, K, R = 2, 256, 128, 3
    held = to_fp4_tiles(torch.zeros(E, N, K // 2, dtype=torch.uint8))
    scale = torch.full((E, N, K // 32), 127, dtype=torch.uint8)
    groups = tg.Groups(expert=torch.tensor([0], dtype=torch.int32), row0=torch.tensor([0], dtype=torch.int32),
                       row1=torch.tensor([R], dtype=torch.int32))
    a_bf16 = torch.zeros(R, K, dtype=torch.bfloat16)
    a8, sa = torch.zeros(R, K, dtype=torch.float8_e4m3fn), torch.ones(R, K // 32)
    narrow = tg.GemmConfig(16, 64, 1, 4, 3)
    with pytest.raises(ValueError, match="128-row"):
        tg.gemm(a_bf16, None, 0, held, scale, (1, 32), torch.float32, rows=R, groups=groups, config=narrow)
    with pytest.raises(ValueError, match="128 weight rows"):
        tg.gemm(a8, sa, 32, held, scale, (1, 32), torch.float32, rows=R, groups=groups, config=narrow)
    with pytest.raises(ValueError, match="grouped GEMM"):
        tg.gemm(a8, sa, 32, held[0], scale[0], (1, 32), torch.float32)
    with pytest.raises(ValueError, match="no kstep"):
        tg.gemm(a8, sa, 32, held, scale, (1, 32), torch.float32, rows=R, groups=groups, kstep=64)
