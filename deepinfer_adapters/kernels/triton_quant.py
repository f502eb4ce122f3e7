"""Triton backends of the cache round trips ``fp8_roundtrip``, ``fp4_roundtrip_e8m0`` and
``fp4_roundtrip_e4m3`` (CUDA; registered as "triton").

The model runs them on every cached key and index query (model_impl/quant.py: the
official kernels' quantize-dequantize, which the weights were trained with). The torch
references take 12-20 elementwise kernels per call; here one each, with the same
arithmetic step for step (quant.py's rules; fp8_triton_jit.py's kernels), so the results
are bitwise the reference's (tests/test_quant_kernels.py under Triton's interpreter,
tests/gpu/test_quant_gpu.py on the GPU).
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels import triton_fp8_gemm as fp8
from deepinfer_adapters.kernels.triton_support import pdl_launch, triton_available

_DTYPES = (torch.bfloat16, torch.float32, torch.float16)


@functools.cache
def _kernel():
    import triton

    from deepinfer_adapters.kernels import fp8_triton_jit as jit  # imports triton at its top

    return triton, jit.fp4_roundtrip_kernel


def fp8_roundtrip(x: torch.Tensor, block: int, dims: slice | None = None) -> torch.Tensor:
    """See ``quant.fp8_roundtrip`` (``dims`` None only: ``supports``)."""
    n = x.shape[-1]
    return fp8.act_quant(x.reshape(-1, n), block, dequant_to=x.dtype)[0].view(x.shape)


def _fp4(x: torch.Tensor, group: int, e4m3_scale: bool) -> torch.Tensor:
    triton, kernel = _kernel()
    n = x.shape[-1]
    rows = x.reshape(-1, n)
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    if rows.is_contiguous() and rows.numel():
        # groups never cross rows (n is a multiple of the group): one long row, up to 4096 values a program.
        # Why: the indexer's queries at prefill are 262144 rows of 128; a program a row took 316 us for 67 MB
        rows = rows.view(1, -1)
        n = rows.shape[1]
    out = torch.empty(rows.shape, device=x.device, dtype=x.dtype)
    groups = fp8.quant_groups(n // group, group)
    if rows.shape[0] and n:
        kernel[(rows.shape[0], triton.cdiv(n // group, groups))](
            rows, out, n, rows.stride(0), out.stride(0), GROUP=group, GROUPS=groups, E4M3_SCALE=e4m3_scale,
            num_warps=4, **pdl_launch())
    return out.view(x.shape)


def fp4_roundtrip_e8m0(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """See ``quant.fp4_roundtrip_e8m0``."""
    return _fp4(x, block, False)


def fp4_roundtrip_e4m3(x: torch.Tensor, group: int = 16) -> torch.Tensor:
    """See ``quant.fp4_roundtrip_e4m3``."""
    return _fp4(x, group, True)


def _fits(x: torch.Tensor, block: int) -> bool:
    return (x.is_cuda and x.dtype in _DTYPES and x.dim() >= 1 and block >= 1 and block & (block - 1) == 0
            and x.shape[-1] % block == 0 and triton_available())


def supports_fp8(x: torch.Tensor, block: int, dims: slice | None = None) -> bool:
    return dims is None and _fits(x, block)


def supports_fp4_e8m0(x: torch.Tensor, block: int = 32) -> bool:
    return _fits(x, block)


def supports_fp4_e4m3(x: torch.Tensor, group: int = 16) -> bool:
    return _fits(x, group)


register("fp8_roundtrip", "triton", fp8_roundtrip, supports=supports_fp8, priority=10)
register("fp4_roundtrip_e8m0", "triton", fp4_roundtrip_e8m0, supports=supports_fp4_e8m0, priority=10)
register("fp4_roundtrip_e4m3", "triton", fp4_roundtrip_e4m3, supports=supports_fp4_e4m3, priority=10)
