"""Batched, deterministic, batch-invariant sampler (DeepInfer's scheme; components.md s.11).

A row's token depends only on (seed, position, stream, that row's logits and
params): never on batch size, row order, the other rows' params, preemption or
async scheduling. No torch.Generator and no global RNG state are used.

How a row is sampled:

1. Greedy rows (temperature == 0) take ``argmax``; ties go to the lowest index.
2. Otherwise ``x = (logits - max) / T`` and ``e = exp(x)`` in float64 with
   elementwise ops only, so an element's bits do not depend on its row's place
   in the batch. (This relies on torch's exp giving one answer per input on a
   device: true on CUDA, and on ATen's CPU kernels, which run a vector loop's
   remainder through the same SIMD function; tests/test_sampler.py checks it.
   Where it did not hold, a 1-ulp difference would move one weight below by at
   most one unit, changing the token with probability about 2**-45.)
3. Fixed point: ``w = floor(e * 2**R)`` in int64, with
   ``R = min(52, 62 - ceil(log2 V))`` so a row's total is at most 2**62
   (R = 45 for the 129,280-token vocabulary). The largest logit gets exactly
   2**R; a token with ``x < -R ln 2`` (relative probability below 2**-R) gets 0
   and is never sampled, nor is a -inf logit. Each weight is within one unit of
   exact, so a token's probability is off by less than 2**-R relative to the
   most likely token's.
4. Top-k then top-p (vLLM order): sort by logit, descending, ties by index; keep
   ranks < k, then the shortest prefix whose integer mass reaches top_p of the
   top-k mass (keep rank j while the mass before it is < top_p * mass). The kept
   set is a mask; the draw below always runs in vocabulary order.
5. Draw: ``h = hash(seed, position, stream)`` (:func:`hash_u64`), ``r = h >> 2``
   (62 bits, u = r / 2**62), threshold ``t = floor(r * total / 2**62)`` computed
   exactly in 31-bit limbs, and the token is the first index whose inclusive
   int64 cumsum exceeds t. Integer addition is associative, so any cumsum
   split (a GPU kernel's two-level block scan included) gives the same bits.
   Since r < 2**62, t < total: u near 1 picks the last positive-weight token;
   a zero-weight token never owns a threshold. P(token i) = w_i / total to
   within 2**-62.

Logprobs follow vLLM's default ("raw"): ``log_softmax`` of the unmodified
logits (before temperature, top-k and top-p), float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
# Stream that derive_seed uses; sampling streams are small ints (0 = target token).
_SEED_STREAM = 0x5EED5EED5EED5EED
_M31 = (1 << 31) - 1


@dataclass
class SampleResult:
    tokens: torch.Tensor  # [B] int64
    logprobs: torch.Tensor  # [B] float32, log_softmax(raw logits) at the chosen token
    top_token_ids: torch.Tensor | None = None  # [B, n] int64, most likely first
    top_logprobs: torch.Tensor | None = None  # [B, n] float32


# ---------------------------------------------------------------------------
# Counter-based random numbers: SplitMix64 over (seed, position, stream)
# ---------------------------------------------------------------------------


def _splitmix64(x: int) -> int:
    z = (x + _GAMMA) & MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & MASK64
    return z ^ (z >> 31)


def hash_u64(seed: int, position: int, stream: int = 0) -> int:
    """64-bit hash of (seed, position, stream); seed may be a uint64 or its int64 bits.

    ``splitmix64(splitmix64(splitmix64(seed) ^ position) ^ stream)``, where
    splitmix64(x) is SplitMix64's output for state x (add the golden gamma, then
    the 30/27/31 finalizer). Each step is a bijection of its input, so for one
    seed and stream, distinct positions never give the same 64-bit value.
    """
    h = _splitmix64(seed & MASK64)
    h = _splitmix64(h ^ (position & MASK64))
    return _splitmix64(h ^ (stream & MASK64))


def uniform(seed: int, position: int, stream: int = 0) -> float:
    """The draw for (seed, position, stream) as a float in [0, 1): top 53 bits of hash_u64.

    The sampler uses the top 62 bits of the same hash, so this is its draw rounded
    down to 2**-53.
    """
    return (hash_u64(seed, position, stream) >> 11) * 2.0**-53


def derive_seed(engine_seed: int, counter: int) -> int:
    """A request's uint64 seed when it gives none: a pure function of the engine seed
    and the engine's request counter."""
    return hash_u64(engine_seed, counter, _SEED_STREAM)


def seed_to_int64(seed: int) -> int:
    """uint64 -> the int64 with the same bits (what the ``seed`` tensor holds)."""
    seed &= MASK64
    return seed - (1 << 64) if seed >> 63 else seed


def _i64(c: int) -> int:
    return seed_to_int64(c)


