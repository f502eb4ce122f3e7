"""The MoE's "f16" path under Triton's CPU interpreter: ``f16_rows`` (E4M3 codes with per-32
power-of-two scales re-expressed as fp16 with one scale a row) is exact while a row's scales are at
most 2^22 apart and flags the input otherwise (all-zero groups never count); ``f16_grouped_gemm`` on
those fp16 activations with (1, 128) E4M3 weights (rows and 128 x 128 tiles) is the float64 product
to fp32 rounding and flags a weight column whose scales span more than 22 octaves; ``moe_experts(path="f16")`` is the fp8 path's result. GPU: tests/gpu/test_moe_gpu.py
(``test_f16_*``: real tile sizes, the fallback to the bf16 path)."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

BLOCKS = r"""
import torch
from deepinfer_adapters.kernels import triton_fp8_gemm as tg

g = torch.Generator().manual_seed(5)
M, K = 6, 512
codes = (torch.randn(M, K, generator=g) * 60).clamp(-448, 448).to(torch.float8_e4m3fn)
codes[:, 0] = 448.0  # the largest code in the largest group: 448 * 128 must still fit fp16
codes[2, 32:64] = 0  # an all-zero group: its scale (far below the others) never counts
codes[1, 160:192] = 0.001953125  # the smallest subnormal code, in the group 22 octaves down
exps = torch.randint(-20, 3, (M, K // 32), generator=g)
exps[:, 0], exps[:, 5] = 2, -20  # 22 octaves apart: still exact
exps[2, 1] = -40
sa = torch.pow(2.0, exps.float())
want = codes.double() * sa.double().repeat_interleave(32, 1)
for trial, (row, group, exp) in enumerate([(None, None, None), (1, 5, -21), (2, 1, -60)]):
    e = exps.clone()
    if row is not None:
        e[row, group] = exp
    bad = torch.zeros(1, dtype=torch.int32)
    out, out_s = tg.f16_rows(codes, torch.pow(2.0, e.float()), 32, bad)
    got = out.double() * out_s.double()[:, None]
    print(trial, int(bad.item()), int(torch.equal(got, codes.double() * torch.pow(2.0, e.double()).repeat_interleave(32, 1))),
          out.dtype, tuple(out_s.shape))
"""

GEMM = r"""
import torch
from deepinfer_adapters.kernels import triton_fp8_gemm as tg
from deepinfer_adapters.model_impl.quant import to_e4m3_tiles

g = torch.Generator().manual_seed(3)
E, N, K, R = 2, 256, 256, 5
row_idx = torch.tensor([4, 1, 0, 3, 2], dtype=torch.int32)
groups = tg.Groups(expert=torch.tensor([1, 0, -1], dtype=torch.int32), row0=torch.tensor([0, 2, 5], dtype=torch.int32),
                   row1=torch.tensor([2, 5, 5], dtype=torch.int32), row_idx=row_idx)
w = (torch.randn(E, N, K, generator=g) * 30).to(torch.float8_e4m3fn)
exps = torch.randint(-6, 4, (E, N, K // 128), generator=g)
scale = (exps + 127).to(torch.uint8)
a = (torch.randn(R, K, generator=g) * 50).to(torch.float8_e4m3fn)
sa = torch.pow(2.0, torch.randint(-12, 3, (R, K // 32), generator=g).float())
av = a.double() * sa.double().repeat_interleave(32, 1)
want = torch.zeros(R, N, dtype=torch.float64)
for e, r0, r1 in ((1, 0, 2), (0, 2, 5)):
    we = w[e].double() * torch.pow(2.0, exps[e].double()).repeat_interleave(128, 1)
    want[r0:r1] = av[row_idx[r0:r1].long()] @ we.T
bad = torch.zeros(1, dtype=torch.int32)
a16, s16 = tg.f16_rows(a, sa, 32, bad)
cfg = tg.GemmConfig(16, 128, 1, 4, 2)
for name, weight in (("rows", w), ("tiles", to_e4m3_tiles(w))):
    got = tg.f16_grouped_gemm(a16, s16, weight, scale, (1, 128), torch.float32, rows=R, groups=groups, bad=bad,
                              config=cfg)
    print(name, f"{((got.double() - want).abs().max() / want.abs().max()).item():.3e}")
print("bad", int(bad.item()))
wide = scale.clone()
wide[0, 7, 0], wide[0, 7, 1] = 127 + 12, 127 - 11  # one column of expert 0 spans 23 octaves
tg.f16_grouped_gemm(a16, s16, w, wide, (1, 128), torch.float32, rows=R, groups=groups, bad=bad, config=cfg)
print("wide", int(bad.item()))
try:
    tg.f16_grouped_gemm(a16, s16, w, (torch.randint(-6, 4, (E, N, K // 32)) + 127).to(torch.uint8), (1, 32),
                        torch.float32, rows=R, groups=groups, bad=bad)
except ValueError as e:
    print("error", "(1, 128) blocks" in str(e))
"""

MOE = r"""
import torch
from deepinfer_adapters.kernels import triton_moe

g = torch.Generator().manual_seed(11)
E, D, I, T, k = 4, 256, 128, 7, 2
w13 = (torch.randn(E, 2 * I, D, generator=g) * 20).to(torch.float8_e4m3fn)
w2 = (torch.randn(E, D, I, generator=g) * 20).to(torch.float8_e4m3fn)
s13 = (torch.randint(-9, -5, (E, 2 * I, D // 128), generator=g) + 127).to(torch.uint8)
s2 = (torch.randint(-9, -5, (E, D, I // 128), generator=g) + 127).to(torch.uint8)
x = torch.randn(T, D, generator=g).bfloat16()
ids = torch.rand(T, E, generator=g).topk(k, dim=-1).indices
rw = torch.rand(T, k, generator=g)
fp8 = triton_moe.moe_experts(x, rw, ids, w13, s13, w2, s2, (1, 128), 32, 10.0, path="fp8")
out = triton_moe.moe_experts(x, rw, ids, w13, s13, w2, s2, (1, 128), 32, 10.0, path="f16")
print(f"{((out.double() - fp8.double()).norm() / fp8.double().norm()).item():.3e}", int(torch.isfinite(out).all()),
      f"{out.abs().max().item():.3e}")
"""


def test_f16_rows_exact_within_22_octaves_and_flagged_beyond():
    lines = [line.split() for line in run_interpreted(BLOCKS).strip().splitlines()]
    assert [line[:3] for line in lines] == [["0", "0", "1"], ["1", "1", "0"], ["2", "0", "1"]]
    assert all(line[3] == "torch.float16" and line[4:] == ["(6,)"] for line in lines)


def test_f16_gemm_is_the_float64_product_under_the_interpreter():
    lines = dict(line.split(maxsplit=1) for line in run_interpreted(GEMM).strip().splitlines())
    assert float(lines["rows"]) < 1e-6 and float(lines["tiles"]) < 1e-6
    assert lines["bad"] == "0" and lines["wide"] == "1"
    assert lines["error"] == "True"  # (1, 32) weight blocks: a typed error, nothing launched


def test_f16_moe_is_the_fp8_path_under_the_interpreter():
    """The whole MoE: the same exact products as the fp8 path (the same E4M3 codes: the interpreter's
    own fp8 cast rounds otherwise than CUDA's, so the torch reference is compared on the GPU)."""
    rel, finite, top = run_interpreted(MOE).split()
    assert float(rel) < 1e-5 and finite == "1" and float(top) > 0


def test_prefill_path_by_activation_scales_and_storage():
    """Prefill-sized MoE calls: V4's activation scales per 128 take FP8 products ("fp8"), V4.1's per 32
    with (1, 128) E4M3 experts the fp16 products ("f16"), packed FP4 and (1, 32) experts the bf16 path;
    batch-invariant mode always the bf16 path (one path for every call, decode and prefill alike)."""
    import torch

    from deepinfer_adapters.kernels import invariance, triton_moe

    w2 = torch.zeros(2, 64, 128, dtype=torch.float8_e4m3fn)
    x = torch.zeros(1, 128)
    pick = lambda block, act, fp4=False: triton_moe._default_path(x, w2, None, block, act, True, fp4, 32)  # noqa: E731
    assert pick((1, 128), 128) == "fp8"
    assert pick((1, 128), 32) == "f16"
    assert pick((1, 32), 32) == "bf16"
    assert pick((1, 32), 32, fp4=True) == "bf16"
    with invariance.batch_invariant(True):
        assert pick((1, 128), 32) == pick((1, 128), 128) == "bf16"
