"""Deterministic sampler and SamplingParams validation."""

from __future__ import annotations

import math

import pytest
import torch

from deepinfer_adapters.decoding.sampler import (
    MASK64,
    _mulhi62,
    derive_seed,
    fixed_point_bits,
    hash_u64,
    hash_u64_tensor,
    sample,
    seed_to_int64,
    uniform,
)
from deepinfer_adapters.decoding.sampling_params import SamplingParams, SamplingParamsError
from deepinfer_adapters.errors import DeepInferAdaptersError


def _run(logits, temperature=1.0, top_p=1.0, top_k=0, seed=1234, position=0, **kw):
    """Broadcast scalar params over the rows of ``logits`` and sample."""
    B = logits.shape[0]

    def vec(v, dtype):
        return v.to(dtype) if isinstance(v, torch.Tensor) else torch.full((B,), v, dtype=dtype)

    seed = seed if isinstance(seed, torch.Tensor) else torch.full((B,), seed_to_int64(seed))
    return sample(
        logits,
        vec(temperature, torch.float32),
        vec(top_p, torch.float32),
        vec(top_k, torch.long),
        seed,
        vec(position, torch.long),
        **kw,
    )


def _draws(logits_row, n=20000, seed=7, **params):
    """Sample one row at positions 0..n-1 (as one batch of n identical rows)."""
    rows = logits_row[None].expand(n, -1).contiguous()
    return _run(rows, seed=seed, position=torch.arange(n), **params).tokens


# ---------------------------------------------------------------------------
# Random numbers
# ---------------------------------------------------------------------------

EDGE_SEEDS = [0, 1, 42, (1 << 63) - 1, 1 << 63, MASK64, 0x9E3779B97F4A7C15]


def test_tensor_hash_matches_python_ints():
    g = torch.Generator().manual_seed(0)
    rand = torch.randint(-(2**63), 2**63 - 1, (200,), generator=g)
    seeds = EDGE_SEEDS + [int(s) & MASK64 for s in rand]
    positions = [0, 1, 2**31 - 1, 2**40 + 3] + list(range(len(seeds) - 4))
    for stream in (0, 1, 0x5EED):
        got = hash_u64_tensor(
            torch.tensor([seed_to_int64(s) for s in seeds]), torch.tensor(positions), stream
        )
        want = [seed_to_int64(hash_u64(s, p, stream)) for s, p in zip(seeds, positions)]
        assert got.tolist() == want


def test_uniform_is_pure_and_varies():
    assert uniform(5, 10) == uniform(5, 10)
    assert uniform(MASK64, 3) == uniform(-1, 3)  # uint64 and int64 views of one seed
    us = [uniform(5, p) for p in range(2000)]
    assert len(set(us)) == 2000 and all(0.0 <= u < 1.0 for u in us)
    assert abs(sum(us) / len(us) - 0.5) < 0.02
    assert len({uniform(s, 10) for s in range(2000)}) == 2000
    assert uniform(5, 10, stream=1) != uniform(5, 10)


def test_derive_seed():
    seeds = [derive_seed(0, i) for i in range(1000)]
    assert seeds == [derive_seed(0, i) for i in range(1000)]
    assert len(set(seeds)) == 1000 and all(0 <= s <= MASK64 for s in seeds)
    assert derive_seed(1, 0) != derive_seed(0, 0)
    SamplingParams(seed=seeds[0])  # a valid request seed


def test_sampler_draw_is_uniform():
    """Equal logits over 4 tokens: the token is floor(4 * uniform(seed, position))."""
    logits = torch.zeros(300, 4)
    for seed in (3, MASK64):
        got = _run(logits, seed=seed, position=torch.arange(300)).tokens.tolist()
        assert got == [int(4 * uniform(seed, p)) for p in range(300)]


def test_mulhi62_exact():
    g = torch.Generator().manual_seed(1)
    r = torch.randint(0, 2**62, (500,), generator=g)
    total = torch.randint(1, 2**62, (500,), generator=g)
    r[:3] = torch.tensor([0, 2**62 - 1, 2**62 - 1])
    total[:3] = torch.tensor([2**62 - 1, 2**62 - 1, 1])
    want = [(a * b) >> 62 for a, b in zip(r.tolist(), total.tolist())]
    got = _mulhi62(r, total).tolist()
    assert got == want and all(t < n for t, n in zip(got, total.tolist()))


