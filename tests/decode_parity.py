"""Shared harness of the decode-vs-forward tests (tests/test_decode_v41.py, test_decode_v4.py):
prefill some prompts, then run the same one-token steps through ``forward`` on one state and
``model.decode`` on a copy of it."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence

import torch

from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.standalone.cache_manager import PagedStateCache


def prompts(lengths: Sequence[int], seed: int = 5) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 128000, (n,), generator=g).tolist() for n in lengths]


def paged_state(model, num_slots: int, block: int, max_len: int) -> PagedStateCache:
    """Paged state whose slots own scrambled blocks (every slot max_len tokens' worth)."""
    per_slot = max_len // block
    state = PagedStateCache(model.state_spec(), num_slots=num_slots, num_blocks=num_slots * per_slot,
                            block_size=block, max_blocks_per_slot=per_slot)
    blocks = torch.randperm(num_slots * per_slot, generator=torch.Generator().manual_seed(0)).tolist()
    state.bind({s: blocks[s * per_slot : (s + 1) * per_slot] for s in range(num_slots)})
    return state


def decode_vs_forward(model, state, slots: Sequence[int], lengths: Sequence[int], steps: int,
                      max_len: int) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """Yields (step, forward logits, decode logits); afterwards asserts that both paths left
    every state tensor bit-identical. Both get the tokens forward picks (greedy)."""
    ps = prompts(lengths)
    model(ForwardBatch.build([(s, 0, p) for s, p in zip(slots, ps)]), state)
    other = copy.deepcopy(state)
    tokens = [p[-1] for p in ps]  # any tokens will do: both paths get the same ones
    positions = [len(p) for p in ps]
    for step in range(steps):
        fwd = model(ForwardBatch.build([(s, p, [t]) for s, p, t in zip(slots, positions, tokens)]), state).logits
        dec = model.decode(DecodeBatch.build(tokens, positions, slots, max_len=max_len), other)
        yield step, fwd, dec
        tokens = fwd.argmax(-1).tolist()
        positions = [p + 1 for p in positions]
    for key, t in state._tensors.items():
        assert torch.equal(t, other._tensors[key]), f"state {key} differs after decode"


def assert_decode_equals_forward(model, state, slots, lengths, steps, max_len) -> None:
    for step, fwd, dec in decode_vs_forward(model, state, slots, lengths, steps, max_len):
        assert dec.dtype == torch.float32 and dec.shape == fwd.shape
        assert torch.equal(dec, fwd), f"step {step}: max diff {(dec - fwd).abs().max().item()}"
