"""Scheduler: continuous batching, chunked prefill, preemption by recompute, async lag.

Most tests run the real engine (scheduler, cache manager, runner, sampler,
async worker) over ``ContextModel``: a fake model whose next-token logits are a
pure function of the whole context *as read back from the paged state*. If a
step lost, duplicated, reordered or misplaced a token, wrote into another
sequence's blocks, or reused a slot without resetting it, the logits (and
soon the tokens) would differ from a plain loop over the true context.
"""

from __future__ import annotations

import random
import zlib

import pytest
import torch

from deepinfer_adapters.decoding.sampler import sample, seed_to_int64
from deepinfer_adapters.decoding.sampling_params import SamplingParams
from deepinfer_adapters.model_impl.base import ModelOutput
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.state import StateCache, StateField, StateSpec
from deepinfer_adapters.standalone.cache_manager import CacheManager
from deepinfer_adapters.standalone.config import EngineConfig
from deepinfer_adapters.standalone.engine import LLMEngine
from deepinfer_adapters.standalone.llm import LLM
from deepinfer_adapters.standalone.request import Request, Status
from deepinfer_adapters.standalone.scheduler import Scheduler

VOCAB = 512  # logits width of the fake model (token ids stay inside the real vocabulary)
EOS = 1


def context_logits(ctx: list[int]) -> torch.Tensor:
    gen = torch.Generator().manual_seed(zlib.crc32(repr(ctx).encode()))
    return torch.randn(VOCAB, generator=gen) * 3