def test_exp_bits_do_not_depend_on_offset():
    """The sampler's exp must give one answer per input wherever it lands in a tensor
    (vector body, loop remainder, strided, any thread split)."""
    x = torch.rand(50_000, dtype=torch.float64) * -40
    full = torch.exp(x)
    for n in (1, 3, 7, 13, 31, 65):
        for off in range(8):
            assert torch.equal(torch.exp(x[off : off + n]), full[off : off + n])
    assert torch.equal(torch.exp(torch.stack([x, x], 1)[:, 0]), full)


def test_fixed_point_bits():
    assert fixed_point_bits(129280) == 45
    assert fixed_point_bits(8) == 52
    assert fixed_point_bits(2**20) == 42


# ---------------------------------------------------------------------------
# Greedy
# ---------------------------------------------------------------------------


def test_greedy_is_argmax_lowest_index_on_ties():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(8, 50, generator=g)
    logits[3, [7, 20, 41]] = 100.0  # a three-way tie
    out = _run(logits, temperature=0.0, seed=99, position=torch.arange(8))
    assert torch.equal(out.tokens, logits.argmax(-1))
    assert out.tokens[3].item() == 7
    # top_k == 1 (SamplingParams.greedy) picks the same token through the sampling path
    out_k1 = _run(logits, temperature=0.8, top_k=1, position=torch.arange(8))
    assert torch.equal(out_k1.tokens, out.tokens)


def test_temperature_to_zero_limit():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(64, 100, generator=g)
    for t in (1e-3, 1e-6, 1e-30):
        out = _run(logits, temperature=t, position=torch.arange(64))
        assert torch.equal(out.tokens, logits.argmax(-1))
    # a tie at the max splits between the tied tokens, never anything else
    row = torch.tensor([0.0, 2.0, 1.9999, 2.0, -3.0])
    toks = _draws(row, n=2000, temperature=1e-6)
    assert set(toks.tolist()) == {1, 3}


# ---------------------------------------------------------------------------
# Batch invariance
# ---------------------------------------------------------------------------

ROW_PARAMS = [
    dict(temperature=1.0, top_p=1.0, top_k=0),
    dict(temperature=0.7, top_p=0.9, top_k=0),
    dict(temperature=1.3, top_p=1.0, top_k=20),
    dict(temperature=0.5, top_p=0.8, top_k=50),
    dict(temperature=0.0, top_p=1.0, top_k=0),
]


