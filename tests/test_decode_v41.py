"""V4.1 ``model.decode`` (batched on the device, what a CUDA graph captures) against
``forward`` on the same one-token-per-sequence steps.

Both run the same arithmetic per sequence; in batch-invariant mode nothing depends on
how the sequences are grouped, so logits and every state tensor must agree bit for bit,
in bf16 (the reference's numerics) as in float32. Sequences sit in scrambled slots, with
prompts that leave ratio-2 groups half full and long enough for the index top-k to
choose, over dense and paged state (blocks scrambled too), and ``max_len`` larger than
any context (the index scan covers rows nobody may see yet).
"""

from __future__ import annotations

import pytest

from deepinfer_adapters.model_impl import overlap
from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from tests.decode_parity import assert_decode_equals_forward, paged_state, prompts

MAX_LEN = 512
SLOTS = [2, 0, 3]
PROMPTS = [37, 150, 4]  # odd / even: ratio-2 groups open and closed at the first decode
STEPS = 5


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint("v41")


def _model(ckpt, numerics):
    return DeepseekV41ForCausalLM.from_pretrained(ckpt, numerics, progress=False, with_draft=False)


def _dense(model):
    return model.new_state(4, MAX_LEN)


def _paged(model):
    return paged_state(model, 4, 32, MAX_LEN)


@pytest.mark.parametrize("numerics", [Numerics.reference().invariant(), Numerics.float32(quant=True).invariant()],
                         ids=["bf16", "float32"])
@pytest.mark.parametrize("layout", [_dense, _paged], ids=["dense", "paged"])
def test_decode_equals_forward_bit_for_bit(ckpt, numerics, layout):
    model = _model(ckpt, numerics)
    assert_decode_equals_forward(model, layout(model), SLOTS, PROMPTS, STEPS, MAX_LEN)


def test_decode_sees_the_context(ckpt):
    """Negative control: the same token at the same position in another slot (other history)
    gives other logits, so the equality above is not vacuous."""
    model = _model(ckpt, Numerics.float32(quant=True).invariant())
    state = _dense(model)
    model(ForwardBatch.build([(s, 0, p) for s, p in zip(SLOTS, prompts(PROMPTS))]), state)
    pos = min(PROMPTS)
    out = model.decode(DecodeBatch.build([7, 7], [pos, pos], SLOTS[:2], max_len=MAX_LEN), state)
    assert (out[0] - out[1]).abs().max() > 1e-2


def test_decode_refuses_draft_stages(ckpt):
    model = DeepseekV41ForCausalLM.from_pretrained(ckpt, Numerics.float32(), progress=False)
    with pytest.raises(ValueError, match="with_draft=False"):
        model.decode(DecodeBatch.build([5], [3], [0]), model.new_state(1, 64))


@pytest.mark.parametrize("switches", [{}, {"PROJECT_BEFORE_MIXES": False, "KEYS_PARTS_ASIDE": False,
                                           "NORM_BEFORE_MIXES": False,
                                           "INDEX_QUERIES_ASIDE_FROM": overlap.MAX_TOKENS + 1,
                                           "PUBLISH_EARLY": False, "INDEX_WEIGHTS_EARLY": False,
                                           "ENGRAM_IDS_ASIDE": False},
                                      {"DECODE_PRELUDE": not overlap.DECODE_PRELUDE},
                                      {"KEYS_PARTS_JOINED": "before_scores"}, {"KEYS_PARTS_JOINED": "before_topk"}],
                         ids=["defaults", "all_off", "prelude_flipped", "parts_before_scores", "parts_before_topk"])
def test_launch_order_switches_keep_decode_equal_to_forward(ckpt, monkeypatch, switches):
    """overlap.py's launch-order switches move where kernels are issued, never what they compute: decode
    still equals forward bit for bit with their defaults (on) and with all of them off (other code paths:
    ``_publish_decode(aside_kv=False)``, ``decode`` without ``decode_early``'s work), and with the compressed
    layers' shared index tensors built ahead or not (``DECODE_PRELUDE``, flipped from its default)."""
    for name, value in switches.items():
        monkeypatch.setattr(overlap, name, value)
    model = _model(ckpt, Numerics.reference().invariant())
    assert_decode_equals_forward(model, _dense(model), SLOTS, PROMPTS, STEPS, MAX_LEN)


def test_decode_equals_forward_with_the_index_scores_masked_after(ckpt, monkeypatch):
    """``attention_v41.CAUSAL_INDEX_SCORES`` off: every index row scored, then the unseen ones masked before the
    top-k (the default passes the visible rows to the scores instead) -- decode still equals forward bit for bit,
    so both give the same selections."""
    from deepinfer_adapters.model_impl.layers import attention_v41

    monkeypatch.setattr(attention_v41, "CAUSAL_INDEX_SCORES", False)
    model = _model(ckpt, Numerics.reference().invariant())
    assert_decode_equals_forward(model, _dense(model), SLOTS, PROMPTS, STEPS, MAX_LEN)
