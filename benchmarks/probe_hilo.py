"""act_quant_hilo's residual row on the GPU against torch's E4M3 rounding of the residual, at 1 to 8 rows (session 38:
the kernel with both stores at its end gave wrong residuals for part of a row; run before tests/gpu when the kernel
changes: it prints which rows differ)."""
import torch

from deepinfer_adapters.kernels import triton_fp8_gemm as tg

g = torch.Generator(device="cuda").manual_seed(1)
for rows in (1, 3, 8):
    x = torch.randn(rows, 4096, device="cuda", generator=g).bfloat16()
    q, s = tg.act_quant_hilo(x, 32)
    per = s.double().repeat_interleave(32, dim=-1)
    hi = q[:rows].double() * per[:rows]
    r = x.double() - hi
    want = (r / per[rows:]).float().to(torch.float8_e4m3fn)
    differ = (q[rows:].view(torch.uint8) != want.view(torch.uint8)).sum().item()
    exact = ((hi + q[rows:].double() * per[rows:]) == x.double()).float().mean().item()
    print(f"rows {rows}: residual codes differing from torch's {differ}, exact values {exact:.4f}")
