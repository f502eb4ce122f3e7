"""transformers' V4-Flash filled from one of our models (``hf_model_from_ours``), as the
real-width peer benchmark builds it (benchmarks/bench_v4_width.py).

- From our native FP8 model, transformers gets exactly the tensors the checkpoint
  harness gives it (``build_hf_model``): the dequantization and the expert layout agree.
- The benchmark's logits check (transformers' own ``generate`` with its cache, logits
  of the prefill and of the first decode step, against our prefill and our decode of
  the same token) agrees in float32 as tightly as the full-forward parity tests.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers.models.deepseek_v4")

from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v4 import DeepseekV4ForCausalLM
from deepinfer_adapters.model_impl.hf_v4 import build_hf_model, hf_model_from_ours
from deepinfer_adapters.model_impl.numerics import Numerics

PROMPT, NEW, BATCH = 40, 3, 2
ATOL_F32 = 2e-4  # tests/test_model_v4.py: fp32 parity with transformers, ~2e-5 measured


@pytest.fixture(scope="module")
def setup(tiny_checkpoint):
    path = tiny_checkpoint("v4")
    ours = DeepseekV4ForCausalLM.from_pretrained(path, Numerics.float32(), weights="fp8", progress=False)
    raw = json.loads((path / "config.json").read_text())
    hf = hf_model_from_ours(ours, raw, torch.float32, index_tie_break="lowest_index")
    return path, ours, hf


def test_native_weights_reach_transformers_exactly(setup):
    path, _, hf = setup
    want = build_hf_model(path, torch.float32).state_dict()
    got = hf.state_dict()
    assert got.keys() == want.keys()
    differ = [k for k in want if not torch.equal(got[k], want[k])]
    assert not differ, differ[:5]


def test_generate_logits_match_ours_prefill_and_first_decode(setup):
    _, ours, hf = setup
    assert hf.config.use_cache  # the peer decodes with its own cache
    ids = torch.randint(3, 129280, (BATCH, PROMPT), generator=torch.Generator().manual_seed(0))
    hf.generation_config.eos_token_id = None  # exactly NEW tokens
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                      output_logits=True, return_dict_in_generate=True)
    assert out.sequences.shape == (BATCH, PROMPT + NEW)
    state = ours.new_state(BATCH, PROMPT + NEW + 8)
    prefill = ours(ForwardBatch.build([(s, 0, ids[s].tolist()) for s in range(BATCH)]), state).logits
    torch.testing.assert_close(prefill, out.logits[0].float(), rtol=0, atol=ATOL_F32)
    for step in (1, 2):  # decode the tokens transformers picked, at positions PROMPT, PROMPT + 1
        pos = PROMPT + step - 1
        fed = out.sequences[:, pos].tolist()
        logits = ours(ForwardBatch.build([(s, pos, [fed[s]]) for s in range(BATCH)]), state).logits
        torch.testing.assert_close(logits, out.logits[step].float(), rtol=0, atol=ATOL_F32)
    assert logits.std() > 0.5
