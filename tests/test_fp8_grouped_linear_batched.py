"""``triton_fp8_gemm.fp8_grouped_linear``'s prefill form (``GROUPED_CUBLAS``: from ``LARGE_M`` rows, one
batched GEMM of the dequantized weight whose groups write their blocks of the [T, G, R] result in place)
against ``reference_fp8.fp8_grouped_linear`` on the CPU: the same values, a contiguous result, and the
group blocks where they belong (a control with the groups swapped must differ)."""

from __future__ import annotations

import torch

from deepinfer_adapters.kernels import reference_fp8
from deepinfer_adapters.kernels import triton_fp8_gemm as tg


def test_batched_groups_write_their_blocks_in_place():
    g = torch.Generator().manual_seed(0)
    T, G, R, Din = tg.LARGE_M + 6, 8, 64, 96
    w = (torch.randn(G * R, Din, generator=g) * 0.1).to(torch.float8_e4m3fn)
    scale = torch.randint(120, 128, (G * R // 32, Din // 32), generator=g).to(torch.uint8)
    x = torch.randn(T, G, Din, generator=g).bfloat16()
    assert tg.GROUPED_CUBLAS and tg.LARGE_M_PATH == "bf16_cublas"
    out = tg.fp8_grouped_linear(x, w, scale, (32, 32))
    ref = reference_fp8.fp8_grouped_linear(x, w, scale, (32, 32))
    assert out.shape == (T, G, R) and out.is_contiguous() and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref.float(), rtol=2**-7, atol=2**-7 * float(ref.float().abs().max()))
    swapped = out[:, [1, 0, *range(2, G)]]
    assert not torch.allclose(swapped.float(), ref.float(), rtol=2**-7, atol=1e-3)
