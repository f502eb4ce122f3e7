"""Prefill-sized dense FP8 linears on cuBLAS's block-scaled FP8 GEMM (``torch.nn.functional.scaled_mm``: DeepSeek's
1 x 128 activation scales, 128 x 128 weight scales), for ``triton_fp8_gemm.fp8_linear``.

Why: V4.1's dense linears carry (32, 32) weight scales and per-32 activation scales, which no FP8 GEMM library
takes, so the prefill ran them as bf16 GEMMs on exactly dequantized values (~750 TFLOP/s on the H200, ~26 ms of
the 8192-token prefill, session 29). Here both sides are re-expressed under wider scales first: the activations'
per-32 codes under each 128 values' largest scale (``act_quant``'s ``scale_block``), the weight's codes under
each 128 x 128 tile's largest scale (``widen_weight_kernel``, one pass a call: ~2 bytes a weight value, where the
bf16 path wrote 2 and read them again); row counts padded to a multiple of ``ROW_ALIGN``.

Probe on the H200 (benchmarks/probe_scaled_mm_blockwise.py, session 30, 8192 rows, the GEMMs alone): wo_b 573
against 829 us on bf16 (1199 TFLOP/s), wq_b 676 against 863, the shared expert's w13 355 against 517; wkv (N 512)
77 against 70, the only one slower. The 8192-token prefill: 104.38 against 113.13 ms (``DENSE_FP8``, part s30d).

Numerics: a code times an exact power-of-two ratio changes only where it falls below E4M3's normal range (2^-6 of
the wide scale): by at most half a subnormal step, 2^-10 of the wide scale -- far under the per-32 codes' own
rounding. The products are then summed by the FP8 tensor cores in 128-deep groups promoted to fp32, not in the
reference's order: other bits than the bf16 path, so batch-invariant mode never takes this path.
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels.triton_support import interpreting, pdl_launch, triton_available

# prefill-sized dense linears (fp8_linear with no path given, from LARGE_M rows, not batch-invariant) here where
# they fit, instead of LARGE_M_PATH. H200, session 30, the 8192-token prefill (part s30d, one run, medians of 3):
# 104.38 ms against 113.13 on the bf16 GEMMs
DENSE_FP8 = True
# cuBLAS refused a row count of 1027 (CUBLAS_STATUS_NOT_SUPPORTED; its 1 x 128 scales' leading dimension is the
# row count): rows are padded with zeros to a multiple of this first
ROW_ALIGN = 16
E8M0 = (torch.uint8, torch.float8_e8m0fnu)


@functools.cache
def _available(device_index: int) -> bool:
    """cuBLAS block-scaled FP8 through torch: ``F.scaled_mm`` and a Hopper GPU (Blackwell's takes other layouts)."""
    return hasattr(torch.nn.functional, "scaled_mm") and triton_available() \
        and torch.cuda.get_device_capability(device_index) == (9, 0)


def takes(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int],
          act_block: int) -> bool:
    """Whether ``linear`` takes this call: ``DENSE_FP8``, bf16 rows on an sm_90 GPU, an E4M3 [N, K] weight with
    scales per (128, 128) blocks, or E8M0 scales (powers of two by their format: the re-expression's ratios must be
    exact) per (B0, B1) blocks dividing 128; activations quantized per 32 or 128, K a multiple of 128."""
    if not (DENSE_FP8 and x.is_cuda and not interpreting() and x.dtype == torch.bfloat16):
        return False
    if weight.dim() != 2 or weight.dtype != torch.float8_e4m3fn or act_block not in (32, 128):
        return False
    N, K = weight.shape
    if K % 128 or any(128 % b for b in block) or scale.dim() != 2:
        return False
    if tuple(block) != (128, 128) and scale.dtype not in E8M0:
        return False
    return _available(x.device.index if x.device.index is not None else torch.cuda.current_device())


def _outer_major(s: torch.Tensor) -> torch.Tensor:
    """The same values, the first dimension contiguous (cuBLAS's layout for 1 x 128 scales)."""
    return s.t().contiguous().t()


def widen_weight(weight: torch.Tensor, scale: torch.Tensor,
                 block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 [N, K], fp32 scales [N / 128, K / 128]) of a block-scaled E4M3 weight: each code under its 128 x 128
    tile's largest scale (``widen_weight_kernel``; E8M0 scales), K / 128 padded to a multiple of 4 with zeros, as
    cuBLAS reads them. Scales already per (128, 128) block (V4's) are taken as they are. (Scales per row's 128
    columns, cuBLAS's 1 x 128 for the weight, ran slower: 2.82 against 2.16 ms for the probe's seven GEMMs, session
    30.)"""
    import triton

    N, K = weight.shape
    steps = K // 128
    qs = torch.zeros(triton.cdiv(N, 128), -(-steps // 4) * 4, device=weight.device)
    if tuple(block) == (128, 128):
        qs[:, :steps] = scale.view(torch.float8_e8m0fnu).float() if scale.dtype in E8M0 else scale.float()
        return weight, qs
    if scale.dtype not in E8M0:
        raise ValueError(f"widen_weight: finer blocks than (128, 128) need E8M0 scales, not {scale.dtype}")
    from deepinfer_adapters.kernels.widen_weight_jit import widen_weight_kernel

    weight = weight if weight.stride(-1) == 1 else weight.contiguous()
    s = scale.view(torch.uint8)
    s = s if s.stride(-1) == 1 else s.contiguous()
    q = torch.empty_like(weight)
    if N and K:
        widen_weight_kernel[(triton.cdiv(N, 128), steps)](weight, s, q, qs, N, K, weight.stride(0), s.stride(0),
                                                           q.stride(0), qs.stride(0), B0=block[0], B1=block[1],
                                                           num_warps=8, **pdl_launch())
    return q, qs


def linear(x2: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int],
           act_block: int) -> torch.Tensor:
    """bf16 [M, N] = x2 [M, K] (bf16, quantized per ``act_block`` as the reference does) @ the weight's values.T,
    on cuBLAS's block-scaled FP8 GEMM; see ``takes``."""
    from deepinfer_adapters.kernels.triton_fp8_gemm import act_quant

    F = torch.nn.functional
    M = x2.shape[0]
    if M % ROW_ALIGN:
        x2 = F.pad(x2, (0, 0, 0, -M % ROW_ALIGN))
    q, s = act_quant(x2, act_block, scale_block=128)
    wq, ws = widen_weight(weight, scale, block)
    out = F.scaled_mm(q, wq.t(), _outer_major(s), F.ScalingType.BlockWise1x128, ws.t(),
                      F.ScalingType.BlockWise128x128, output_dtype=x2.dtype)
    return out[:M]
