"""``act_quant`` / ``swiglu_quant`` with ``scale_block`` (kernels/fp8_triton_jit.py ``widen_scales``) under Triton's
CPU interpreter: the per-32 codes, re-expressed under one scale per 128 values, equal where E4M3's normal range holds
them and within a subnormal step below it. (The interpreter's fp32 -> E4M3 conversion truncates below the normal
range, so the bound here is a whole step, 2^-9 of the wide scale; tests/gpu/test_gluon_moe_fp8_gpu.py checks the
compiled kernels' codes against torch's rounding bit for bit, and the half step.)"""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_fp8_gemm as fp8, triton_moe

g = torch.Generator().manual_seed(0)

def spread(rows, K):
    # per-32 magnitudes over 2^-12 .. 2^4, so runs of four blocks hold small blocks under a large one
    x = torch.randn(rows, K // 32, 32, generator=g)
    return (x * 2.0 ** torch.randint(-12, 5, (rows, K // 32, 1), generator=g)).reshape(rows, K).to(torch.bfloat16)

def check(q32, s32, q128, s128):
    rows, K = q32.shape
    runs = s32.view(rows, K // 128, 4)
    assert torch.equal(s128, runs.amax(-1))
    wide = s128.repeat_interleave(128, dim=-1)
    exact = q32.float() * s32.repeat_interleave(32, dim=-1)
    got = q128.float() * wide
    assert ((got - exact).abs() <= wide * 2.0 ** -9).all()
    normal = (exact.abs() >= wide * 2.0 ** -6)
    assert torch.equal(got[normal], exact[normal])
    assert (got != exact).any()  # the data reaches the subnormal rounding, else the bound tests nothing
    return 1

checked = 0
for rows, K in ((3, 5120), (4, 2304)):  # two programs a row (160 blocks); one row ending mid-program (72)
    x = spread(rows, K)
    q32, s32 = fp8.act_quant(x, 32)
    q128, s128 = fp8.act_quant(x, 32, scale_block=128)
    assert s128.shape == (rows, K // 128)
    checked += check(q32, s32, q128, s128)
h13 = torch.cat([spread(6, 2304), spread(6, 2304)], dim=-1)
rw = torch.rand(6, generator=g)
checked += check(*triton_moe.swiglu_quant(h13, rw, 7.0, 32), *triton_moe.swiglu_quant(h13, rw, 7.0, 32,
                                                                                      scale_block=128))
for bad in (dict(scale_block=96), dict(scale_block=128, dequant_to=torch.bfloat16), dict(scale_block=8192)):
    try:
        fp8.act_quant(x, 32, **bad)
    except ValueError as e:
        assert "scale_block" in str(e)
        checked += 1
print("OK", checked)
"""


def test_codes_under_wider_scales_move_only_below_the_normal_range():
    """Per-128 stored scales: each the largest of its four per-32 scales; values equal where E4M3's normal range
    holds them under the wide scale, within a subnormal step below it (some moved); for ``act_quant`` (two row
    widths) and ``swiglu_quant``; bad ``scale_block``s refused by name."""
    assert "OK 6" in run_interpreted(SCRIPT)


WEIGHT_SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import fp8_blockwise

g = torch.Generator().manual_seed(1)
checked = 0
N, K = 300, 384  # a partial last row tile; three 128-column steps (scales padded to four)
codes = (torch.randn(N, K, generator=g) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
exps = torch.randint(100, 131, (-(-N // 32), K // 32), generator=g, dtype=torch.uint8)  # E8M0 bytes: 2^-27 .. 2^3
per_value = (2.0 ** (exps.float() - 127)).repeat_interleave(32, 0)[:N].repeat_interleave(32, 1)
exact = codes.float() * per_value
q, qs = fp8_blockwise.widen_weight(codes, exps, (32, 32))
assert qs.shape == (3, 4) and (qs[:, 3] == 0).all()
want = torch.stack([per_value[i * 128:(i + 1) * 128].view(-1, 3, 128).amax(dim=(0, 2)) for i in range(3)])
assert torch.equal(qs[:, :3], want)
wide = qs[:, :3].repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)
got = q.float() * wide
normal = exact.abs() >= wide * 2.0 ** -6
assert torch.equal(got[normal], exact[normal]) and (got != exact).any() and normal.float().mean() > 0.3
assert ((got - exact).abs() <= wide * 2.0 ** -9).all()  # the interpreter truncates: a whole subnormal step
checked += 1
# scales already per (128, 128) (V4's, fp32 or E8M0): taken as they are
s128 = 2.0 ** torch.randint(-10, 0, (3, 3), generator=g).float()
for s in (s128, (s128.log2() + 127).to(torch.uint8)):
    q, qs = fp8_blockwise.widen_weight(codes, s, (128, 128))
    assert torch.equal(q.view(torch.uint8), codes.view(torch.uint8)) and torch.equal(qs[:, :3], s128)
    assert (qs[:, 3] == 0).all()
    checked += 1
try:  # finer blocks with fp32 scales: their ratios need not be powers of two
    fp8_blockwise.widen_weight(codes, per_value[::32, ::32].contiguous(), (32, 32))
except ValueError as e:
    assert "E8M0" in str(e)
    checked += 1
print("OK", checked)
"""


def test_weight_codes_under_wider_scales():
    """``fp8_blockwise.widen_weight``: each 128 x 128 tile's largest scale, E8M0 bytes read as powers of two, the K
    steps' scales padded to four with zeros (cuBLAS's layout), a partial row tile; values as for the activations;
    already-wide scales (fp32 or E8M0) leave the codes alone; finer fp32 scales refused by name."""
    assert "OK 4" in run_interpreted(WEIGHT_SCRIPT)
