"""Triton backend of ``hc_post_pre_norm`` (CUDA; registered as "triton"): a sublayer's ``hc_post`` and the next
sublayer's ``hc_pre_norm`` of the new streams in one launch.

In a V4.1 block each ``hc_post`` (the hc streams updated with a sublayer's output) is followed by the next
sublayer's pre-norm of those streams, whose ``pre`` weights are known before it (single-pass hyper-connections,
model_spec.md 2.2; layers/block_v41.py). As two kernels a decode step waits for the second after the first, and the
second, one program a token, reads the token's new streams back (40 KB at V4.1's widths); at one token that norm sat
on the critical path for ~1.9 us a call (H200, session 27's ``probe_hc_pre_norm``: 26 us over a step's 14 calls).

Design: programs of (token, a slice of D), as ``triton_hc.hc_post``'s (``triton_hc.block_d``). Each writes its
slice of the new streams and of their collapse with ``pre`` (the norm's input, in the output dtype, to a scratch
row), then counts itself in the token's arrival counter (acquire-release); the token's last program reads the
collapsed row back (10 KB) and writes the normed row, then re-arms the counter (``arrival_counters``: one set a CUDA
stream).
(Session 27's first form, every program computing the token's whole row and writing a slice, no counters, was
slower than the two kernels: B=1 1.754-1.767 ms against 1.710, B=8 4.54-4.57 against 4.43.)

Arithmetic: the operations and their order of ``triton_hc.hc_post`` (each product rounded to fp32, the residual's
streams added in stream order, then the post term; cast to y's dtype) and of ``triton_norm_rope``'s rms_norm with
HC (the new streams as stored, collapsed with ``pre`` in stream order, cast to the output dtype; the square sum over
that kernel's [BLOCK_R, BLOCK_N] tile with only the token's row live, in the same number of warps; rsqrt; x r, then
weight (x r)), so the two kernels' bits
(tests/gpu/test_hc_post_norm_gpu.py checks them).
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.arrival_counters import counters
from deepinfer_adapters.kernels.triton_hc import block_d, post_operands, rows
from deepinfer_adapters.kernels.triton_norm_rope import NORM_MAX_WIDTH, norm_rows, norm_warps
from deepinfer_adapters.kernels.triton_support import FLOAT_DTYPES, pdl_launch, triton_available


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    @triton.jit
    def hc_post_norm_kernel(Y, R, POST, COMB, PRE, W, OUT, H, XPRE, COUNT, D, stride_yt, stride_rt, stride_rh,
                            stride_pt, stride_ct, stride_qt, stride_ot, stride_oh, stride_ht, inv_n, eps,
                            HC: tl.constexpr, HAS_WEIGHT: tl.constexpr, SLICE_D: tl.constexpr,
                            BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
        """Token pid0, D slice pid1: out_b = post_b y + sum_a comb[a, b] r_a and x = sum_b pre_b out_b (stored);
        the token's last program: h = norm(x) for the whole row."""
        pdl_start()
        t = tl.program_id(0).to(tl.int64)
        offs = tl.program_id(1) * SLICE_D + tl.arange(0, SLICE_D)
        mask = offs < D
        r = R + t * stride_rt + offs
        comb = COMB + t * stride_ct
        y = tl.load(Y + t * stride_yt + offs, mask=mask, other=0.0).to(tl.float32)
        x = tl.zeros([SLICE_D], tl.float32)
        for b in tl.static_range(HC):
            mixed = tl.load(comb + b) * tl.load(r, mask=mask, other=0.0).to(tl.float32)
            for a in tl.static_range(1, HC):
                mixed += tl.load(comb + a * HC + b) * tl.load(r + a * stride_rh, mask=mask, other=0.0).to(tl.float32)
            out = (tl.load(POST + t * stride_pt + b) * y + mixed).to(OUT.dtype.element_ty)
            tl.store(OUT + t * stride_ot + b * stride_oh + offs, out, mask=mask)
            term = tl.load(PRE + t * stride_qt + b) * out.to(tl.float32)
            if b == 0:
                x = term
            else:
                x += term
        tl.store(XPRE + t * D + offs, x.to(H.dtype.element_ty), mask=mask)
        tl.debug_barrier()  # every thread's stores issued before the arrival releases them
        before = tl.atomic_add(COUNT + t, 1, sem="acq_rel", scope="gpu")
        if before == tl.num_programs(1) - 1:  # the token's last program: every slice of x is written
            tl.atomic_xchg(COUNT + t, 0, sem="relaxed", scope="gpu")  # re-armed for the next call
            # the rms_norm kernel's [BLOCK_R, BLOCK_N] tile with only its first row live: the same square-sum
            # tree (at narrow D that kernel norms several rows a program; one row's tile summed in another order,
            # 1 of 81,600 bf16 values at D 320, session 31)
            tile_rows = tl.arange(0, BLOCK_R)[:, None]
            cols = 0 * tile_rows + tl.arange(0, BLOCK_N)[None, :]  # [BLOCK_R, BLOCK_N], each row the token's
            live = (tile_rows == 0) & (cols < D)
            xr = tl.load(XPRE + t * D + cols, mask=live, other=0.0).to(tl.float32)
            rs = tl.rsqrt(tl.sum(xr * xr, axis=1) * inv_n + eps)
            h = xr * rs[:, None]
            if HAS_WEIGHT:
                h = tl.load(W + cols, mask=live, other=0.0).to(tl.float32) * h
            tl.store(H + t * stride_ht + cols, h.to(H.dtype.element_ty), mask=live)

    return triton, hc_post_norm_kernel


