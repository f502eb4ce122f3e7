"""Pure-torch reference ops: the slow path every fast backend is tested against.

They follow the official reference kernels' numerics (model_spec.md 2.1-2.2):
fp32 islands, the sink logit, block-wise online softmax with bf16 probabilities.

Places where torch's CPU results depend on tensor shapes go through
``invariance.wide``: fp64 in batch-invariant mode, fp32 otherwise (see
kernels/invariance.py). GEMMs always accumulate in fp64 and round once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from deepinfer_adapters.kernels import invariance
from deepinfer_adapters.kernels.invariance import wide
from deepinfer_adapters.kernels.pooled_rows import PooledRows, pool_addresses

OPS = ("linear", "rms_norm", "apply_rope", "sparse_attn", "hc_split_sinkhorn", "hc_mix_logits", "hc_pre", "hc_post",
       "hc_pre_norm", "index_scores", "topk_lowest_index", "topk_torch_order", "swiglu", "moe_route", "softmax_pool",
       "hadamard", "engram_gate", "hc_mixes", "compressor_v4_gather", "rms_norm_in_dtype", "selected_keys", "ring_pool",
       "store_rows", "window_store_gather", "window_slots", "hc_post_pre_norm")

SPARSE_ATTN_BLOCK = 64  # indices per online-softmax block, as in the official kernel


def linear(x: torch.Tensor, weight: torch.Tensor, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x @ weight^T as fp32, then cast to ``out_dtype``.

    Batch-invariant mode accumulates in fp64 (fp32 products are exact there) and
    rounds once: CPU BLAS picks different kernels and K splits for different row
    counts, so a 1-row and a 40-row product of the same row differ in the last bits.
    Otherwise the GEMM runs in x's dtype (bf16 GEMMs accumulate in fp32 and round
    to bf16, as the reference's FP8 GEMMs do); every weight value is exact in it --
    except that an fp32 result of a bf16 x is the fp32 GEMM of x's values (the MoE gate
    passes its bf16 input as it is: no fp32 copy first, the same logits).
    """
    if invariance.enabled():
        return torch.nn.functional.linear(x.double(), weight.double()).float().to(out_dtype)
    if out_dtype == torch.float32 and x.dtype == torch.bfloat16:
        x = x.float()
    out = torch.nn.functional.linear(x, weight.to(x.dtype))
    if out.dtype == out_dtype and out_dtype != torch.float64:  # through fp32 and back: a no-op, two kernels
        return out
    return out.float().to(out_dtype)


def swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float, route_w: torch.Tensor | None = None) -> torch.Tensor:
    """The experts' clamped SwiGLU (model_spec.md 2.6) in fp32: silu(min(gate, limit)) *
    clamp(up, -limit, limit) (no clamp when limit <= 0), times the route weight [T, 1] when
    given (it multiplies before w2), cast to gate's dtype (w2's input)."""
    g, u = gate.float(), up.float()
    if limit > 0:
        u = u.clamp(-limit, limit)
        g = g.clamp(max=limit)
    h = F.silu(wide(g)).float() * u
    if route_w is not None:
        h = route_w * h
    return h.to(gate.dtype)


def mean_square(x: torch.Tensor) -> torch.Tensor:
    """mean(x^2) over the last dim (keepdim), fp32, the same for a row whatever the tensor's
    shape: torch's CPU reductions vectorize differently for different row counts, so the
    sum runs in fp64 and is rounded once."""
    return wide(x).square().mean(-1, keepdim=True).float()


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """y = w * x * rsqrt(mean(x^2) + eps) in fp32, cast back to x's dtype. ``weight`` None: weightless."""
    xf = x.float()
    y = xf * torch.rsqrt(mean_square(xf) + eps)
    if weight is not None:
        y = weight.float() * y
    return y.to(x.dtype)


