"""Structured output in the standalone engine (decoding/structured.py, xgrammar), on the tiny
V4.1 model with the real DeepSeek tokenizer. Its random weights would never follow a format
on their own, so a match is the grammar's doing: regex (greedy and sampled), compact JSON
schema, EBNF; free requests in the same batch are unchanged; bad grammars are named errors
that leave the engine serving."""

from __future__ import annotations

import json
import re

import pytest

from deepinfer_adapters.decoding.sampling_params import SamplingParams, SamplingParamsError
from deepinfer_adapters.decoding.structured import StructuredOutput, StructuredOutputError
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.standalone import LLM, EngineConfig, LLMEngine
from deepinfer_adapters.standalone.request import RequestError
from deepinfer_adapters.standalone.runner import load_model

REGEX = r"[0-9]{3}-[a-z]{2}"
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "enum": [1, 22, 333]},
                                           "s": {"type": "string", "enum": ["x", "yy"]}},
          "required": ["n", "s"], "additionalProperties": False}
EBNF = 'root ::= "yes" | "no" | "maybe " ("so" | "not")'


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint("v41")


@pytest.fixture(scope="module")
def engine(ckpt):
    model = load_model(ckpt, Numerics.float32().invariant(), progress=False)
    engine = LLMEngine(ckpt, EngineConfig(max_model_len=256, block_size=16, numerics="float32", max_num_seqs=8),
                       model=model)
    yield engine
    engine.close()


def _generate(engine, prompts, params):
    return LLM.from_engine(engine).generate(prompts, params, use_tqdm=False)


def test_outputs_follow_regex_json_schema_and_ebnf(engine):
    prompts = ["Hello", "Give me a code", "JSON please", "Answer", "Free text"]
    params = [
        SamplingParams(temperature=0, max_tokens=24, structured=StructuredOutput(regex=REGEX)),
        SamplingParams(temperature=1.0, seed=7, max_tokens=24, structured=StructuredOutput(regex=REGEX)),
        SamplingParams(temperature=0.8, seed=3, max_tokens=40, structured=StructuredOutput(json_schema=SCHEMA)),
        SamplingParams(temperature=1.0, seed=5, max_tokens=16, structured=StructuredOutput(grammar=EBNF)),
        SamplingParams(temperature=0, max_tokens=8),
    ]
    outs = _generate(engine, prompts, params)
    for out in outs[:2]:
        assert re.fullmatch(REGEX, out.text) and out.finish_reason == "stop", out.text
    value = json.loads(outs[2].text)
    assert set(value) == {"n", "s"} and value["n"] in (1, 22, 333) and value["s"] in ("x", "yy")
    assert re.fullmatch(r"yes|no|maybe (so|not)", outs[3].text), outs[3].text
    # the free request is what it is alone
    alone = _generate(engine, ["Free text"], [SamplingParams(temperature=0, max_tokens=8)])[0]
    assert outs[4].token_ids == alone.token_ids
    assert not re.fullmatch(REGEX, alone.text)  # the model does not produce the format by itself


def test_bad_grammars_are_named_and_the_engine_keeps_serving(engine):
    with pytest.raises(RequestError) as err:
        engine.add_request("bad-regex", "Hi", SamplingParams(structured=StructuredOutput(regex="[0-9")))
    assert err.value.param == "structured.regex"
    with pytest.raises(RequestError) as err:
        engine.add_request("bad-ebnf", "Hi", SamplingParams(structured=StructuredOutput(grammar="root ::= ")))
    assert err.value.param == "structured.grammar"
    with pytest.raises(RequestError, match="ignore_eos"):
        engine.add_request("eos", "Hi", SamplingParams(ignore_eos=True, structured=StructuredOutput(regex="a")))
    with pytest.raises(StructuredOutputError):
        StructuredOutput(regex="a", grammar='root ::= "a"')
    with pytest.raises(SamplingParamsError, match="structured"):
        SamplingParams(structured={"regex": "a"})
    out = _generate(engine, ["Hi"], [SamplingParams(temperature=0, max_tokens=12,
                                                    structured=StructuredOutput(regex="[ab]{2,4}"))])[0]
    assert re.fullmatch("[ab]{2,4}", out.text)
