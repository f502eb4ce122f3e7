"""Triton backend of ``hc_post_pre_norm`` (CUDA; registered as "triton"): a sublayer's ``hc_post`` and the next
sublayer's ``hc_pre_norm`` of the new streams in one launch.

In a V4.1 block each ``hc_post`` (the hc streams updated with a sublayer's output) is followed by the next
sublayer's pre-norm of those streams, whose ``pre`` weights are known before it (single-pass hyper-connections,
model_spec.md 2.2; layers/block_v41.py). As two kernels a decode step waits for the second after the first and
reads the new streams back; at one token the pre-norm, a one-program kernel, sat on the critical path for ~1.9 us a
call (H200, session 27's ``probe_hc_pre_norm``: 26 us over a step's 14 calls).

Design: every program computes one token's whole row -- the hc new streams, their collapse with ``pre``, its
RMS -- and writes one slice of D of the streams and of the normed row. Up to ``SLICED_TOKENS`` tokens the slices are
``SLICE`` wide: the writes spread over many programs and every program reads the token's streams and output (~50
KB at V4.1's widths, from L2), so no program waits for another; above, a program writes its token's whole row (one
read, one write of everything, as the two kernels' programs at prefill).

Arithmetic: the operations and their order of ``triton_hc.hc_post`` (each product rounded to fp32, the residual's
streams added in stream order, then the post term; cast to y's dtype) and of ``triton_norm_rope``'s rms_norm with
HC (the new streams as stored, collapsed with ``pre`` in stream order and cast to the output dtype; the square sum
over a [1, BLOCK_N] tile in the same number of warps; rsqrt; x r, then weight (x r)), so the two kernels' bits
(tests/gpu/test_hc_post_norm_gpu.py checks them).
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.triton_support import FLOAT_DTYPES, pdl_launch, triton_available

SLICE = 256  # values of D a program writes at few tokens (as triton_hc's hc_post blocks at T <= 64)
SLICED_TOKENS = 64
MAX_WIDTH = 16384  # the whole row in registers (triton_norm_rope.NORM_MAX_WIDTH)


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def norm_warps(block_n: int) -> int:
    """The warps of triton_norm_rope's rms_norm for one row of ``block_n`` values: the square sum's tree."""
    return max(4, min(16, block_n // 1024))


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def hc_post_norm_kernel(Y, R, POST, COMB, PRE, W, OUT, H, D, slice_d, stride_yt, stride_rt, stride_rh, stride_pt,
                            stride_ct, stride_qt, stride_ot, stride_oh, stride_ht, inv_n, eps,
                            HC: tl.constexpr, HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr):
        """Token pid0: out_b = post_b y + sum_a comb[a, b] r_a (stored), h = norm(sum_b pre_b out_b); this program
        stores the D slice [pid1 * slice_d, +slice_d) of both."""
        pdl_start()
        t = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_N)[None, :]  # [1, BLOCK_N]: the rms_norm kernel's tile at one row
        inside = cols < D
        lo = tl.program_id(1) * slice_d
        mine = inside & (cols >= lo) & (cols < lo + slice_d)
        r = R + t * stride_rt + cols
        comb = COMB + t * stride_ct
        y = tl.load(Y + t * stride_yt + cols, mask=inside, other=0.0).to(tl.float32)
        x = tl.zeros([1, BLOCK_N], tl.float32)
        for b in tl.static_range(HC):
            mixed = tl.load(comb + b) * tl.load(r, mask=inside, other=0.0).to(tl.float32)
            for a in tl.static_range(1, HC):
                mixed += tl.load(comb + a * HC + b) * tl.load(r + a * stride_rh, mask=inside, other=0.0).to(tl.float32)
            out = (tl.load(POST + t * stride_pt + b) * y + mixed).to(OUT.dtype.element_ty)
            tl.store(OUT + t * stride_ot + b * stride_oh + cols, out, mask=mine)
            term = tl.load(PRE + t * stride_qt + b) * out.to(tl.float32)
            if b == 0:
                x = term
            else:
                x += term
        x = x.to(H.dtype.element_ty).to(tl.float32)
        rs = tl.rsqrt(tl.sum(x * x, axis=1) * inv_n + eps)
        h = x * rs[:, None]
        if HAS_WEIGHT:
            h = tl.load(W + cols, mask=inside, other=0.0).to(tl.float32) * h
        tl.store(H + t * stride_ht + cols, h.to(H.dtype.element_ty), mask=mine)

    return triton, hc_post_norm_kernel


def hc_post_pre_norm(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
                     pre: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``reference.hc_post_pre_norm``: y [..., D], residual [..., hc, D], post / pre [..., hc],
    comb [..., hc, hc] (fp32) -> (new streams [..., hc, D], their pre-norm [..., D]) in y's dtype."""
    triton, kernel = _kernel()
    hc, D = residual.shape[-2:]
    y2 = _rows(y.reshape(-1, D))
    r = _rows(residual.reshape(-1, hc, D))
    p, q, c = _rows(post.reshape(-1, hc)), _rows(pre.reshape(-1, hc)), _rows(comb.reshape(-1, hc * hc))
    T = y2.shape[0]
    out = torch.empty(T, hc, D, device=y.device, dtype=y.dtype)
    h = torch.empty(T, D, device=y.device, dtype=y.dtype)
    if T and D:
        block_n = _pow2(D)
        slice_d = min(SLICE, block_n) if T <= SLICED_TOKENS else block_n
        w = h if weight is None else weight.contiguous()  # unused when weightless
        kernel[(T, triton.cdiv(D, slice_d))](
            y2, r, p, c, q, w, out, h, D, slice_d, y2.stride(0), r.stride(0), r.stride(1), p.stride(0), c.stride(0),
            q.stride(0), out.stride(0), out.stride(1), h.stride(0), 1.0 / D, float(eps), HC=hc,
            HAS_WEIGHT=weight is not None, BLOCK_N=block_n, num_warps=norm_warps(block_n), enable_fp_fusion=False,
            **pdl_launch())
    return out.view(*residual.shape), h.view(*y.shape)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """t with unit stride along its last dim (a copy only where it has not)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def supports(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor, pre: torch.Tensor,
             weight: torch.Tensor | None, eps: float) -> bool:
    if not all(t.is_cuda for t in (y, residual, post, comb, pre)) or residual.dim() < 2:
        return False
    hc, D = residual.shape[-2:]
    lead = residual.shape[:-2]
    return (y.dtype in FLOAT_DTYPES and residual.dtype == y.dtype and 0 < D <= MAX_WIDTH and 1 <= hc <= 16
            and post.dtype == comb.dtype == pre.dtype == torch.float32 and y.shape == lead + (D,)
            and post.shape == pre.shape == lead + (hc,) and comb.shape == lead + (hc, hc)
            and (weight is None or (weight.is_cuda and weight.shape == (D,))) and triton_available())


register("hc_post_pre_norm", "triton", hc_post_pre_norm, supports=supports, priority=10)