def _lshr(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def _splitmix64_t(x: torch.Tensor) -> torch.Tensor:
    # int64 add/mul wrap modulo 2**64 on every torch backend; shifts are made logical.
    z = x + _i64(_GAMMA)
    z = (z ^ _lshr(z, 30)) * _i64(_MIX1)
    z = (z ^ _lshr(z, 27)) * _i64(_MIX2)
    return z ^ _lshr(z, 31)


def hash_u64_tensor(
    seed: torch.Tensor, position: torch.Tensor, stream: int | torch.Tensor = 0
) -> torch.Tensor:
    """:func:`hash_u64` elementwise on int64 tensors (uint64 bits in int64)."""
    h = _splitmix64_t(seed.long())
    h = _splitmix64_t(h ^ position.long())
    stream = stream if isinstance(stream, torch.Tensor) else torch.tensor(_i64(stream))
    return _splitmix64_t(h ^ stream.to(h.device, torch.long))


# ---------------------------------------------------------------------------
# Fixed point
# ---------------------------------------------------------------------------


def fixed_point_bits(vocab_size: int) -> int:
    """R: weights are floor(exp(x) * 2**R), so V * 2**R <= 2**62."""
    return min(52, 62 - (vocab_size - 1).bit_length())


def _mulhi62(r: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """floor(r * total / 2**62) for 0 <= r < 2**62, 0 <= total <= 2**62, exactly, in int64 limbs."""
    a, b = total >> 31, total & _M31
    c, d = r >> 31, r & _M31
    mid = a * d + b * c + ((b * d) >> 31)  # < 2**63
    return a * c + (mid >> 31)


def _top_k_top_p_mask(
    logits: torch.Tensor, w: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """[B, V] bool: tokens inside each row's top-k, then inside its nucleus."""
    V = logits.shape[-1]
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices
    rank = torch.arange(V, device=logits.device)
    k = torch.where((top_k <= 0) | (top_k > V), V, top_k)
    keep = rank[None, :] < k[:, None]
    ws = torch.where(keep, w.gather(1, order), 0)
    cum = ws.cumsum(-1)
    before = (cum - ws).double()
    mass = cum[:, -1:].double()
    p = top_p.double()[:, None]
    keep &= (p >= 1.0) | (before < p * mass)
    return torch.zeros_like(keep).scatter(1, order, keep)


def sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    top_k: torch.Tensor,
    seed: torch.Tensor,
    position: torch.Tensor,
    *,
    stream: int | torch.Tensor = 0,
    num_logprobs: int = 0,
) -> SampleResult:
    """Sample one token per row.

    logits [B, V] (any float dtype; used as float32); temperature [B] (0 = greedy);
    top_p [B] in (0, 1]; top_k [B] int (<= 0 = off); seed [B] int64 holding the
    uint64 bits (see seed_to_int64); position [B]: absolute position the sampled
    token will occupy in its sequence; stream: which draw at that position
    (0 = the token itself; other values for draft/verification draws);
    num_logprobs: also return the n largest raw logprobs per row.
    """
    logits = logits.float()
    V = logits.shape[-1]
    dev = logits.device
    temperature = temperature.to(dev, torch.float64)
    top_p = top_p.to(dev, torch.float32)
    top_k = top_k.to(dev, torch.long)

    greedy = temperature <= 0
    argmax = logits.argmax(-1)  # first maximal index

    x = logits.double()
    x.sub_(x.amax(-1, keepdim=True)).div_(torch.where(greedy, 1.0, temperature)[:, None])
    x.nan_to_num_(nan=-math.inf)  # rows with no finite logit
    w = x.exp_().mul_(float(2 ** fixed_point_bits(V))).floor_().long()
    # Only rows that ask for top-k/top-p pay for the sort; the kept set is the same
    # whichever rows are sorted together.
    filtered = (~greedy & (((top_k > 0) & (top_k < V)) | (top_p < 1))).nonzero().squeeze(1)
    if filtered.numel():
        wf = w[filtered]
        keep = _top_k_top_p_mask(logits[filtered], wf, top_k[filtered], top_p[filtered])
        w[filtered] = torch.where(keep, wf, 0)

    cum = w.cumsum(-1)
    total = cum[:, -1]
    r = _lshr(hash_u64_tensor(seed.to(dev), position.to(dev), stream), 2)
    t = _mulhi62(r, total)
    drawn = torch.searchsorted(cum, t[:, None], right=True).squeeze(1).clamp(max=V - 1)
    # Degenerate rows (no finite logit) fall back to argmax.
    tokens = torch.where(greedy | (total <= 0), argmax, drawn)

    raw = torch.log_softmax(logits, dim=-1)
    result = SampleResult(tokens, raw.gather(1, tokens[:, None]).squeeze(1))
    if num_logprobs > 0:
        top = raw.topk(min(num_logprobs, V), dim=-1)
        result.top_token_ids, result.top_logprobs = top.indices, top.values
    return result
