"""``act_quant_hilo`` (kernels/fp8_triton_jit.py ``act_quant_hilo_kernel``) under Triton's CPU interpreter: bf16
activations as two E4M3 rows, ``act_quant``'s codes and their residual's, for wo_a on FP8 products
(``gluon_gemv.GROUPED_FP8_SPLIT``). The codes row is ``act_quant``'s bit for bit; codes plus residual closer to x
than the codes alone and mostly exact. Not exactness everywhere: the interpreter's fp32 -> E4M3 conversion drops
the carry where a value rounds up into the next binade (-31.6 became -16 here, where torch and the GPU give -32),
so tests/gpu/test_gluon_gemv_gpu.py checks the compiled kernel's exact reconstruction, and the GEMV against the
reference."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_fp8_gemm as fp8

g = torch.Generator().manual_seed(0)
checked = 0
for rows, K in ((3, 4096), (2, 2304)):  # one row in several programs; one ending mid-program
    # per-32 magnitudes over 2^-12 .. 2^4, a few values 2^-20 below their block's largest, exact zeros
    x = torch.randn(rows, K // 32, 32, generator=g) * 2.0 ** torch.randint(-12, 5, (rows, K // 32, 1), generator=g)
    x[:, :, 5] *= 2.0 ** -20
    x[:, :, 7] = 0
    x = x.reshape(rows, K).to(torch.bfloat16)
    q, s = fp8.act_quant_hilo(x, 32)
    assert q.shape == (2 * rows, K) and s.shape == (2 * rows, K // 32)
    q1, s1 = fp8.act_quant(x, 32)
    assert torch.equal(q[:rows].view(torch.uint8), q1.view(torch.uint8)) and torch.equal(s[:rows], s1)
    per_value = s.double().repeat_interleave(32, dim=-1)
    hi, lo = q[:rows].double() * per_value[:rows], q[rows:].double() * per_value[rows:]
    exact = x.double()
    # the residual quantized to within half of itself (the interpreter's carry bug: see the module doc) or a
    # subnormal step of its scale, and exactly for most values
    assert ((hi + lo - exact).abs() <= (exact - hi).abs() * 2.0 ** -1 + per_value[rows:] * 2.0 ** -9).all()
    assert (hi != exact).sum() > K // 4 and (lo != 0).sum() > K // 4  # the residual row carries bits
    assert (hi + lo == exact).float().mean() > 0.8
    checked += 1
print("OK", checked)
"""


def test_codes_and_residual_give_the_bf16_values_back():
    """Two row shapes: the codes row equals ``act_quant``'s; codes + residual closer to x than the codes alone,
    mostly exact; the residual row is not empty."""
    assert "OK 2" in run_interpreted(SCRIPT)
