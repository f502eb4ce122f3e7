"""``fp8_gemm_rows_kernel``'s bf16 steps (the swapped decode GEMV) reading the E8M0 weight scales as one
int32 word a row and 128-input step (``triton_fp8_gemm.SCALE_WORDS``) against the same kernel reading a
byte per 32-input scale block, under Triton's CPU interpreter: the same bits, with stored and in-kernel
quantized activations, K whole and split, with a last row tile past N (the interpreter's bf16 products
are not exact, so the two forms are compared with each other; both sides take the same products). A
control with the scale words' bytes in the wrong order must differ."""

from __future__ import annotations

from tests.triton_interpreter import run_interpreted

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_fp8_gemm as tg

g = torch.Generator().manual_seed(0)
M, N, K, B = 3, 160, 1024, (32, 32)  # N: two full row tiles of 64 and a partial one
w = (torch.randn(N, K, generator=g) * 0.5).to(torch.float8_e4m3fn)
ws = torch.randint(118, 126, (N // 32, K // 32), generator=g).to(torch.uint8).view(torch.float8_e8m0fnu)
x = torch.randn(M, K, generator=g).bfloat16()
q, s = tg.act_quant(x, 32)


def both(a, a_scale, quantize_a, programs):
    outs = []
    for words in (True, False):
        tg.SCALE_WORDS = words
        cfg = tg.GemmConfig(16, 64, 1, 4, 3, programs)
        outs.append(tg.gemm(a, a_scale, 32, w, ws, B, torch.float32, config=cfg, swapped=True, bf16_steps=True,
                            quantize_a=quantize_a))
    tg.SCALE_WORDS = True
    return outs


checked = 0
for programs in (1, 64):  # K whole (one program a row tile, 8 steps) or split
    for a, a_scale, quantize_a in ((q, s, False), (x, None, True)):
        words, bytes_ = both(a, a_scale, quantize_a, programs)
        assert torch.equal(words, bytes_), (programs, quantize_a)
        checked += 1
print("OK", checked)
"""


def test_scale_words_give_the_same_bits_under_the_interpreter():
    assert run_interpreted(SCRIPT).split() == ["OK", "4"]
