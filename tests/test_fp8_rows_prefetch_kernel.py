"""``fp8_gemm_rows_kernel`` (the swapped decode GEMV) with its scales loaded one K iteration ahead
(``triton_fp8_gemm.PREFETCH_SCALES``) against the same kernel loading them in their own iteration, under
Triton's CPU interpreter: the same bits for FP8 steps, bf16 steps and in-kernel activation quantization,
with K split and not, and for ``fp8_gemm_kernel``'s bf16 path (the MoE's). FP8 steps also against the
product of the dequantized codes in fp32 (the interpreter's FP8 products are exact; its bf16 products are
not, so bf16 steps are compared between the two loads only; its E4M3 casts truncate, so the codes are
act_quant's here, not the reference's)."""

from __future__ import annotations

from tests.triton_interpreter import run_interpreted

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_fp8_gemm as tg

g = torch.Generator().manual_seed(0)
M, N, K, B = 3, 128, 1024, (32, 32)
w = (torch.randn(N, K, generator=g) * 0.5).to(torch.float8_e4m3fn)
ws = torch.randint(118, 126, (N // 32, K // 32), generator=g).to(torch.uint8).view(torch.float8_e8m0fnu)
x = torch.randn(M, K, generator=g).bfloat16()
q, s = tg.act_quant(x, 32)
w_values = w.float() * ws.float().repeat_interleave(32, 0).repeat_interleave(32, 1)
ref = (q.float() * s.repeat_interleave(32, 1)) @ w_values.T
checked = 0
for programs in (1, 64):  # K whole (one program a row tile, 8 iterations) or split
    for bf16_steps, sub in ((False, 4), (False, 2), (True, 1)):
        cfg = tg.GemmConfig(16, 64, sub, 4, 3, programs=programs)
        outs = []
        for prefetch in (True, False):
            tg.PREFETCH_SCALES = prefetch
            outs.append(tg.gemm(q, s, 32, w, ws, B, torch.float32, config=cfg, swapped=True, bf16_steps=bf16_steps))
        assert torch.equal(outs[0], outs[1]), (programs, bf16_steps, sub)
        if not bf16_steps:
            err = (outs[0] - ref).abs().max() / ref.abs().max()
            assert err < 1e-5, (programs, sub, float(err))
        checked += 1
    outs = []
    for prefetch in (True, False):  # the activation quantized in the kernel (no activation scales to load)
        tg.PREFETCH_SCALES = prefetch
        outs.append(tg.gemm(x, None, 32, w, ws, B, torch.float32, config=tg.GemmConfig(16, 64, 1, 4, 3, programs),
                            swapped=True, quantize_a=True, bf16_steps=False, kstep=None))
    assert torch.equal(outs[0], outs[1])
    checked += 1
# the rows-first kernel on the bf16 path (the MoE's: bf16 activations, E4M3 weights with a scale per row
# and 128 inputs), K whole and split
ws1 = torch.randint(118, 126, (N, K // 128), generator=g).to(torch.uint8).view(torch.float8_e8m0fnu)
for programs in (1, 64):
    outs = []
    for prefetch in (True, False):
        tg.PREFETCH_SCALES = prefetch
        cfg = tg.GemmConfig(16, 64, 1, 4, 3, programs)
        outs.append(tg.gemm(x, None, 0, w, ws1, (1, 128), torch.float32, config=cfg, swapped=False))
    assert torch.equal(outs[0], outs[1])
    checked += 1
print("OK", checked)
"""


def test_prefetched_scales_give_the_same_bits_under_the_interpreter():
    assert run_interpreted(SCRIPT).split() == ["OK", "10"]