@pytest.mark.parametrize("params", ROW_PARAMS)
def test_batch_invariance(params):
    V = 257  # odd, so rows start at every vector-lane offset
    g = torch.Generator().manual_seed(4)
    target = torch.randn(V, generator=g) * 3
    target[10] = float("-inf")
    trials = [(s, p) for s in (0, 11, MASK64, 1 << 63) for p in (0, 1, 5, 1000, 2**31)]

    def alone(seed, pos):
        return _run(target[None], seed=seed, position=pos, **params).tokens.item()

    expected = [alone(s, p) for s, p in trials]
    assert len(set(expected)) > 1 or params["temperature"] == 0

    for B in (4, 16):
        for where in (0, B // 2, B - 1):
            logits = torch.randn(B, V, generator=g) * 3
            logits[where] = target
            # the other rows carry other params (some greedy, some top-k/top-p, some off)
            perm = torch.randperm(len(ROW_PARAMS) * 4, generator=g)[:B] % len(ROW_PARAMS)
            cols = {k: torch.tensor([ROW_PARAMS[i][k] for i in perm.tolist()]) for k in params}
            for k, v in params.items():
                cols[k][where] = v
            for (s, p), want in zip(trials, expected):
                seeds = torch.randint(-(2**63), 2**63 - 1, (B,), generator=g)
                seeds[where] = seed_to_int64(s)
                positions = torch.randint(0, 10**6, (B,), generator=g)
                positions[where] = p
                out = _run(logits, seed=seeds, position=positions, **cols)
                assert out.tokens[where].item() == want
                # and the same batch in reverse order
                rev = _run(logits.flip(0), seed=seeds.flip(0), position=positions.flip(0),
                           **{k: v.flip(0) for k, v in cols.items()})
                assert rev.tokens[B - 1 - where].item() == want
                assert torch.equal(rev.tokens.flip(0), out.tokens)


def test_seeds_and_positions_change_the_draw():
    row = torch.zeros(1000)
    by_pos = _draws(row, n=500, seed=1)
    assert len(set(by_pos.tolist())) > 350
    seeds = torch.tensor([seed_to_int64(derive_seed(0, i)) for i in range(500)])
    by_seed = _run(row[None].expand(500, -1), seed=seeds, position=0).tokens
    assert len(set(by_seed.tolist())) > 350
    assert not torch.equal(by_pos, _draws(row, n=500, seed=2))
    assert not torch.equal(by_pos, _draws(row, n=500, seed=1, stream=1))
    assert torch.equal(by_pos, _draws(row, n=500, seed=1))


# ---------------------------------------------------------------------------
# Distribution, top-k, top-p, zero probability
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.6, 2.5])
def test_empirical_distribution_matches_softmax(temperature):
    logits = torch.tensor([1.0, 0.2, -0.5, 2.0, 0.0, -3.0, 1.5, 0.7])
    n = 20000
    toks = _draws(logits, n=n, seed=2024, temperature=temperature)
    counts = torch.bincount(toks, minlength=8).double()
    p = torch.softmax(logits.double() / temperature, -1)
    expected = n * p
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 30.0  # 7 dof: p-value ~ 1e-4
    assert (counts / n - p).abs().max().item() < 0.012


def test_top_k_only_returns_k_largest():
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(100, generator=g)
    k = 5
    allowed = set(torch.topk(logits, k).indices.tolist())
    toks = set(_draws(logits, n=5000, temperature=3.0, top_k=k).tolist())
    assert toks == allowed
    # ties at the k-th place go to the lowest index
    tied = torch.tensor([0.0, 1.0, 1.0, 1.0, 2.0])
    assert set(_draws(tied, n=2000, top_k=3).tolist()) == {4, 1, 2}


def test_top_p_only_returns_nucleus():
    g = torch.Generator().manual_seed(6)
    logits = torch.randn(60, generator=g) * 2
    T, top_p = 0.9, 0.7
    p = torch.softmax(logits.double() / T, -1)
    sp, order = p.sort(descending=True)
    before = sp.cumsum(0) - sp
    nucleus = set(order[before < top_p].tolist())
    toks = _draws(logits, n=8000, temperature=T, top_p=top_p)
    assert set(toks.tolist()) == nucleus
    # renormalized inside the nucleus
    mass = p[list(nucleus)].sum()
    for tok in nucleus:
        assert abs((toks == tok).double().mean().item() - p[tok].item() / mass.item()) < 0.02


def test_top_k_then_top_p():
    logits = torch.tensor([3.0, 2.9, 2.8, 0.0, -1.0, 2.7])
    # top-k 3 keeps {0, 1, 2} (renormalized ~ .37/.33/.30); top_p 0.5 keeps {0, 1}
    toks = set(_draws(logits, n=3000, top_k=3, top_p=0.5).tolist())
    assert toks == {0, 1}


def test_zero_probability_never_sampled():
    logits = torch.zeros(40)
    banned = [0, 3, 17, 39]
    logits[banned] = float("-inf")
    for T in (1.0, 100.0):
        toks = _draws(logits, n=10000, temperature=T)
        assert not set(toks.tolist()) & set(banned)
        assert len(set(toks.tolist())) == 36
    # a row whose only finite logit is the last one
    only_last = torch.full((8,), float("-inf"))
    only_last[-1] = 0.0
    assert set(_draws(only_last, n=500).tolist()) == {7}


# ---------------------------------------------------------------------------
# Logprobs
# ---------------------------------------------------------------------------