def hc_post_pre_norm(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
                     pre: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``reference.hc_post_pre_norm``: y [..., D], residual [..., hc, D], post / pre [..., hc],
    comb [..., hc, hc] (fp32) -> (new streams [..., hc, D], their pre-norm [..., D]) in y's dtype."""
    triton, kernel = _kernel()
    hc, D = residual.shape[-2:]
    y2, r, p, c = post_operands(y, residual, post, comb)
    q = rows(pre, hc)
    T = y2.shape[0]
    out = torch.empty(T, hc, D, device=y.device, dtype=y.dtype)
    h = torch.empty(T, D, device=y.device, dtype=y.dtype)
    if T and D:
        block_n = triton.next_power_of_2(D)
        block_r = norm_rows(block_n)  # the rms_norm kernel's tile shape
        slice_d = block_d(T, D)
        collapsed = torch.empty(T, D, device=y.device, dtype=y.dtype)
        w = h if weight is None else weight.contiguous()  # unused when weightless
        kernel[(T, triton.cdiv(D, slice_d))](
            y2, r, p, c, q, w, out, h, collapsed, counters(y.device, T), D, y2.stride(0), r.stride(0), r.stride(1),
            p.stride(0), c.stride(0), q.stride(0), out.stride(0), out.stride(1), h.stride(0), 1.0 / D, float(eps),
            HC=hc, HAS_WEIGHT=weight is not None, SLICE_D=slice_d, BLOCK_R=block_r, BLOCK_N=block_n,
            num_warps=norm_warps(block_r * block_n),
            enable_fp_fusion=False, **pdl_launch())
    return out.view(*residual.shape), h.view(*y.shape)


def supports(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor, pre: torch.Tensor,
             weight: torch.Tensor | None, eps: float) -> bool:
    if not all(t.is_cuda for t in (y, residual, post, comb, pre)) or residual.dim() < 2:
        return False
    hc, D = residual.shape[-2:]
    lead = residual.shape[:-2]
    return (y.dtype in FLOAT_DTYPES and residual.dtype == y.dtype and 0 < D <= NORM_MAX_WIDTH and 1 <= hc <= 16
            and post.dtype == comb.dtype == pre.dtype == torch.float32 and y.shape == lead + (D,)
            and post.shape == pre.shape == lead + (hc,) and comb.shape == lead + (hc, hc)
            and (weight is None or (weight.is_cuda and weight.shape == (D,))) and triton_available())


register("hc_post_pre_norm", "triton", hc_post_pre_norm, supports=supports, priority=10)