class ContextModel(torch.nn.Module):
    """Keeps each sequence's tokens in a ratio-1 rows field and token pairs in a ratio-2
    rows field (carrying an odd token in a fixed field, like a compressor's partial
    block), checks both on every step and returns logits of the context it read back."""

    def __init__(self) -> None:
        super().__init__()
        self.seen_batches: list[list[tuple[int, int, int]]] = []

    def state_spec(self, rewind: int = 0) -> StateSpec:
        assert rewind == 0, "this test model's fixed fields are not position rings: it cannot rewind"
        spec = StateSpec()
        spec.add("ctx", StateField("tok", (1,), torch.int64, "rows", ratio=1),
                 StateField("pair", (2,), torch.int64, "rows", ratio=2),
                 StateField("seen", (1,), torch.int64, "fixed", fill=0),
                 StateField("odd", (1,), torch.int64, "fixed", fill=-1))
        return spec

    def forward(self, batch: ForwardBatch, state: StateCache) -> ModelOutput:
        seen, odd = state.fixed("ctx", "seen"), state.fixed("ctx", "odd")
        last: dict[int, torch.Tensor] = {}
        self.seen_batches.append([(batch.slots[i], batch.start_pos[i], batch.seq_len(i))
                                  for i in range(batch.num_seqs)])
        for i in range(batch.num_seqs):
            slot, start, n = batch.slots[i], batch.start_pos[i], batch.seq_len(i)
            toks = batch.input_ids[batch.rows(i)]
            assert int(seen[slot]) == start, "fixed state does not match the sequence"
            assert (toks >= 0).all(), "an unfilled placeholder reached the model"
            assert batch.positions[batch.rows(i)].tolist() == list(range(start, start + n))
            state.write_rows("ctx", "tok", slot, start, toks[:, None])
            buf = ([int(odd[slot])] if start % 2 else []) + toks.tolist()
            assert -1 not in buf
            if len(buf) >= 2:
                whole = len(buf) // 2 * 2
                state.write_rows("ctx", "pair", slot, start // 2, torch.tensor(buf[:whole]).view(-1, 2))
            odd[slot] = buf[-1] if len(buf) % 2 else -1
            seen[slot] = start + n
            end = start + n
            ctx = state.read_rows("ctx", "tok", slot, 0, end)[:, 0].tolist()
            pairs = state.read_rows("ctx", "pair", slot, 0, end // 2).flatten().tolist()
            assert pairs == ctx[: end // 2 * 2], "ratio-2 rows disagree with the token rows"
            last[batch.cu_seqlens[i + 1] - 1] = context_logits(ctx)
        rows = batch.default_logits_rows().tolist()
        logits = torch.stack([last[r] for r in rows]) if rows else torch.zeros(0, VOCAB)
        return ModelOutput(logits=logits)


def expected_tokens(prompt: list[int], p: SamplingParams, seed: int, max_model_len: int) -> list[int]:
    """A plain loop: sample from the logits of the true context, stop as the engine does."""
    ctx, out = list(prompt), []
    while True:
        res = sample(context_logits(ctx)[None], torch.tensor([float(p.temperature)]), torch.tensor([float(p.top_p)]),
                     torch.tensor([p.top_k]), torch.tensor([seed_to_int64(seed)]), torch.tensor([len(ctx)]))
        tok = int(res.tokens[0])
        out.append(tok)
        ctx.append(tok)
        if (tok == EOS and not p.ignore_eos) or tok in (p.stop_token_ids or ()):
            return out
        if len(out) >= p.max_tokens or len(ctx) >= max_model_len:
            return out


@pytest.fixture(scope="module")
def model_dir(tiny_checkpoint):
    return tiny_checkpoint("v41")  # config and tokenizer only; the model is ContextModel


def make_engine(model_dir, *, blocks: int | None = None, model=None, **cfg) -> LLMEngine:
    model = model or ContextModel()
    cfg.setdefault("max_model_len", 64)
    cfg.setdefault("block_size", 4)
    if blocks is not None:  # a budget of exactly this many blocks
        spec = model.state_spec()
        probe = CacheManager(spec, num_slots=1, num_blocks=1, block_size=cfg["block_size"])
        cfg["state_memory_bytes"] = cfg.get("max_num_seqs", 32) * probe.bytes_per_slot + blocks * probe.bytes_per_block
    return LLMEngine(model_dir, EngineConfig(**cfg), model=model)


def random_workload(rng: random.Random, n: int) -> list[tuple[list[int], SamplingParams]]:
    work = []
    for i in range(n):
        prompt = [rng.randrange(2, VOCAB) for _ in range(rng.randint(1, 40))]
        kind = i % 4
        if kind == 0:
            p = SamplingParams(temperature=0, max_tokens=rng.randint(1, 12))
        elif kind == 1:
            p = SamplingParams(temperature=0.9, top_p=0.8, max_tokens=rng.randint(1, 12), seed=rng.randrange(2**64))
        elif kind == 2:  # stops early on a likely token
            p = SamplingParams(temperature=1.2, top_k=4, max_tokens=12, seed=i, stop_token_ids=[7, 9, 11, 13])
        else:  # with EOS among the candidates
            p = SamplingParams(temperature=2.0, max_tokens=12, seed=i, ignore_eos=bool(i % 8 == 3))
        work.append((prompt, p))
    return work


def run_staggered(engine: LLMEngine, work, rng: random.Random) -> dict[str, object]:
    """Add requests a few at a time between steps; return every output by id, checking none repeats."""
    outputs: dict[str, object] = {}
    pending = list(enumerate(work))
    while pending or engine.has_unfinished_requests():
        for _ in range(rng.randint(0, 3)):
            if pending:
                i, (prompt, p) = pending.pop(0)
                engine.add_request(str(i), prompt, p)
        for out in engine.step():
            assert out.request_id not in outputs, "a request finished twice"
            outputs[out.request_id] = out
    return outputs


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_random_workload_with_preemption_matches_plain_loop(model_dir, async_scheduling):
    rng = random.Random(1)
    engine = make_engine(model_dir, blocks=30, max_num_seqs=6, max_num_batched_tokens=16,
                         async_scheduling=async_scheduling)
    work = random_workload(rng, 24)
    outputs = run_staggered(engine, work, rng)
    assert sorted(outputs, key=int) == [str(i) for i in range(len(work))]  # none lost
    assert engine.stats.preemptions > 0  # the budget was small enough to matter
    for i, (prompt, p) in enumerate(work):
        out = outputs[str(i)]
        seed = p.seed if p.seed is not None else 0  # unseeded requests here are greedy
        assert out.token_ids == expected_tokens(prompt, p, seed, 64), f"request {i}"
        assert out.finish_reason in ("stop", "length")
    usage = engine.cache_usage()
    assert usage.used_blocks == 0 and usage.used_slots == 0
    if async_scheduling:
        assert engine.stats.overlapped_steps > 0
    else:
        assert engine.stats.overlapped_steps == 0
    engine.close()


def test_steps_mix_prefill_chunks_and_decodes_within_budget(model_dir):
    model = ContextModel()
    engine = make_engine(model_dir, model=model, max_num_seqs=3, max_num_batched_tokens=10, async_scheduling=False)
    engine.add_request("a", list(range(2, 6)), SamplingParams(temperature=0, max_tokens=6))  # 4 tokens
    engine.step()  # a: whole prompt
    engine.add_request("b", list(range(2, 27)), SamplingParams(temperature=0, max_tokens=2))  # 25 tokens
    engine.add_request("c", [5], SamplingParams(temperature=0, max_tokens=2))
    engine.add_request("d", [6], SamplingParams(temperature=0, max_tokens=2))  # over max_num_seqs
    while engine.has_unfinished_requests():
        engine.step()
    # (slot, start, new tokens) per step: a decodes every step; b's 25-token prompt is
    # chunked into what the 10-token budget leaves; c (1 token) joins as soon as b's
    # last chunk leaves room; d waits for a free slot (max_num_seqs=3) and takes b's
    assert model.seen_batches == [
        [(0, 0, 4)],
        [(0, 4, 1), (1, 0, 9)],
        [(0, 5, 1), (1, 9, 9)],
        [(0, 6, 1), (1, 18, 7), (2, 0, 1)],
        [(0, 7, 1), (1, 25, 1), (2, 1, 1)],
        [(0, 8, 1), (1, 0, 1)],
        [(1, 1, 1)],
    ]
    assert engine.stats.preemptions == 0
    assert engine.cache_usage().used_slots == 0


def _request(rid: str, n_prompt: int, max_tokens: int = 8) -> Request:
    return Request(rid, None, list(range(2, 2 + n_prompt)), SamplingParams(temperature=0, max_tokens=max_tokens),
                   seed=0, eos_token_id=EOS)


def test_newest_request_is_preempted_and_requeued_in_arrival_order():
    spec = ContextModel().state_spec()
    cache = CacheManager(spec, num_slots=4, num_blocks=6, block_size=4)
    sched = Scheduler(cache, max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64)
    reqs = [_request(f"r{i}", 8) for i in range(3)]  # 2 blocks each
    for r in reqs:
        sched.add(r)
    out = sched.schedule()
    assert [s.request for s in out.seqs] == reqs and all(s.samples for s in out.seqs)
    for r in reqs:  # the sampled tokens arrive
        r.num_pending -= 1
        r.output_token_ids.append(5)
    assert cache.num_free_blocks == 0
    # each needs a third block for token 9: the oldest gets it by preempting the newest
    out = sched.schedule()
    assert out.preempted == [reqs[2]]
    assert [s.request for s in out.seqs] == reqs[:2]
    assert reqs[2].status is Status.WAITING and reqs[2].num_computed_tokens == 0 and reqs[2].slot is None
    assert reqs[2].output_token_ids == [5]  # kept: recomputed later, not regenerated
    assert sched.waiting == [reqs[2]] and sched.running == reqs[:2]
    assert reqs[2].metrics.num_preemptions == 1
    # freeing the others lets it back in, recomputing prompt + output (9 tokens)
    for r in reqs[:2]:
        sched.finish(r, "abort")
    out = sched.schedule()
    assert [(s.request, s.start, s.num_tokens) for s in out.seqs] == [(reqs[2], 0, 9)]
    assert out.seqs[0].fresh_slot


def test_async_lag_never_plans_past_max_tokens():
    """Planning before the previous tokens are known: a decode input is a placeholder,
    and no step is planned for a request whose pending token is its last."""
    cache = CacheManager(ContextModel().state_spec(), num_slots=2, num_blocks=16, block_size=4)
    sched = Scheduler(cache, max_num_seqs=2, max_num_batched_tokens=64, max_model_len=64)
    r = _request("r", 3, max_tokens=2)
    sched.add(r)
    s1 = sched.schedule()  # prefill: samples token 1 (pending)
    assert r.num_pending == 1 and s1.seqs[0].samples
    s2 = sched.schedule()  # decode of the pending token: samples token 2
    assert [(s.start, s.num_tokens) for s in s2.seqs] == [(3, 1)]
    assert r.token_ids(3, 4) == [None] and r.num_pending == 2
    assert sched.schedule().seqs == []  # token 2 is the last: nothing more to plan
    r.num_pending, r.output_token_ids = 0, [7, 8]
    assert sched.schedule().seqs == []


def test_preempted_request_waits_for_its_pending_token():
    cache = CacheManager(ContextModel().state_spec(), num_slots=2, num_blocks=4, block_size=4)
    sched = Scheduler(cache, max_num_seqs=2, max_num_batched_tokens=64, max_model_len=64)
    a, b = _request("a", 8), _request("b", 7)
    sched.add(a)
    sched.add(b)
    sched.schedule()  # both prefilled, both pending a token
    out = sched.schedule()  # a needs a 3rd block: b (newest) goes, its token still in flight
    assert out.preempted == [b] and b.num_pending == 1
    sched.finish(a, "abort")
    assert sched.schedule().seqs == []  # b may not be recomputed before its token is known
    b.num_pending, b.output_token_ids = 0, [9]
    out = sched.schedule()
    assert [(s.request, s.start, s.num_tokens) for s in out.seqs] == [(b, 0, 8)]


def test_abort_frees_state_in_flight_and_waiting(model_dir):
    engine = make_engine(model_dir, max_num_seqs=2, max_num_batched_tokens=64)  # async on
    p = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    for rid in ("a", "b", "c"):
        engine.add_request(rid, [3, 4, 5, 6, 7], p)
    engine.step()
    engine.step()
    assert engine.cache_usage().used_slots == 2
    engine.abort_request("a")  # running, with a step in flight
    engine.abort_request("c")  # still waiting for a slot
    engine.abort_request("nope")  # unknown ids are ignored
    outs = {o.request_id: o for o in engine.step()}
    assert {k: o.finish_reason for k, o in outs.items()} == {"a": "abort", "c": "abort"}
    assert outs["c"].token_ids == [] and 1 <= len(outs["a"].token_ids) < 10
    rest = {}
    while engine.has_unfinished_requests():
        rest.update({o.request_id: o for o in engine.step()})
    assert rest["b"].token_ids == expected_tokens([3, 4, 5, 6, 7], p, 0, 64)
    assert engine.cache_usage().used_blocks == 0 and engine.cache_usage().used_slots == 0
    engine.close()



@pytest.mark.parametrize("async_scheduling", [True, False])
def test_max_model_len_ends_a_request_with_length(model_dir, async_scheduling):
    engine = make_engine(model_dir, max_model_len=32, async_scheduling=async_scheduling)
    p = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    out = LLM.from_engine(engine).generate([list(range(2, 30))], p, use_tqdm=False)[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 32 - 28
    assert out.token_ids == expected_tokens(list(range(2, 30)), p, 0, 32)
    engine.close()
