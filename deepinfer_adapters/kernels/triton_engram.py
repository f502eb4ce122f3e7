"""Triton backend of ``engram_gate`` (V4.1's Engram after its projection; CUDA, registered as "triton").

The torch reference is ~24 launches (casts, three row reductions, the gate's sqrt / copysign /
sigmoid, the broadcast add); at decode its reductions over [T, hc, 5120] run with a few blocks each
(~11 us apiece on the H200 at 8 tokens: ~75 us a layer, two Engram layers in V4.1-Flash). Here one
program per (token, stream) holds the stream's D values, its key, both weights and the value in
registers: one read of each, one write. H200, session 10: 4.3 us at 8 tokens in the decode step's
profile (benchmarks/KERNELS_real_width_decode_b8_s10.txt).

Numerics: the reference's operations in fp32, in its order per element (x * (q_weight * k_weight) *
key; rsqrt.approx, sqrt.rn and expf as torch on CUDA), except that the three sums over D are added
in another tree (a few fp32 ulps on the gate; the bf16 output rounds to the same value or its
neighbour). A row's
result depends on that row alone (tile shapes from D only): batch-invariant.
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.reference import ENGRAM_GATE_FLOOR
from deepinfer_adapters.kernels.triton_support import interpreting, pdl_launch, triton_available

MAX_WIDTH = 16384  # widest stream kept in registers


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start, libdevice  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    if not interpreting():
        from triton.language.extra import libdevice  # expf, as torch's sigmoid (tl.exp: ex2.approx)

    @triton.jit
    def engram_gate_kernel(X, KV, QW, KW, MASK, OUT, D, stride_xt, stride_xs, stride_kv, stride_ot, stride_os,
                           inv_d, inv_sqrt_d, eps, floor, HC: tl.constexpr, HAS_MASK: tl.constexpr,
                           BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
        pdl_start()
        t = tl.program_id(0).to(tl.int64)
        s = tl.program_id(1)
        cols = tl.arange(0, BLOCK_D)
        mask = cols < D
        h = tl.load(X + t * stride_xt + s * stride_xs + cols, mask=mask, other=0.0).to(tl.float32)
        key = tl.load(KV + t * stride_kv + s * D + cols, mask=mask, other=0.0).to(tl.float32)
        weight = (tl.load(QW + s * D + cols, mask=mask, other=0.0).to(tl.float32)
                  * tl.load(KW + s * D + cols, mask=mask, other=0.0).to(tl.float32))
        # rsqrt.approx and sqrt.rn, as torch's rsqrtf and sqrtf on CUDA
        rstd = tl.rsqrt(tl.sum(h * h, 0) * inv_d + eps) * tl.rsqrt(tl.sum(key * key, 0) * inv_d + eps)
        dot = tl.sum(h * weight * key, 0) * rstd * inv_sqrt_d
        root = tl.sqrt_rn(tl.maximum(tl.abs(dot), floor))
        signed = tl.where(dot < 0, -root, root)
        if INTERPRET:
            gate = 1.0 / (1.0 + tl.exp(-signed))
        else:
            gate = 1.0 / (1.0 + libdevice.exp(-signed))
        if HAS_MASK:
            gate = tl.where(tl.load(MASK + t) != 0, gate, 0.0)
        value = tl.load(KV + t * stride_kv + HC * D + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(OUT + t * stride_ot + s * stride_os + cols, (h + gate * value).to(OUT.dtype.element_ty), mask=mask)

    return triton, engram_gate_kernel


def engram_gate(x: torch.Tensor, kv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float,
                token_mask: torch.Tensor | None = None) -> torch.Tensor:
    """See ``reference.engram_gate``."""
    triton, kernel = _kernel()
    T, hc, D = x.shape
    x = x if x.stride(-1) == 1 else x.contiguous()
    kv = kv if kv.stride(-1) == 1 else kv.contiguous()
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    mask = token_mask.to(torch.uint8) if token_mask is not None else out
    if T:
        block = triton.next_power_of_2(D)
        kernel[(T, hc)](x, kv, q_weight.contiguous(), k_weight.contiguous(), mask, out, D, x.stride(0), x.stride(1),
                        kv.stride(0), out.stride(0), out.stride(1), 1.0 / D, float(D**-0.5), float(eps),
                        ENGRAM_GATE_FLOOR, HC=hc, HAS_MASK=token_mask is not None, BLOCK_D=block,
                        INTERPRET=interpreting(),
                        num_warps=max(4, min(16, block // 1024)), **pdl_launch())
    return out


def supports(x, kv, q_weight, k_weight, eps, token_mask=None) -> bool:
    return (x.is_cuda and x.dim() == 3 and x.dtype in (torch.bfloat16, torch.float32) and x.shape[-1] <= MAX_WIDTH
            and kv.shape[-1] == (x.shape[1] + 1) * x.shape[2] and triton_available())


register("engram_gate", "triton", engram_gate, supports=supports, priority=10)