def test_logprobs_are_raw_log_softmax():
    g = torch.Generator().manual_seed(8)
    logits = torch.randn(32, 300, generator=g) * 2
    temps = torch.tensor([0.0, 0.5, 1.0, 2.0] * 8)
    out = _run(logits, temperature=temps, top_p=0.9, position=torch.arange(32), num_logprobs=4)
    raw = torch.log_softmax(logits, -1)
    assert torch.equal(out.logprobs, raw.gather(1, out.tokens[:, None]).squeeze(1))
    assert out.logprobs.dtype == torch.float32
    top = raw.topk(4, -1)
    assert torch.equal(out.top_token_ids, top.indices)
    assert torch.equal(out.top_logprobs, top.values)
    assert _run(logits).top_logprobs is None


# ---------------------------------------------------------------------------
# SamplingParams
# ---------------------------------------------------------------------------


def test_sampling_params_defaults_and_greedy():
    sp = SamplingParams()
    assert (sp.temperature, sp.top_p, sp.top_k, sp.max_tokens) == (1.0, 1.0, 0, 16)
    assert not sp.greedy
    assert SamplingParams(temperature=0).greedy and SamplingParams(top_k=1).greedy
    assert SamplingParams(stop="x").stop_strings == ["x"]
    SamplingParams(top_k=-1, seed=MASK64, logprobs=20, stop=["a", "b"], stop_token_ids=[1])
    SamplingParams(stop_token_ids=[5]).validate(vocab_size=6)


BAD_PARAMS = [
    (dict(max_tokens=0), "max_tokens", ">= 1"),
    (dict(max_tokens=2.5), "max_tokens", ">= 1"),
    (dict(temperature=-0.1), "temperature", ">= 0"),
    (dict(temperature=math.nan), "temperature", ">= 0"),
    (dict(temperature=math.inf), "temperature", "finite"),
    (dict(top_p=0.0), "top_p", r"\(0, 1\]"),
    (dict(top_p=1.5), "top_p", r"\(0, 1\]"),
    (dict(top_p=math.nan), "top_p", r"\(0, 1\]"),
    (dict(top_k=-2), "top_k", ">= -1"),
    (dict(top_k=2.0), "top_k", ">= -1"),
    (dict(logprobs=-1), "logprobs", r"\[0, 20\]"),
    (dict(logprobs=21), "logprobs", r"\[0, 20\]"),
    (dict(stop=5), "stop", "str or a list of str"),
    (dict(stop={"a"}), "stop", "str or a list of str"),
    (dict(stop=["a", 3]), "stop", "str or a list of str"),
    (dict(stop=""), "stop", "non-empty"),
    (dict(stop=["a", ""]), "stop", "non-empty"),
    (dict(stop_token_ids=[1, "2"]), "stop_token_ids", "list of int"),
    (dict(stop_token_ids=3), "stop_token_ids", "list of int"),
    (dict(stop_token_ids=[-1]), "stop_token_ids", r"\[0, vocab_size\)"),
    (dict(seed=-1), "seed", r"\[0, 2\*\*64\)"),
    (dict(seed=1 << 64), "seed", r"\[0, 2\*\*64\)"),
    (dict(seed=1.0), "seed", r"\[0, 2\*\*64\)"),
    (dict(ignore_eos="yes"), "ignore_eos", "bool"),
]


@pytest.mark.parametrize(
    "kwargs,param,valid", BAD_PARAMS, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD_PARAMS)]
)
def test_bad_sampling_params(kwargs, param, valid):
    with pytest.raises(SamplingParamsError, match=f"^{param} .*{valid}") as info:
        SamplingParams(**kwargs)
    assert info.value.param == param
    assert isinstance(info.value, ValueError) and isinstance(info.value, DeepInferAdaptersError)


def test_stop_token_ids_outside_vocab():
    sp = SamplingParams(stop_token_ids=[1, 100])
    with pytest.raises(SamplingParamsError, match=r"stop_token_ids .*\[0, 100\), got 100"):
        sp.validate(vocab_size=100)


def test_validate_after_mutation():
    sp = SamplingParams()
    sp.top_p = 0
    with pytest.raises(SamplingParamsError, match="top_p"):
        sp.validate()
