"""Triton backend of ``moe_route``, the MoE gate after its GEMM (CUDA; registered as "triton"), and of
``moe_gate`` (the GEMM and the route) for one token in one launch (prepared, off: ``GATE_ROUTE`` below).

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

from deepinfer_adapters.kernels import register, triton_linear
from deepinfer_adapters.kernels.arrival_counters import counters
from deepinfer_adapters.kernels.triton_support import interpreting, pdl_launch, triton_available

MAX_EXPERTS = 1024  # the logits of one token stay in the registers of one program
SOFTPLUS_THRESHOLD = 20.0  # torch's default: above it softplus(x) is x
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

    global route_token  # module level: Triton's interpreter resolves a kernel's names there

    @triton.jit
    def route_token(x, t, BIAS, GIVEN, W, IDS, E, k, stride_b, stride_g, stride_w, stride_i, eps, scale,
                    THRESHOLD: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr,
                    HAS_IDS: tl.constexpr, RENORMALIZE: tl.constexpr, INTERPRET: tl.constexpr):
        """Token t's route from its logits x [BLOCK_E] (0 past E): weights and ids written to W and IDS rows t."""
        offs = tl.arange(0, BLOCK_E)
        inside = offs < E
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

    @triton.jit
    def route_kernel(LOGITS, BIAS, GIVEN, W, IDS, E, k, stride_l, stride_b, stride_g, stride_w, stride_i, eps, scale,
                     THRESHOLD: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr,
                     HAS_BIAS: tl.constexpr, HAS_IDS: tl.constexpr, RENORMALIZE: tl.constexpr,
                     INTERPRET: tl.constexpr):
        pdl_start()
        t = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK_E)
        x = tl.load(LOGITS + t * stride_l + offs, mask=offs < E, other=0.0)
        route_token(x, t, BIAS, GIVEN, W, IDS, E, k, stride_b, stride_g, stride_w, stride_i, eps, scale, THRESHOLD,
                    BLOCK_E, BLOCK_K, HAS_BIAS, HAS_IDS, RENORMALIZE, INTERPRET)

    global split_product  # triton_linear's, bound here for the fused kernel (the interpreter resolves names here)
    triton_linear._kernel()
    from deepinfer_adapters.kernels.triton_linear import split_product

    @triton.jit
    def gate_route_kernel(X, WEIGHT, PARTS, COUNT, BIAS, GIVEN, W, IDS, M, E, K, k_per_split, k, stride_xm,
                          stride_wn, stride_pm, stride_ps, stride_b, stride_g, stride_w, stride_i, eps, scale,
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
                          THRESHOLD: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr,
                          HAS_BIAS: tl.constexpr, HAS_IDS: tl.constexpr, RENORMALIZE: tl.constexpr,
                          INTERPRET: tl.constexpr):
        """The gate's split GEMM as triton_linear's programs (partials to PARTS [SPLIT, M, E]); the last program of
        a row tile to arrive adds each row's partials in split order (sum_splits' order) and routes it."""
        pdl_start()
        acc, rows, cols = split_product(X, WEIGHT, M, E, K, k_per_split, stride_xm, stride_wn, BM, BN, BK)
        tl.store(PARTS + tl.program_id(2) * stride_ps + rows.to(tl.int64)[:, None] * stride_pm + cols[None, :], acc,
                 mask=(rows < M)[:, None] & (cols < E)[None, :])
        tl.debug_barrier()  # every thread's stores issued before the arrival releases them
        before = tl.atomic_add(COUNT + tl.program_id(0), 1, sem="acq_rel", scope="gpu")
        if before == tl.num_programs(1) * SPLIT - 1:  # every partial of the row tile is written
            tl.atomic_xchg(COUNT + tl.program_id(0), 0, sem="relaxed", scope="gpu")  # re-armed for the next call
            offs = tl.arange(0, BLOCK_E)
            first = tl.program_id(0) * BM
            for i in range(0, tl.minimum(M - first, BM)):
                m = (first + i).to(tl.int64)
                row = PARTS + m * stride_pm + offs
                x = tl.load(row, mask=offs < E, other=0.0)
                for s in tl.static_range(1, SPLIT):
                    x += tl.load(row + s * stride_ps, mask=offs < E, other=0.0)
                route_token(x, m, BIAS, GIVEN, W, IDS, E, k, stride_b, stride_g, stride_w, stride_i,
                            eps, scale, THRESHOLD, BLOCK_E, BLOCK_K, HAS_BIAS, HAS_IDS, RENORMALIZE, INTERPRET)

    return triton, route_kernel, gate_route_kernel


