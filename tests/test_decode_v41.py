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

import copy

import pytest
import torch

from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.standalone.cache_manager import PagedStateCache

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
    block = 32
    per_slot = MAX_LEN // block
    state = PagedStateCache(model.state_spec(), num_slots=4, num_blocks=4 * per_slot, block_size=block,
                            max_blocks_per_slot=per_slot)
    blocks = torch.randperm(4 * per_slot, generator=torch.Generator().manual_seed(0)).tolist()
    state.bind({s: blocks[s * per_slot : (s + 1) * per_slot] for s in range(4)})
    return state


def _prompts():
    g = torch.Generator().manual_seed(5)
    return [torch.randint(3, 128000, (n,), generator=g).tolist() for n in PROMPTS]


def _tensors(state):
    return state._tensors


def _run(model, state):
    """Prefill every prompt, then STEPS decode steps through forward (state) and decode (a copy)."""
    prompts = _prompts()
    model(ForwardBatch.build([(s, 0, p) for s, p in zip(SLOTS, prompts)]), state)
    other = copy.deepcopy(state)
    tokens = [p[-1] for p in prompts]  # any tokens will do: both paths get the same ones
    positions = [len(p) for p in prompts]
    for step in range(STEPS):
        fwd = model(ForwardBatch.build([(s, p, [t]) for s, p, t in zip(SLOTS, positions, tokens)]), state).logits
        dec = model.decode(DecodeBatch.build(tokens, positions, SLOTS, max_len=MAX_LEN), other)
        yield step, fwd, dec
        tokens = fwd.argmax(-1).tolist()
        positions = [p + 1 for p in positions]
    for key, t in _tensors(state).items():
        assert torch.equal(t, _tensors(other)[key]), f"state {key} differs after decode"


@pytest.mark.parametrize("numerics", [Numerics.reference().invariant(), Numerics.float32(quant=True).invariant()],
                         ids=["bf16", "float32"])
@pytest.mark.parametrize("layout", [_dense, _paged], ids=["dense", "paged"])
def test_decode_equals_forward_bit_for_bit(ckpt, numerics, layout):
    model = _model(ckpt, numerics)
    for step, fwd, dec in _run(model, layout(model)):
        assert dec.dtype == torch.float32 and dec.shape == fwd.shape
        assert torch.equal(dec, fwd), f"step {step}: max diff {(dec - fwd).abs().max().item()}"


def test_decode_sees_the_context(ckpt):
    """Negative control: the same token at the same position in another slot (other history)
    gives other logits, so the equality above is not vacuous."""
    model = _model(ckpt, Numerics.float32(quant=True).invariant())
    state = _dense(model)
    prompts = _prompts()
    model(ForwardBatch.build([(s, 0, p) for s, p in zip(SLOTS, prompts)]), state)
    pos = min(PROMPTS)
    out = model.decode(DecodeBatch.build([7, 7], [pos, pos], SLOTS[:2], max_len=MAX_LEN), state)
    assert (out[0] - out[1]).abs().max() > 1e-2


def test_decode_refuses_draft_stages(ckpt):
    model = DeepseekV41ForCausalLM.from_pretrained(ckpt, Numerics.float32(), progress=False)
    with pytest.raises(ValueError, match="with_draft=False"):
        model.decode(DecodeBatch.build([5], [3], [0]), model.new_state(1, 64))
