"""V4-Flash ``model.decode`` (batched on the device, what a CUDA graph captures) against
``forward`` on the same one-token-per-sequence steps.

Both run the same arithmetic per sequence; in batch-invariant mode nothing depends on
how the sequences are grouped, so logits and every state tensor must agree bit for bit,
in bf16 (the reference's numerics) as in float32 with the round trips. The tiny V4 has
window-only layers, CSA (ratio 4: overlap compressor + index top-k) and HCA (ratio 128).
Prompts leave the ratio-4 blocks at every fill level, one is past the first ratio-128
block and one crosses the second during the decode steps; every sequence completes at
least two ratio-4 blocks. Sequences sit in scrambled slots, over dense and paged state
(blocks scrambled too), and ``max_len`` exceeds every context (the index scan covers
rows nobody may see yet).
"""

from __future__ import annotations

import pytest

from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v4 import DeepseekV4ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from tests.decode_parity import assert_decode_equals_forward, paged_state, prompts

MAX_LEN = 512
NUM_SLOTS = 5
SLOTS = [3, 0, 4, 1]
PROMPTS = [252, 37, 7, 130]  # mod 4: 0, 1, 3, 2; 252 + 8 crosses the ratio-128 block end at 255
STEPS = 8  # every sequence completes two ratio-4 blocks
BF16 = Numerics.reference().invariant()
F32_QUANT = Numerics.float32(quant=True).invariant()


def _model(ckpt, numerics):
    return DeepseekV4ForCausalLM.from_pretrained(ckpt, numerics, progress=False, with_draft=False)


@pytest.fixture(scope="module")
def models(tiny_checkpoint):
    cache = {}

    def get(arch, numerics):
        if (arch, numerics) not in cache:
            cache[(arch, numerics)] = _model(tiny_checkpoint(arch), numerics)
        return cache[(arch, numerics)]

    return get


def _dense(model):
    return model.new_state(NUM_SLOTS, MAX_LEN)


def _paged(model):
    return paged_state(model, NUM_SLOTS, 128, MAX_LEN)  # the ratio-128 rows need whole blocks of 128


def _check(model, state):
    assert_decode_equals_forward(model, state, SLOTS, PROMPTS, STEPS, MAX_LEN)


@pytest.mark.parametrize("numerics", [BF16, F32_QUANT], ids=["bf16", "float32"])
@pytest.mark.parametrize("layout", [_dense, _paged], ids=["dense", "paged"])
def test_decode_equals_forward_bit_for_bit(models, numerics, layout):
    model = models("v4", numerics)
    _check(model, layout(model))


def test_decode_equals_forward_0731(models):
    """V4-Flash-0731: the same class and backbone (its DSpark stages left out)."""
    model = models("v4-0731", F32_QUANT)
    _check(model, _dense(model))


def test_decode_sees_the_context(models):
    """Negative control: the same token at the same position in another slot (other history)
    gives other logits, so the equality above is not vacuous."""
    model = models("v4", F32_QUANT)
    state = _dense(model)
    ps = prompts(PROMPTS)[:2]
    model(ForwardBatch.build([(s, 0, p[:37]) for s, p in zip(SLOTS, ps)]), state)
    out = model.decode(DecodeBatch.build([7, 7], [37, 37], SLOTS[:2], max_len=MAX_LEN), state)
    assert (out[0] - out[1]).abs().max() > 1e-2


def test_decode_refuses_draft_layers(tiny_checkpoint):
    model = DeepseekV4ForCausalLM.from_pretrained(tiny_checkpoint("v4"), Numerics.float32(), progress=False)
    assert model.with_draft and len(model.mtp) == 1
    with pytest.raises(ValueError, match="with_draft=False"):
        model.decode(DecodeBatch.build([5], [3], [0]), model.new_state(1, 64))