def moe_route(logits: torch.Tensor, bias: torch.Tensor | None, topk: int, renormalize: bool, eps: float,
              scale: float, temp: float = 1.0, ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``reference.moe_route`` (temp 1 only: ``supports``)."""
    triton, kernel, _ = _kernel()
    T, E = logits.shape
    rows = logits if logits.stride(-1) == 1 else logits.contiguous()
    weights, picked, bias, given = _route_args(T, topk, logits.device, bias, ids)
    if T:
        block_e = max(16, triton.next_power_of_2(E))
        kernel[(T,)](rows, rows if bias is None else bias, picked if given is None else given, weights, picked, E,
                     topk, rows.stride(0), bias.stride(0) if bias is not None and bias.dim() == 2 else 0,
                     0 if given is None else given.stride(0), weights.stride(0), picked.stride(0), eps, scale,
                     THRESHOLD=SOFTPLUS_THRESHOLD, BLOCK_E=block_e, BLOCK_K=triton.next_power_of_2(topk),
                     HAS_BIAS=bias is not None, HAS_IDS=given is not None, RENORMALIZE=renormalize,
                     INTERPRET=interpreting(), num_warps=max(1, block_e // 512), enable_fp_fusion=False, **pdl_launch())
    return weights, picked


def _route_args(T: int, topk: int, device: torch.device, bias: torch.Tensor | None, ids: torch.Tensor | None):
    """The route's outputs (weights [T, k] fp32, ids [T, k]) and its bias and given ids with unit last strides."""
    weights = torch.empty(T, topk, device=device, dtype=torch.float32)
    picked = torch.empty(T, topk, device=device, dtype=torch.long)
    given = None if ids is None else (ids if ids.stride(-1) == 1 else ids.contiguous())
    if bias is not None and bias.stride(-1) != 1:
        bias = bias.contiguous()
    return weights, picked, bias, given


def fits(logits: torch.Tensor, bias: torch.Tensor | None, topk: int, renormalize: bool, eps: float, scale: float,
         temp: float = 1.0, ids: torch.Tensor | None = None) -> bool:
    """The inputs this kernel takes, wherever they live (benchmarks/count_decode_ops.py asks on the CPU)."""
    return (logits.dtype == torch.float32 and logits.dim() == 2
            and _routable(logits.shape[0], logits.shape[1], logits.device, bias, topk, temp, ids))


def _routable(T: int, E: int, device: torch.device, bias: torch.Tensor | None, topk: int, temp: float,
              ids: torch.Tensor | None) -> bool:
    """Whether the route takes T tokens' logits over E experts (on ``device``) with these arguments."""
    if not (temp == 1.0 and 1 <= topk <= E <= MAX_EXPERTS and triton_available()):
        return False
    if ids is not None and not (ids.shape == (T, topk) and ids.device == device):
        return False
    return bias is None or (bias.dtype == torch.float32 and bias.device == device and bias.shape in ((E,), (T, E)))


def supports(logits: torch.Tensor, *args, **kwargs) -> bool:
    return logits.is_cuda and fits(logits, *args, **kwargs)


register("moe_route", "triton", moe_route, supports=supports, priority=10)


# ------------------------------------------------------------------------ the gate's GEMM and route, one launch ----
# Prepared in session 27, not yet measured (off): ``moe_gate`` for one token as one launch -- the gate's split GEMM
# (triton_linear's programs), then its last program adds the partials and routes (arrival counters), where now the
# GEMM, the split sum and the route are three dependent launches (the route chain: ~37 us on a B=1 step's critical
# path, session 26's probe). The same bits as those three (tests/test_gate_route_kernel.py,
# tests/gpu/test_route_gpu.py).
GATE_ROUTE = False
GATE_ROUTE_ROWS = 1  # one program routes its row tile's tokens one after the other: a token at a time only


def moe_gate(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, topk: int, renormalize: bool,
             eps: float, scale: float, temp: float = 1.0, ids: torch.Tensor | None = None):
    """See ``reference.moe_gate``: ``moe_route`` of ``linear(x, weight)`` (fp32 logits) in one launch."""
    triton, _, kernel = _kernel()
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    x2 = x2 if x2.stride(-1) == 1 else x2.contiguous()
    M, E = x2.shape[0], weight.shape[0]
    cfg, n_tiles, split, k_per_split = triton_linear.plan(E, K)
    weights, picked, bias, given = _route_args(M, topk, x.device, bias, ids)
    if M:
        bm = triton_linear.row_tile(M)
        m_tiles = triton.cdiv(M, bm)
        parts = torch.empty(split, M, E, device=x.device, dtype=torch.float32)
        kernel[(m_tiles, n_tiles, split)](
            x2, weight, parts, counters(x.device, m_tiles), x2 if bias is None else bias,
            picked if given is None else given, weights, picked, M, E, K, k_per_split, topk, x2.stride(0),
            weight.stride(0), parts.stride(1), parts.stride(0),
            bias.stride(0) if bias is not None and bias.dim() == 2 else 0, 0 if given is None else given.stride(0),
            weights.stride(0), picked.stride(0), eps, scale, BM=bm, BN=cfg.block_n, BK=cfg.block_k, SPLIT=split,
            THRESHOLD=SOFTPLUS_THRESHOLD, BLOCK_E=max(16, triton.next_power_of_2(E)),
            BLOCK_K=triton.next_power_of_2(topk), HAS_BIAS=bias is not None, HAS_IDS=given is not None,
            RENORMALIZE=renormalize, INTERPRET=interpreting(), num_warps=cfg.num_warps, num_stages=cfg.num_stages,
            enable_fp_fusion=False, **pdl_launch())
    return weights, picked


def supports_gate(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, topk: int, renormalize: bool,
                  eps: float, scale: float, temp: float = 1.0, ids: torch.Tensor | None = None) -> bool:
    return (GATE_ROUTE and x.is_cuda and x.dim() == 2 and x.shape[0] <= GATE_ROUTE_ROWS
            and triton_linear.supports(x, weight)
            and _routable(x.shape[0], weight.shape[0], x.device, bias, topk, temp, ids))


register("moe_gate", "triton", moe_gate, supports=supports_gate, priority=10)