def rms_norm_in_dtype(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Weightless RMS norm over the last dim computed op by op in x's dtype, each step rounded
    to it (V4's per-head query norm, as the reference's in-place ``q *= rsqrt(mean(q^2) + eps)``)."""
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


ENGRAM_GATE_FLOOR = 1e-6  # |dot| floor before the Engram gate's signed sqrt, from training


def engram_gate(x: torch.Tensor, kv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float,
                token_mask: torch.Tensor | None = None) -> torch.Tensor:
    """V4.1's Engram after its projection (model_spec.md 2.7): x [T, hc, D] streams, kv [T, (hc + 1) D]
    (a key per stream, then the shared value). Each stream's gate is sigmoid(signed sqrt(dot)) of
    dot = sum_D(x * q_weight * k_weight * key) * rsqrt(ms(x) + eps) * rsqrt(ms(key) + eps) / sqrt(D),
    normalised per (token, stream) over D, not jointly over the streams; out = x + gate * value in
    fp32, cast to x's dtype. ``token_mask`` [T]: False = no contribution (gate 0)."""
    hc, D = x.shape[-2:]
    key, value = kv.split([hc * D, D], dim=-1)
    key = key.float().unflatten(-1, (hc, D))
    h = x.float()
    weight = q_weight.float() * k_weight.float()
    rstd = torch.rsqrt(mean_square(h)[..., 0] + eps) * torch.rsqrt(mean_square(key)[..., 0] + eps)
    dot = wide(h * weight * key).sum(-1).float() * rstd * D**-0.5
    gate = torch.sigmoid(torch.copysign(wide(dot).abs().clamp_min(ENGRAM_GATE_FLOOR).sqrt(), wide(dot))).float()
    if token_mask is not None:
        gate = gate.masked_fill(~token_mask.unsqueeze(-1), 0)
    return (h + gate.unsqueeze(-1) * value.float().unsqueeze(-2)).to(x.dtype)


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """Normalised Walsh-Hadamard transform of the last dim (Sylvester order, scale d^-1/2).

    What ``fast_hadamard_transform`` computes (fp32 inside, cast back). Orthogonal, so
    q.k is unchanged in exact arithmetic; it matters only for the FP4 round trip after it
    (V4's indexer queries and keys).
    """
    d = x.shape[-1]
    if d & (d - 1):
        raise ValueError(f"Hadamard transform needs a power-of-two width, got {d}")
    y = x.float()
    h = d // 2
    while h >= 1:  # H_2n [a; b] = [H_n(a + b); H_n(a - b)], applied from the widest stride down
        y = y.unflatten(-1, (-1, 2, h))
        y = torch.stack([y[..., 0, :] + y[..., 1, :], y[..., 0, :] - y[..., 1, :]], dim=-2).flatten(-3)
        h //= 2
    return (y.reshape(x.shape) * d**-0.5).to(x.dtype)


def apply_rope(x: torch.Tensor, freqs: torch.Tensor, inverse: bool = False, overwrite: bool = False) -> torch.Tensor:
    """Rotate the last ``2 * freqs.shape[-1]`` dims of x; adjacent pairs are complex numbers.

    x: [S, rd] or [S, H, rd]... any shape whose first dim matches ``freqs`` [S, rd/2]
    (complex64). ``inverse`` rotates by the conjugate. Returns a tensor in x's dtype
    whose leading dims are untouched: a new one, or (``overwrite``: the caller no longer
    needs x) x itself with its last dims rotated in place.
    """
    rd = 2 * freqs.shape[-1]
    head, tail = x[..., :-rd], x[..., -rd:]
    xc = torch.view_as_complex(tail.float().unflatten(-1, (-1, 2)).contiguous())
    f = freqs.conj() if inverse else freqs
    f = f.view(f.shape[0], *([1] * (xc.dim() - 2)), f.shape[-1])
    rotated = torch.view_as_real(xc * f).flatten(-2).to(x.dtype)
    if overwrite:
        tail.copy_(rotated)
        return x
    return torch.cat([head, rotated], dim=-1)


def sparse_attn(
    q: torch.Tensor,
    kv: torch.Tensor,
    sink: torch.Tensor,
    idx: torch.Tensor,
    scale: float,
    probs_bf16: bool = True,
) -> torch.Tensor:
    """Single-latent (K = V) attention over gathered rows, with a per-head sink logit.

    q [S, H, d]; kv [N, d]; sink [H] fp32 (not scaled); idx [S, K] int, -1 = skip.
    For each query: o = sum_k e^{l_k} kv_k / (sum_k e^{l_k} + e^{sink_h}), l = scale * q.k.
    Computed as the official kernel does: online softmax over blocks of 64 indices, fp32
    scores (dot products via fp64, so batch- and length-invariant), probabilities cast to bf16 (relative to the running max) before P @ V when
    ``probs_bf16``. A row with no valid index yields 0. Returns q's dtype.
    """
    S, H, d = q.shape
    qf, kvf = q.float(), kv.float()
    acc = torch.zeros(S, H, d, dtype=torch.float32, device=q.device)
    denom = torch.zeros(S, H, dtype=torch.float32, device=q.device)
    run_max = torch.full((S, H), -1e30, dtype=torch.float32, device=q.device)  # finite: empty rows give 0
    for t in range(0, idx.shape[1], SPARSE_ATTN_BLOCK):
        blk = idx[:, t : t + SPARSE_ATTN_BLOCK].to(q.device).long()  # index rows may be built on the host
        valid = blk >= 0
        rows = kvf[blk.clamp_min(0)] * valid.unsqueeze(-1)  # [S, k, d]
        logits = _dot(qf, rows, "shd,skd->shk")
        logits = torch.where(valid.unsqueeze(1), logits, -torch.inf) * scale
        prev = run_max
        run_max = torch.maximum(prev, logits.amax(-1))
        rescale = exp32(prev - run_max)
        p = exp32(logits - run_max.unsqueeze(-1))
        denom = denom * rescale + p.sum(-1)
        if probs_bf16:
            p = p.to(torch.bfloat16).float()
        acc = acc * rescale.unsqueeze(-1) + _dot(p, rows, "shk,skd->shd")
    denom = denom + exp32(sink.float() - run_max)
    return (acc / denom.unsqueeze(-1)).to(q.dtype)


def _dot(a: torch.Tensor, b: torch.Tensor, spec: str) -> torch.Tensor:
    """fp32 contraction through fp64, so results do not depend on how many rows,
    keys or sequences share the call (see ``linear``)."""
    return torch.einsum(spec, wide(a), wide(b)).float()


def hc_split_sinkhorn(
    mixes: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, hc: int, iters: int, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hyper-connection mixes [..., (2 + hc) * hc] -> pre [..., hc], post [..., hc], comb [..., hc, hc].

    pre = sigmoid(m0 s0 + b0) + eps; post = 2 sigmoid(m1 s1 + b1); comb: softmax over the
    destination + eps, column-normalised, then ``iters - 1`` more row/column passes
    (model_spec.md 2.2). comb[a, b]: a = source stream, b = destination. All fp32.
    """
    m, scale, base = wide(mixes), wide(scale), wide(base)
    pre = torch.sigmoid(m[..., :hc] * scale[0] + base[:hc]) + eps
    post = 2 * torch.sigmoid(m[..., hc : 2 * hc] * scale[1] + base[hc : 2 * hc])
    comb = (m[..., 2 * hc :] * scale[2] + base[2 * hc :]).unflatten(-1, (hc, hc))
    comb = torch.exp(comb - comb.amax(-1, keepdim=True))
    comb = comb / comb.sum(-1, keepdim=True) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return pre.float(), post.float(), comb.float()


def hc_mixes(x: torch.Tensor, fn: torch.Tensor, norm_eps: float, scale: torch.Tensor, base: torch.Tensor, hc: int,
             iters: int, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A sublayer's pre [..., hc], post [..., hc], comb [..., hc, hc] from its input streams x [..., hc, D]:
    ``hc_split_sinkhorn(hc_mix_logits(x, fn, norm_eps), scale, base, hc, iters, eps)`` (one op, so a
    backend can run the two without a launch between them)."""
    return hc_split_sinkhorn(hc_mix_logits(x, fn, norm_eps), scale, base, hc, iters, eps)


def hc_mix_logits(x: torch.Tensor, fn: torch.Tensor, norm_eps: float) -> torch.Tensor:
    """x [..., hc, D] -> (flat(x) @ fn^T) * rsqrt(mean(flat(x)^2) + eps) [..., N], fp32: one RMS
    statistic per token over all hc*D values; fn [N, hc*D] (N = (2 + hc) * hc mixes, or hc
    for the HC head)."""
    flat = x.flatten(-2).float()
    rsqrt = torch.rsqrt(mean_square(flat) + norm_eps)
    return linear(flat, fn) * rsqrt


def hc_pre(x: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    """Collapse [T, hc, D] with weights [T, hc] -> [T, D] (fp32 sum, cast back)."""
    return _stream_sum(pre.unsqueeze(-1) * x.float(), dim=-2).to(x.dtype)


def hc_pre_norm(x: torch.Tensor, pre: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """rms_norm(hc_pre(x, pre), weight, eps): a sublayer's input from the hc streams."""
    return rms_norm(hc_pre(x, pre), weight, eps)


def hc_post(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """Expand y [T, D] to [T, hc, D]: post_b * y + sum_a comb[a, b] * residual_a."""
    mixed = _stream_sum(comb.unsqueeze(-1) * residual.unsqueeze(-2).float(), dim=-3)
    return (post.unsqueeze(-1) * y.unsqueeze(-2).float() + mixed).to(y.dtype)


def hc_post_pre_norm(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
                     pre: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, hc_pre_norm(x, pre, weight, eps)) with x = hc_post(y, residual, post, comb): a sublayer's new
    streams and the next sublayer's input from them (layers/block_v41.py)."""
    x = hc_post(y, residual, post, comb)
    return x, hc_pre_norm(x, pre, weight, eps)


def _stream_sum(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over the hc streams. Batch-invariant mode adds them in a fixed order (stream 0
    first), so every element's result is the same whatever the number of tokens
    (torch's vectorized sum is not); otherwise torch.sum, as the reference."""
    if not invariance.enabled():
        return t.sum(dim)
    parts = t.unbind(dim)
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


def exp32(x: torch.Tensor) -> torch.Tensor:
    """exp rounded to fp32 through fp64 (shape-independent, see module doc)."""
    return torch.exp(wide(x)).float()


def index_scores(q: torch.Tensor, keys: torch.Tensor | PooledRows, weights: torch.Tensor,
                 visible: torch.Tensor | None = None) -> torch.Tensor:
    """V4.1 indexer scores ``sum_h w_h relu(q_h . k_t)`` rounded where the reference's tensors are
    in the activation dtype: q [n, H, d]; keys [m, d] (shared) or [n, m, d] (each query its own; or those
    rows in a cache's pool, ``PooledRows``: a decode step's); weights [n, H] in q's dtype. Returns [n, m] in
    q's dtype (layers/indexer_v41.py).
    ``visible`` [n] (integers): key t of query i is -inf where t >= visible[i] -- the causal mask the
    indexer applies before its top-k, which lets a backend skip the keys no query of a tile sees."""
    if isinstance(keys, PooledRows):
        keys = keys.gather()
    dt = q.dtype
    spec = "nhd,nmd->nhm" if keys.dim() == 3 else "nhd,md->nhm"
    qk = torch.einsum(spec, invariance.narrow(q), invariance.narrow(keys, dt)).to(dt)
    # in q's dtype: the product of two bf16 values is exact in fp32, so the one rounding of
    # torch's bf16 multiply is the reference's fp32 product cast down
    per_head = qk.relu() * weights.to(dt).unsqueeze(-1)
    scores = per_head.float().sum(1).to(dt)
    if visible is not None:
        unseen = torch.arange(scores.shape[-1], device=scores.device) >= visible.unsqueeze(-1)
        scores = scores.masked_fill(unseen, -torch.inf)
    return scores


def topk_lowest_index(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices ascending [..., k] int64, their values) of the k largest entries of the last dim;
    among equal values the lower index wins (-0.0 equals 0.0), layers/topk.py's rule."""
    order = torch.sort(-scores.float(), dim=-1, stable=True).indices[..., :k]
    picked = order.sort(dim=-1).values
    return picked, scores.gather(-1, picked)


def topk_torch_order(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices ascending [..., k] int64, their values) of the k entries ``torch.topk`` takes
    from the last dim: DeepSeek's reference code's selection, whose choice among values equal to
    the k-th largest is torch's, per device (the Triton backend states CUDA's)."""
    picked = torch.sort(scores.topk(k, dim=-1, sorted=False).indices, dim=-1).values
    return picked, scores.gather(-1, picked)


def selected_keys(window: torch.Tensor, window_valid: torch.Tensor, pool: torch.Tensor, picked: torch.Tensor,
                  visible: torch.Tensor, table: torch.Tensor, rows_a_block: int,
                  capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A decode step's attention keys and index (V4.1 compressed layers): keys [B, W + k, d] = each
    sequence's window keys [B, W, d] followed by its picked rows [B, k] of ``pool`` (as the window's dtype),
    and index [B, W + k] into those keys flattened to [B (W + k), d]: b (W + k) + j where the key exists
    (``window_valid`` [B, W], then a pick below ``visible`` [B]), else -1. Row r = picked[b, j] clamped to
    [0, capacity) is at pool row table[b, r // rows_a_block] * rows_a_block + r % rows_a_block
    (``StateCache.row_blocks``)."""
    addr = pool_addresses(table, rows_a_block, picked.clamp(0, capacity - 1))
    keys = torch.cat([window, pool[addr].to(window.dtype)], 1)
    B, K = keys.shape[:2]
    valid = torch.cat([window_valid, picked < visible.unsqueeze(-1)], 1)
    return keys, torch.where(valid, torch.arange(B * K, device=keys.device).view(B, K), -1)


def store_rows(pool: torch.Tensor, addr: torch.Tensor, value: torch.Tensor, keep: torch.Tensor | None = None) -> None:
    """In place: ``pool[addr[b]] = value[b]`` (rounded to the pool's dtype) for each b where ``keep[b]`` (every b
    where ``keep`` is None), the other rows of ``pool`` as they are. pool [R, C]; addr [B] distinct; value
    [B, C]; keep [B] bool -- a decode step's compressed rows, stored where the token completes its group."""
    value = value.to(pool.dtype)
    pool[addr] = value if keep is None else torch.where(keep.unsqueeze(1), value, pool[addr])


def window_store_gather(rows: torch.Tensor, write_rows: torch.Tensor, read_rows: torch.Tensor,
                        kv: torch.Tensor) -> torch.Tensor:
    """A decode step's window: in place ``rows[write_rows[b]] = kv[b]`` (rounded to the rows' dtype), then the
    keys ``rows[read_rows]`` [B W, d] in kv's dtype. rows [R, d] (the window rings, flattened); kv [B, d];
    read_rows [B W]: sequence b's W rows (``WindowSlots``), the last of them its new one (write_rows[b]) and no
    other read row a written one; rows written twice (a graph's padding sequences) take one value -- what a
    kernel that stores and gathers at once may rely on."""
    rows.index_copy_(0, write_rows, kv.to(rows.dtype))
    return rows.index_select(0, read_rows).to(kv.dtype)


def window_slots(positions: torch.Tensor, slots: torch.Tensor, size: int,
                 window: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where a decode step's sequences (positions p and state slots [B]) sit in window rings of ``size`` rows
    a slot, flattened: (write_rows [B] = the new token's row; read_rows [B window] = the rows of positions
    p - window + 1 .. p, oldest first; valid [B, window] = which of those positions exist (>= 0); attend_index
    [B, window] = b window + j where valid, else -1 -- the keys' index into those rows gathered)."""
    B = positions.shape[0]
    pos = positions.unsqueeze(1) + torch.arange(1 - window, 1, device=positions.device)
    rows = slots.unsqueeze(1) * size + pos % size
    valid = pos >= 0
    index = torch.where(valid, torch.arange(B * window, device=positions.device).view(B, window), -1)
    return rows[:, -1].contiguous(), rows.flatten(), valid, index


def softmax_pool(kv: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """The compressors' pooling: sum over rows (dim 1) of kv * softmax over rows of score, fp32
    (the softmax in fp64 in batch-invariant mode, as every fp32-valued reference step)."""
    return (kv * wide(score).softmax(dim=1).float()).sum(dim=1)


def ring_pool(kv: torch.Tensor, score: torch.Tensor, kv_ring: torch.Tensor, score_ring: torch.Tensor,
              at: torch.Tensor, group: torch.Tensor, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A V4.1 ratio-r compressor's decode step: each token's new row (kv, score [B, C] fp32) written to row
    ``at`` [B] of the rings (kv_ring, score_ring [rows, C] fp32, in place), then ``softmax_pool`` over its
    group's ring rows ``group`` [B, r] (the row just written among them): [B, C], rounded to ``out_dtype``."""
    return softmax_pool(*ring_rows(kv, score, kv_ring, score_ring, at, group)).to(out_dtype)


def ring_rows(kv: torch.Tensor, score: torch.Tensor, kv_ring: torch.Tensor, score_ring: torch.Tensor,
              at: torch.Tensor, group: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``ring_pool``'s writes, and the group rows it pools: (kv, score) [B, r, C]."""
    kv_ring.index_copy_(0, at, kv)
    score_ring.index_copy_(0, at, score)
    rows = group.flatten()
    return (kv_ring.index_select(0, rows).view(*group.shape, -1),
            score_ring.index_select(0, rows).view(*group.shape, -1))


def compressor_v4_gather(kv: torch.Tensor, score: torch.Tensor, ape: torch.Tensor, kv_state: torch.Tensor,
                         score_state: torch.Tensor, slots: torch.Tensor, at: torch.Tensor, ratio: int,
                         overlap: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A V4 compressor's decode step (one token per sequence; layout in model_impl/layers/compressor_v4.py):
    the rows its pooling reads, and the state update, in place.

    kv, score [B, c w] fp32 (the token's projections; ``ape[at]`` [r, c w] is added to score here),
    kv_state, score_state [S, c r, c w] fp32, slots [B], at [B] (position mod r); c = 2 with ``overlap``.
    Returns (kv rows, score rows) [B, c r, w]: the token's block (rows off .. off + r - 1, the token's
    own row replaced by it), with overlap the previous block's first half over the current block's
    second half. State: a token completing its block moves that block (with it) into rows 0 .. r - 1
    (overlap); any other token is stored at row off + at. An entry is only valid where the token
    completes its block (the caller stores only those)."""
    r = ratio
    w = kv.shape[-1] // (2 if overlap else 1)
    off = r if overlap else 0
    score = score + ape[at]
    each = slots.unsqueeze(1)
    rows = torch.arange(r, device=kv.device)
    new = (rows == at.unsqueeze(1)).unsqueeze(-1)
    complete = at == r - 1
    bkv = torch.where(new, kv.unsqueeze(1), kv_state[each, off + rows])
    bscore = torch.where(new, score.unsqueeze(1), score_state[each, off + rows])
    if overlap:
        done = complete.view(-1, 1, 1)
        prev_kv, prev_score = kv_state[each, rows], score_state[each, rows]
        kv_state[each, rows] = torch.where(done, bkv, prev_kv)  # a completed block becomes the previous one
        score_state[each, rows] = torch.where(done, bscore, prev_score)
        bkv = torch.cat([prev_kv[..., :w], bkv[..., w:]], dim=1)
        bscore = torch.cat([prev_score[..., :w], bscore[..., w:]], dim=1)
    row = off + at  # the token joins the block in progress, unless it completes it
    kv_state[slots, row] = torch.where(complete.unsqueeze(1), kv_state[slots, row], kv)
    score_state[slots, row] = torch.where(complete.unsqueeze(1), score_state[slots, row], score)
    return bkv, bscore


def moe_route(logits: torch.Tensor, bias: torch.Tensor | None, topk: int, renormalize: bool, eps: float,
              scale: float, temp: float = 1.0, ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The MoE gate after its GEMM: logits [T, E] fp32 -> (weights [T, k] fp32, expert ids [T, k] int64).

    scores = sqrt(softplus(logits / temp)); the experts are the k largest ``scores + bias``
    (bias [E], or [T, E] per token; None: none) in descending order, the lower index first
    among equal keys (a stable sort: torch.topk's order among ties is unspecified), or
    ``ids`` as given (V4's hash routing). weights = the picked scores, divided by
    (their sum + eps) when ``renormalize``, times ``scale``.
    """
    logits = wide(logits)
    if temp != 1.0:  # the release's temperature is 1: x / 1 is x, and a kernel launch
        logits = logits / temp
    scores = F.softplus(logits).sqrt().float()
    if ids is None:
        keys = scores if bias is None else scores + bias
        ids = torch.sort(keys, dim=-1, descending=True, stable=True).indices[:, :topk]
    w = scores.gather(1, ids)
    if renormalize:
        w = w / (w.sum(-1, keepdim=True) + eps)
    return w * scale, ids
