"""Triton backend of ``moe_route``, the MoE gate after its GEMM (CUDA; registered as "triton").

At decode the reference is ~9 tiny kernels per MoE layer (softplus, sqrt, bias add,
sort, gather, sum, add, divide, scale), each a few microseconds in a CUDA graph; here one.
One program per token, the token's E logits in registers (E up to ``MAX_EXPERTS``):
1. score = sqrt(softplus(x)) with torch's rule: x > 20 gives x, else log1p(exp(x))
   (libdevice's log1pf and expf, the CUDA math library torch's softplus calls), then an
   IEEE square root (sqrt.rn, as torch's sqrtf);
2. key = score + bias (bias [E] shared, or [T, E] per token: the vision bias);
3. k rounds of argmax over the experts not yet picked: the largest key, the lowest index
   among equal keys (-0.0 equals 0.0; a NaN key counts as +inf so every id is valid),
   which is the reference's stable sort; slot j gets the j-th pick and its score;
4. renormalize: the k scores are summed in slot order (slot 0 first), + eps, and each
   divided by that (div.rn); then times ``scale``.
Each token is computed alone with tile shapes that depend only on E and k, so a token's
result never depends on the batch: the kernel runs in batch-invariant mode too.

Numerics against the reference: the ids are the same wherever the scores are (ties
included); the weights differ by the normaliser's summation order (torch adds the k
values in its own order), within 2 (k + 1) u relative (u = 2^-24), and by any difference
between libdevice and the CUDA build torch uses (tests/gpu/test_route_gpu.py reports
both; on the H200: ids always equal, weights bit-equal in most cases, else 1-3 ulps). A
logit below about -87 has a subnormal softplus, which the kernel flushes to zero (a score
of ~1e-20 becomes 0). In batch-invariant mode the reference evaluates the softplus in
fp64, so there the scores differ from it by up to about an ulp.
V4's hash layers (``ids`` given) skip step 3: slot j takes the j-th given id. Not run here:
a temperature other than 1 (no release has one; torch divides a CUDA tensor by a scalar as
a multiply by its fp32 reciprocal, a rounding this kernel would have to copy): it keeps the
reference.

Under Triton's CPU interpreter (TRITON_INTERPRET=1) libdevice is unavailable: the
softplus is evaluated in fp64 there (tl.exp, and log1p(y) = log(u) y / (u - 1) with
u = 1 + y, which is exact to a few fp64 ulps) and rounded to fp32.
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import register
from deepinfer_adapters.kernels.triton_support import interpreting, pdl_launch, triton_available

MAX_EXPERTS = 1024  # the logits of one token stay in the registers of one program
SOFTPLUS_THRESHOLD = 20.0  # torch's default: above it softplus(x) is x
# the kernel in 4 warps from this many tokens (0: never; one warp a program for up to 512 experts otherwise). H200,
# session 34: B=8 25 us faster in one call (7 of 7 rounds), 4 us slower in the next; B=1 neutral. Session 38: B=8
# 16.7 and 16.0 us faster (s38b, s38c; 7 of 7 each), B=1 7.2 and 1.7 us faster (s38e, 6 of 7 each); the same bits
FOUR_WARPS_FROM_TOKENS = 1
# Not done: each argmax round as one int64 max over (the key's order-preserving bits, the index reversed), one of a
# round's three dependent warp reductions fewer. H200, V4.1 B=1 graphs alternating (session 23): 1.964 ms against
# 1.961 with the max and min here, and 1,696 SASS instructions against 1,584 offline


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    global pdl_start  # bound at module level: Triton's interpreter resolves a kernel's names there
    from deepinfer_adapters.kernels.triton_pdl import pdl_start

    if not interpreting():
        from triton.language.extra import libdevice  # expf and log1pf, as torch's softplus

    @triton.jit
    def route_kernel(LOGITS, BIAS, GIVEN, W, IDS, E, k, stride_l, stride_b, stride_g, stride_w, stride_i, eps, scale,
                     THRESHOLD: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr,
                     HAS_BIAS: tl.constexpr, HAS_IDS: tl.constexpr, RENORMALIZE: tl.constexpr,
                     INTERPRET: tl.constexpr):
        pdl_start()
        t = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK_E)
        inside = offs < E
        x = tl.load(LOGITS + t * stride_l + offs, mask=inside, other=0.0)
        if INTERPRET:  # no libdevice: log1p(y) = log(u) y / (u - 1), u = 1 + y, in fp64
            y = tl.exp(x.to(tl.float64))
            u = 1.0 + y
            soft = tl.where(u == 1.0, y, tl.log(u) * (y / (u - 1.0))).to(tl.float32)
        else:
            soft = libdevice.log1p(libdevice.exp(x))
        score = tl.sqrt_rn(tl.where(x > THRESHOLD, x, soft))
        key = score
        if HAS_BIAS:
            key = score + tl.load(BIAS + t * stride_b + offs, mask=inside, other=0.0)
        key = tl.where(key != key, float("inf"), key)
        free = inside
        slots = tl.arange(0, BLOCK_K)
        picked_w = tl.zeros([BLOCK_K], tl.float32)
        picked_e = tl.zeros([BLOCK_K], tl.int32)
        total = tl.zeros([], tl.float32)
        for j in range(k):
            if HAS_IDS:  # V4's hash layers: the experts come from the token id
                e = tl.load(GIVEN + t * stride_g + j).to(tl.int32)
            else:
                best = tl.max(tl.where(free, key, float("-inf")), axis=0)
                e = tl.min(tl.where(free & (key == best), offs, BLOCK_E), axis=0)
            w = tl.sum(tl.where(offs == e, score, 0.0), axis=0)  # exact: one term, the rest +0.0
            free = free & (offs != e)
            total += w
            picked_w = tl.where(slots == j, w, picked_w)
            picked_e = tl.where(slots == j, e, picked_e)
        if RENORMALIZE:
            picked_w = tl.div_rn(picked_w, tl.broadcast_to(total + eps, [BLOCK_K]))
        mine = slots < k
        tl.store(W + t * stride_w + slots, picked_w * scale, mask=mine)
        tl.store(IDS + t * stride_i + slots, picked_e.to(tl.int64), mask=mine)

    return triton, route_kernel


def moe_route(logits: torch.Tensor, bias: torch.Tensor | None, topk: int, renormalize: bool, eps: float,
              scale: float, temp: float = 1.0, ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``reference.moe_route`` (temp 1 only: ``supports``)."""
    triton, kernel = _kernel()
    T, E = logits.shape
    rows = logits if logits.stride(-1) == 1 else logits.contiguous()
    weights = torch.empty(T, topk, device=logits.device, dtype=torch.float32)
    picked = torch.empty(T, topk, device=logits.device, dtype=torch.long)
    given = None if ids is None else (ids if ids.stride(-1) == 1 else ids.contiguous())
    if bias is not None and bias.stride(-1) != 1:
        bias = bias.contiguous()
    if T:
        block_e = max(16, triton.next_power_of_2(E))
        kernel[(T,)](rows, rows if bias is None else bias, picked if given is None else given, weights, picked, E,
                     topk, rows.stride(0), bias.stride(0) if bias is not None and bias.dim() == 2 else 0,
                     0 if given is None else given.stride(0), weights.stride(0), picked.stride(0), eps, scale,
                     THRESHOLD=SOFTPLUS_THRESHOLD, BLOCK_E=block_e, BLOCK_K=triton.next_power_of_2(topk),
                     HAS_BIAS=bias is not None, HAS_IDS=given is not None, RENORMALIZE=renormalize,
                     INTERPRET=interpreting(), num_warps=_warps(T, block_e), enable_fp_fusion=False, **pdl_launch())
    return weights, picked


def _warps(tokens: int, block_e: int) -> int:
    if 0 < FOUR_WARPS_FROM_TOKENS <= tokens:
        return 4
    return max(1, block_e // 512)


def fits(logits: torch.Tensor, bias: torch.Tensor | None, topk: int, renormalize: bool, eps: float, scale: float,
         temp: float = 1.0, ids: torch.Tensor | None = None) -> bool:
    """The inputs this kernel takes, wherever they live (benchmarks/count_decode_ops.py asks on the CPU)."""
    if not (logits.dtype == torch.float32 and logits.dim() == 2 and temp == 1.0
            and 1 <= topk <= logits.shape[1] <= MAX_EXPERTS and triton_available()):
        return False
    if ids is not None and not (ids.shape == (logits.shape[0], topk) and ids.device == logits.device):
        return False
    return bias is None or (bias.dtype == torch.float32 and bias.device == logits.device
                            and bias.shape in (logits.shape[1:], logits.shape))


def supports(logits: torch.Tensor, *args, **kwargs) -> bool:
    return logits.is_cuda and fits(logits, *args, **kwargs)


register("moe_route", "triton", moe_route, supports=supports, priority=10)
