"""Probe: cuBLAS's block-scaled FP8 GEMM (``torch.nn.functional.scaled_mm``, DeepSeek's 1 x 128 activation scales
with 128 x 128 weight scales) on the H200 for V4.1's dense prefill linears at 8192 tokens, against the
bf16 cuBLAS GEMM the prefill runs now (``triton_fp8_gemm.LARGE_M_PATH`` "bf16_cublas"): whether torch takes these
scales on sm_90, how close each is to exact fp64 sums of the same codes and scales (a row slice), and the time.

Why: the dense linears are ~26 ms of the 8192-token prefill on cuBLAS bf16 at ~750 TFLOP/s (session 29's profile);
V4.1's [32, 32] weight scales kept them off FP8 products. Activations re-expressed per 128 (``act_quant``'s
``scale_block``) and weights likewise per 128 x 128 tile let one FP8 GEMM take them (``kernels/fp8_blockwise.py``).

Session 30: 128 x 128 weight scales taken (K / 128 padded to a multiple of 4); 1 x 128 weight scales taken as
[N, K / 128] with the first dimension contiguous, but slower (2.82 against 2.16 ms over the seven GEMMs: removed
since). The whole paths' times include the host's launches (the GPU waits for them here; in the model it does not).

Run on the GPU machine:  PYTHONPATH=. python benchmarks/probe_scaled_mm_blockwise.py
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

from benchmarks.timing import rel, run_info, time_eager
from deepinfer_adapters.kernels import fp8_blockwise
from deepinfer_adapters.kernels import triton_fp8_gemm as tg

M = 8192
SHAPES = {"wq_a": (1280, 5120), "wq_b": (32768, 1280), "wkv": (512, 5120), "wo_b": (5120, 8192),
          "shared_w13": (4608, 5120), "shared_w2": (5120, 2304), "index_wq_b": (4096, 1280)}
CHECK_ROWS = 256


def outer_major(s: torch.Tensor) -> torch.Tensor:
    """The same values with the first dimension contiguous (cuBLAS's scale layout for 1 x 128 blocks)."""
    return s.t().contiguous().t()


def main() -> None:
    print(f"INFO {json.dumps(run_info())}", flush=True)
    print(f"torch {torch.__version__}: F.scaled_mm {hasattr(F, 'scaled_mm')}", flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    total: dict[str, float] = {}
    for name, (N, K) in SHAPES.items():
        x = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        w = (torch.randn(N, K, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        exps = torch.randint(113, 119, (-(-N // 32), K // 32), device="cuda", generator=g, dtype=torch.uint8)
        q, s = tg.act_quant(x, 32, scale_block=128)
        wq, ws = fp8_blockwise.widen_weight(w, exps, (32, 32))
        xa = tg.act_quant(x, 32, dequant_to=torch.bfloat16)[0]
        wb = tg.dequant_bf16(w, exps, (32, 32))
        a64 = xa[:CHECK_ROWS].double()
        exact = a64 @ wb.double().T  # the reference's values: per-32 activations, (32, 32) weight scales

        variants = {
            "bf16 gemm": lambda: F.linear(xa, wb),
            "fp8 gemm w 128x128": lambda: F.scaled_mm(q, wq.t(), outer_major(s), F.ScalingType.BlockWise1x128,
                                                      ws.t(), F.ScalingType.BlockWise128x128,
                                                      output_dtype=torch.bfloat16),
            "bf16 path (act round trip, dequant, gemm)": lambda: tg.fp8_linear(x, w, exps, (32, 32), 32,
                                                                               path="bf16_cublas"),
            "fp8 path w 128x128 (act_quant, widen, gemm)": lambda: fp8_blockwise.linear(x, w, exps, (32, 32), 32),
        }
        flops = 2 * M * N * K
        for label, fn in variants.items():
            try:
                err = rel(fn()[:CHECK_ROWS].double(), exact)
                us = time_eager(fn, reps=10, warm=2)
                total[label] = total.get(label, 0.0) + us
                print(f"{name} [{M}, {K}] x [{N}, {K}] {label}: rel to the reference's values {err:.2e}, "
                      f"{us:8.1f} us, {flops / us / 1e6:6.0f} TFLOP/s", flush=True)
            except Exception as e:  # a layout torch or cuBLAS refuses: say so and go on
                print(f"{name} {label}: {type(e).__name__}: {str(e)[:200]}", flush=True)
    print("SUMMARY total us over the shapes (one call each; a refused variant's shapes left out): "
          + ", ".join(f"{k} {v:.0f}" for k, v in total.items()), flush=True)


if __name__ == "__main__":
    main()
