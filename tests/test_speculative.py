"""Speculative decoding in the standalone engine (standalone/speculative.py).

Lossless by construction: every verified row is sampled with the request's own sampler at
its position, so outputs must equal plain decoding token for token, greedy and seeded
sampling alike. The tiny model's random draft stages almost never guess right, which
exercises rejection; an oracle drafter (the true continuation, with a wrong token now and
then) exercises acceptance, bonus tokens and the state rewinding over rejected drafts.
"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.decoding.sampling_params import SamplingParams
from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.standalone import EngineConfig, LLMEngine
from deepinfer_adapters.standalone.runner import load_model
from deepinfer_adapters.standalone.speculative import accepted

LENGTHS = [3, 17, 40, 9, 64, 1]
MAX_TOKENS = 9


def _prompt(n, seed):
    return torch.randint(3, 128000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


PROMPTS = [_prompt(n, i) for i, n in enumerate(LENGTHS)]
PARAMS = [SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=1) if i % 2 == 0 else
          SamplingParams(temperature=0.9, top_p=0.95, max_tokens=MAX_TOKENS, ignore_eos=True, seed=100 + i)
          for i in range(len(PROMPTS))]


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint("v41")


@pytest.fixture(scope="module")
def model(ckpt):
    return load_model(ckpt, Numerics.float32().invariant(), progress=False, with_draft=True)


def _engine(ckpt, model, **cfg):
    return LLMEngine(ckpt, EngineConfig(max_model_len=256, block_size=16, numerics="float32", max_num_seqs=4,
                                        max_num_batched_tokens=64, **cfg), model=model)


def _run(engine, drafter=None):
    """All requests through ``engine``; (outputs in request order, {arrival: request})."""
    if drafter is not None:
        engine.runner.drafter = drafter
    reqs = [engine.add_request(str(i), p, sp) for i, (p, sp) in enumerate(zip(PROMPTS, PARAMS))]
    outs = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            outs[o.request_id] = o
    engine.close()
    return [outs[str(i)] for i in range(len(PROMPTS))], {r.arrival: r for r in reqs}


@pytest.fixture(scope="module")
def plain(ckpt, model):
    engine = _engine(ckpt, model)
    outs, _ = _run(engine)
    return outs, engine.stats.steps


def _same(outs, want):
    assert [o.token_ids for o in outs] == [o.token_ids for o in want]
    for o, w in zip(outs, want):
        if w.logprobs is not None:
            for a, b in zip(o.logprobs, w.logprobs):
                assert a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-3 for k in b)


def test_accepted_counts_the_matching_prefix():
    assert accepted([5, 6, 7], [5, 6, 9, 1]) == 2
    assert accepted([5, 6, 7], [1, 6, 7, 1]) == 0
    assert accepted([5, 6], [5, 6, 3]) == 2 and accepted([], [4]) == 0


def test_speculative_outputs_equal_plain_decoding(ckpt, model, plain):
    drafted = {}
    for min_confidence in (0.0, 0.3):  # all 5 drafts verified / only the confident leading ones
        engine = _engine(ckpt, model, speculative_tokens=5, speculative_min_confidence=min_confidence)
        outs, _ = _run(engine)
        _same(outs, plain[0])
        assert engine.stats.draft_tokens > 0 and engine.stats.overlapped_steps == 0
        drafted[min_confidence] = engine.stats.draft_tokens
    assert drafted[0.3] < drafted[0.0]


def test_accepted_drafts_give_the_same_outputs_in_fewer_steps(ckpt, model, plain):
    """An oracle drafter: the true continuation, except a wrong token at every third position."""
    want, plain_steps = plain
    k = 4
    engine = _engine(ckpt, model, speculative_tokens=k)
    by_arrival = {}

    def oracle(keys, last_tokens, positions, slots, state):
        out = []
        for key, pos in zip(keys, positions):
            req = by_arrival[key]
            full = req.prompt_token_ids + want[int(req.request_id)].token_ids
            drafts = list(full[pos + 2 : pos + 2 + k])
            if pos % 3 == 0 and len(drafts) > 2:
                drafts[2] = (drafts[2] + 1) % 1000 + 3
            out.append(drafts)
        return out

    engine.runner.drafter = oracle
    reqs = [engine.add_request(str(i), p, sp) for i, (p, sp) in enumerate(zip(PROMPTS, PARAMS))]
    by_arrival.update({r.arrival: r for r in reqs})
    outs = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            outs[o.request_id] = o
    engine.close()
    _same([outs[str(i)] for i in range(len(PROMPTS))], want)
    s = engine.stats
    assert 0 < s.accepted_tokens < s.draft_tokens  # accepted and rejected drafts both happened
    assert s.steps < plain_steps
    assert engine.cache_usage().used_blocks == 0 and engine.cache_usage().used_slots == 0


def test_speculative_settings_are_checked(ckpt, tiny_checkpoint):
    no_draft = load_model(ckpt, Numerics.float32().invariant(), progress=False)
    with pytest.raises(ConfigError, match="draft stages"):
        _engine(ckpt, no_draft, speculative_tokens=3)
    with_draft = load_model(ckpt, Numerics.float32().invariant(), progress=False, with_draft=True)
    with pytest.raises(ConfigError, match="speculative_tokens"):
        _engine(ckpt, with_draft, speculative_tokens=with_draft.cfg.draft.block_size + 1)
    with pytest.raises(ConfigError, match="speculative_tokens"):
        EngineConfig(speculative_tokens=-1)
    with pytest.raises(ConfigError, match="speculative_min_confidence"):
        EngineConfig(speculative_min_confidence=1.5)
