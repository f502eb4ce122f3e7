"""The standalone engine on the tiny V4.1 and V4 checkpoints (float32 numerics, so chunked
prefill matches a full forward up to fp32 rounding and exact token comparisons hold).

- greedy (and seeded) outputs == a plain loop over full forwards;
- a batch of 16 mixed-length prompts == each prompt alone, == in groups of 4, == reversed;
- async scheduling on == off; a budget small enough to force preemption == unconstrained,
  and state usage returns to zero;
- bad inputs raise a ValueError naming the parameter, queue nothing, and leave the
  requests already running untouched.
"""

from __future__ import annotations

import random

import pytest
import torch

from deepinfer_adapters.decoding.sampler import sample, seed_to_int64
from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.decoding.sampling_params import SamplingParams, SamplingParamsError
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.tokenizer import encode_chat, render_chat
from deepinfer_adapters.standalone import LLM, EngineConfig, LLMEngine
from deepinfer_adapters.standalone.cache_manager import CacheManager, round_block_size
from deepinfer_adapters.standalone.runner import load_model

LENGTHS = [1, 2, 3, 5, 8, 13, 21, 34, 55, 7, 4, 16, 30, 12, 60, 9]


def _prompt(n: int, seed: int) -> list[int]:
    return torch.randint(3, 128000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


PROMPTS = [_prompt(n, i) for i, n in enumerate(LENGTHS)]


def _params(i: int) -> SamplingParams:
    """Even: greedy; odd: seeded sampling with varied temperature / top-p / top-k."""
    max_tokens = 3 + i % 3
    if i % 2 == 0:
        return SamplingParams(temperature=0, max_tokens=max_tokens, logprobs=2 if i % 4 == 0 else None)
    return SamplingParams(temperature=(0.7, 1.0, 1.3)[i % 3], top_p=(1.0, 0.9)[i // 2 % 2],
                          top_k=(0, 40)[i // 4 % 2], max_tokens=max_tokens, seed=1000 + i,
                          logprobs=1 if i % 4 == 1 else None)


PARAMS = [_params(i) for i in range(len(PROMPTS))]


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint("v41")


@pytest.fixture(scope="module")
def model(ckpt):
    return load_model(ckpt, Numerics.float32().invariant(), progress=False)


def engine_for(ckpt, model, **cfg) -> LLMEngine:
    cfg.setdefault("max_model_len", 256)
    cfg.setdefault("block_size", 16)
    cfg.setdefault("numerics", "float32")
    return LLMEngine(ckpt, EngineConfig(**cfg), model=model)


def generate(engine: LLMEngine, prompts, params) -> list:
    return LLM.from_engine(engine).generate(prompts, params, use_tqdm=False)


def _key(out) -> tuple:
    return out.token_ids, out.finish_reason


@pytest.fixture(scope="module")
def alone(ckpt, model):
    engine = engine_for(ckpt, model, max_num_seqs=1)
    outs = [generate(engine, [p], sp)[0] for p, sp in zip(PROMPTS, PARAMS)]
    engine.close()
    return outs


@pytest.fixture(scope="module")
def batch16(ckpt, model):
    # a 64-token budget: prompts are chunked over several steps, mixed with decodes
    engine = engine_for(ckpt, model, max_num_seqs=16, max_num_batched_tokens=64)
    outs = generate(engine, PROMPTS, PARAMS)
    assert engine.stats.overlapped_steps > 0  # async scheduling did overlap steps
    assert engine.cache_usage().used_blocks == 0 and engine.cache_usage().used_slots == 0
    engine.close()
    return outs


def test_outputs_are_well_formed(alone):
    for i, (out, p) in enumerate(zip(alone, PARAMS)):
        assert out.finish_reason in ("stop", "length")
        assert 1 <= len(out.token_ids) <= p.max_tokens
        assert out.prompt_token_ids == PROMPTS[i] and out.prompt is None
        m = out.metrics
        assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finish_time
        if p.logprobs is None:
            assert out.logprobs is None
        else:
            assert len(out.logprobs) == len(out.token_ids)
            for tok, entry in zip(out.token_ids, out.logprobs):
                assert tok in entry and len(entry) <= p.logprobs + 1 and all(v <= 0 for v in entry.values())
                if p.temperature == 0:
                    assert entry[tok] == max(entry.values())
    # the sampled requests really sample: not all of them follow the greedy choice
    greedy_first = [max(o.logprobs[0].values()) == o.logprobs[0][o.token_ids[0]]
                    for o, p in zip(alone, PARAMS) if p.temperature > 0 and p.logprobs]
    assert len(greedy_first) == 4 and not all(greedy_first)


def _assert_same_outputs(outs, want):
    """Same tokens; logprobs to 1e-3 (a step's fp32 log-softmax may round differently)."""
    assert [_key(o) for o in outs] == [_key(o) for o in want]
    for b, a in zip(outs, want):
        if a.logprobs is not None:
            for eb, ea in zip(b.logprobs, a.logprobs):
                assert eb.keys() == ea.keys()
                assert all(abs(eb[k] - ea[k]) < 1e-3 for k in ea)


def test_batch_of_16_equals_each_alone(alone, batch16):
    _assert_same_outputs(batch16, alone)


def test_seeded_sampling_independent_of_batch_size_and_order(ckpt, model, alone, batch16):
    """Sizes 1 (alone), 16 (batch16) and 4, in shuffled and reversed orders."""
    want = {i: _key(o) for i, o in enumerate(alone)}
    engine = engine_for(ckpt, model, max_num_seqs=4, max_num_batched_tokens=48)
    order = list(range(16))
    random.Random(0).shuffle(order)
    for g in range(4):
        idx = order[4 * g : 4 * g + 4]
        outs = generate(engine, [PROMPTS[i] for i in idx], [PARAMS[i] for i in idx])
        assert {i: _key(o) for i, o in zip(idx, outs)} == {i: want[i] for i in idx}
    engine.close()
    engine = engine_for(ckpt, model, max_num_seqs=16, max_num_batched_tokens=1024)
    outs = generate(engine, PROMPTS[::-1], PARAMS[::-1])
    assert [_key(o) for o in outs[::-1]] == [want[i] for i in range(16)]
    engine.close()
    assert [_key(o) for o in batch16] == [want[i] for i in range(16)]


def test_async_scheduling_off_gives_the_same_outputs(ckpt, model, batch16):
    engine = engine_for(ckpt, model, max_num_seqs=16, max_num_batched_tokens=64, async_scheduling=False)
    outs = generate(engine, PROMPTS, PARAMS)
    assert engine.stats.overlapped_steps == 0
    assert [_key(o) for o in outs] == [_key(o) for o in batch16]
    engine.close()


def test_batched_decode_gives_the_same_outputs(ckpt, model, batch16):
    """decode="eager": pure decode steps take model.decode, padded to batch buckets with a
    reserved slot (what the CUDA graphs replay), and change no token or logprob."""
    engine = engine_for(ckpt, model, max_num_seqs=16, max_num_batched_tokens=64, decode="eager")
    outs = generate(engine, PROMPTS, PARAMS)
    assert engine.runner.decode_steps > 0
    _assert_same_outputs(outs, batch16)
    assert engine.cache_usage().used_slots == 1  # only the padding slot stays taken
    engine.close()


def test_batched_decode_v4_gives_the_same_outputs(tiny_checkpoint):
    """V4-Flash (window, CSA and HCA layers) through model.decode == through forward: prompts
    past the first ratio-128 block or crossing it while decoding, greedy and seeded."""
    path = tiny_checkpoint("v4")
    model = load_model(path, Numerics.float32().invariant(), progress=False)
    prompts = [_prompt(5, 60), _prompt(37, 61), _prompt(124, 62), _prompt(140, 63)]
    params = [SamplingParams(temperature=0, max_tokens=7, logprobs=2),
              SamplingParams(temperature=1.0, seed=7, max_tokens=7, logprobs=1)] * 2
    outs = {}
    for mode in ("eager", "forward"):
        engine = engine_for(path, model, max_num_seqs=4, max_num_batched_tokens=64, decode=mode)
        outs[mode] = generate(engine, prompts, params)
        assert (engine.runner.decode_steps > 0) == (mode == "eager")
        engine.close()
    _assert_same_outputs(outs["eager"], outs["forward"])


def test_batched_decode_needs_a_model_with_decode(tiny_checkpoint):
    ckpt = tiny_checkpoint("v41")
    # with its draft stages (load_model leaves them out): their rings follow forward only
    model = DeepseekV41ForCausalLM.from_pretrained(ckpt, Numerics.float32().invariant(), progress=False)
    assert model.with_draft
    with pytest.raises(ConfigError, match="decode"):
        engine_for(ckpt, model, decode="eager")
    with pytest.raises(ConfigError, match="decode"):
        EngineConfig(decode="fast")


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_preemption_under_a_small_budget_keeps_outputs(ckpt, model, alone, async_scheduling):
    idx = [8, 14, 7, 12, 6, 13]  # the longer prompts (13..60 tokens), greedy and sampled
    spec = model.state_spec()
    probe = CacheManager(spec, num_slots=1, num_blocks=1, block_size=round_block_size(spec, 8))
    max_model_len = 72  # 9 blocks: the least one sequence needs; the six need ~30 together
    budget = 6 * probe.bytes_per_slot + 12 * probe.bytes_per_block
    engine = engine_for(ckpt, model, max_num_seqs=6, max_num_batched_tokens=64, block_size=8,
                        max_model_len=max_model_len, state_memory_bytes=budget, async_scheduling=async_scheduling)
    assert engine.cache_usage().num_blocks == 12
    outs = generate(engine, [PROMPTS[i] for i in idx], [PARAMS[i] for i in idx])
    assert engine.stats.preemptions > 0
    assert sum(o.metrics.num_preemptions for o in outs) == engine.stats.preemptions
    assert [_key(o) for o in outs] == [_key(alone[i]) for i in idx]
    usage = engine.cache_usage()
    assert usage.used_blocks == 0 and usage.used_slots == 0 and usage.used_bytes == 0
    engine.close()


@pytest.mark.parametrize("arch", ["v41", "v4"])
def test_engine_equals_plain_loop_over_full_forwards(tiny_checkpoint, arch):
    """Greedy (and seeded) tokens from the engine == argmax (sample) of a fresh full forward
    over prompt + tokens so far, one forward per generated token. A 48-token budget chunks
    the 140-token prompt (past the 128-token window) and mixes it with the others' decodes."""
    path = tiny_checkpoint(arch)
    model = load_model(path, Numerics.float32().invariant(), progress=False)
    prompts = [_prompt(4, 50), _prompt(37, 51), _prompt(140, 52)]
    params = [SamplingParams(temperature=0, max_tokens=4), SamplingParams(temperature=0, max_tokens=4),
              SamplingParams(temperature=0.8, top_k=50, max_tokens=4, seed=7)]
    engine = LLMEngine(path, EngineConfig(max_num_batched_tokens=48, block_size=16, max_model_len=256,
                                          numerics="float32"), model=model)
    outs = generate(engine, prompts, params)
    engine.close()
    for prompt, p, out in zip(prompts, params, outs):
        ctx, want = list(prompt), []
        while len(want) < p.max_tokens:
            with torch.inference_mode():
                logits = model(ForwardBatch.build([(0, 0, ctx)]), model.new_state(1, 256)).logits
            tok = int(sample(logits, torch.tensor([float(p.temperature)]), torch.tensor([p.top_p]),
                             torch.tensor([p.top_k]), torch.tensor([seed_to_int64(p.seed or 0)]),
                             torch.tensor([len(ctx)])).tokens[0])
            if p.temperature == 0:
                assert tok == int(logits[0].argmax())
            want.append(tok)
            ctx.append(tok)
            if tok == 1:
                break
        assert out.token_ids == want


BAD_PARAMS = [
    (dict(max_tokens=0), "max_tokens"),
    (dict(temperature=-0.5), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(stop=42), "stop"),
    (dict(stop=["ok", 3]), "stop"),
]


def test_bad_inputs_raise_named_errors_and_disturb_nothing(ckpt, model, alone):
    engine = engine_for(ckpt, model, max_num_seqs=4, max_model_len=64)
    llm = LLM.from_engine(engine)
    engine.add_request("good-3", PROMPTS[3], PARAMS[3])
    engine.add_request("good-6", PROMPTS[6], PARAMS[6])
    engine.step()
    engine.step()
    waiting, running = list(engine.scheduler.waiting), list(engine.scheduler.running)
    usage = engine.cache_usage()

    def check(exc_info, param):
        assert isinstance(exc_info.value, ValueError)
        assert exc_info.value.param == param and param in str(exc_info.value)
        assert engine.scheduler.waiting == waiting and engine.scheduler.running == running
        assert engine.cache_usage() == usage

    for prompt in ["", [], [5] * 64, [5, 129280], [5, -1], 3.5]:
        with pytest.raises(ValueError) as e:
            engine.add_request("bad", prompt, SamplingParams(max_tokens=2))
        check(e, "prompt")
        with pytest.raises(ValueError) as e:  # one bad prompt in a list: nothing is queued
            llm.generate([PROMPTS[0], prompt], SamplingParams(max_tokens=2), use_tqdm=False)
        check(e, "prompt")
    for kwargs, param in BAD_PARAMS:
        with pytest.raises(SamplingParamsError) as e:
            SamplingParams(**kwargs)
        assert e.value.param == param
        p = SamplingParams(max_tokens=2)
        for k, v in kwargs.items():  # changed after construction: the engine checks again
            setattr(p, k, v)
        with pytest.raises(SamplingParamsError) as e:
            engine.add_request("bad", PROMPTS[0], p)
        check(e, param)
        with pytest.raises(SamplingParamsError) as e:
            llm.generate([PROMPTS[0], PROMPTS[1]], [SamplingParams(max_tokens=2), p], use_tqdm=False)
        check(e, param)
    with pytest.raises(ValueError) as e:
        engine.add_request("good-3", PROMPTS[0], SamplingParams(max_tokens=2))
    check(e, "request_id")

    outs = {}
    while engine.has_unfinished_requests():
        outs.update({o.request_id: o for o in engine.step()})
    assert set(outs) == {"good-3", "good-6"}
    assert _key(outs["good-3"]) == _key(alone[3]) and _key(outs["good-6"]) == _key(alone[6])
    engine.close()


def test_stop_strings_cut_the_text(ckpt, model, alone):
    engine = engine_for(ckpt, model)
    ref = alone[10]  # greedy, 4 tokens
    tok = engine.tokenizer
    head = tok.decode(ref.token_ids[:1], skip_special_tokens=True)
    stop = tok.decode(ref.token_ids[:2], skip_special_tokens=True)[len(head):].strip()[:3]
    assert stop and stop not in head
    p = SamplingParams(temperature=0, max_tokens=len(ref.token_ids), stop=[stop, "\x00never"])
    out = generate(engine, [PROMPTS[10]], p)[0]
    assert out.finish_reason == "stop" and out.token_ids == ref.token_ids[:2]
    assert out.text == ref.text[: ref.text.find(stop)] and stop not in out.text
    out = generate(engine, [PROMPTS[10]], SamplingParams(temperature=0, max_tokens=8,
                                                          stop_token_ids=[ref.token_ids[1]]))[0]
    assert out.finish_reason == "stop" and out.token_ids == ref.token_ids[:2]
    engine.close()


def test_text_prompts_and_chat(ckpt, model):
    engine = engine_for(ckpt, model)
    llm = LLM.from_engine(engine)
    out = llm.generate("Hello", SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)[0]
    assert out.prompt == "Hello" and out.prompt_token_ids == [0, *engine.tokenizer.encode("Hello")]
    assert out.text == engine.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    conv = [{"role": "user", "content": "What is 2+2?"}]
    outs = {}
    for thinking in (False, True):
        o = llm.chat([conv], SamplingParams(temperature=0, max_tokens=1), thinking=thinking, use_tqdm=False)[0]
        assert o.prompt_token_ids == encode_chat(conv, engine.tokenizer, "v41", thinking=thinking)
        assert o.prompt == render_chat(conv, "v41", thinking=thinking)
        outs[thinking] = o
    assert outs[False].prompt_token_ids != outs[True].prompt_token_ids
    engine.close()


def test_bounded_replay_mask_equals_compact_in_the_engine(ckpt, model):
    """Prompts longer than replay_keep, chunked under a small token budget and batched:
    mask and compact give identical tokens; off (the default) is the exact engine."""
    prompts = [_prompt(200, 90), _prompt(170, 91), _prompt(20, 92)]
    params = SamplingParams(temperature=0, max_tokens=4)
    outs = {}
    for mode in ("off", "mask", "compact"):
        engine = engine_for(ckpt, model, max_num_seqs=3, max_num_batched_tokens=96, replay=mode)
        outs[mode] = [_key(o) for o in generate(engine, prompts, params)]
        assert engine.cache_usage().used_blocks == 0
        engine.close()
    assert outs["mask"] == outs["compact"]
    exact = engine_for(ckpt, model, max_num_seqs=1)
    assert outs["off"] == [_key(generate(exact, [p], params)[0]) for p in prompts]
    exact.close()


def test_bounded_replay_settings_are_checked(ckpt, model, tiny_checkpoint):
    from deepinfer_adapters.errors import ConfigError

    with pytest.raises(ConfigError, match="replay_keep"):
        engine_for(ckpt, model, replay="compact", replay_keep=100)
    with pytest.raises(ConfigError, match="replay"):
        EngineConfig(replay="sometimes")
    v4 = tiny_checkpoint("v4")
    with pytest.raises(ConfigError, match="needs a V4.1 model"):
        LLMEngine(v4, EngineConfig(replay="mask", numerics="float32", max_model_len=256))


def test_weights_fp4_keeps_experts_packed_and_generates_the_fp8_tokens(ckpt):
    """EngineConfig(weights="fp4") (--weights fp4): the engine loads the routed experts packed
    (half their bytes) and, with the same arithmetic (the reference ops on the CPU), generates
    the weights="fp8" engine's tokens and logprobs; an unknown storage is a named ConfigError."""
    prompts, params = PROMPTS[:4], PARAMS[:4]
    outs = {}
    for weights in ("fp8", "fp4"):
        engine = LLMEngine(ckpt, EngineConfig(weights=weights, numerics="float32", max_model_len=256, block_size=16,
                                              max_num_seqs=4))
        experts = [m.routed for m in engine.runner.model.modules() if getattr(m, "routed", None) is not None]
        assert experts and all(e.packed_fp4 == (weights == "fp4") for e in experts)
        outs[weights] = generate(engine, prompts, params)
        engine.close()
    _assert_same_outputs(outs["fp4"], outs["fp8"])
    with pytest.raises(ConfigError, match="weights"):
        EngineConfig(weights="int4")
