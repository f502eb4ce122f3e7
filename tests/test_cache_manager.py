"""Cache manager: paged rows + per-slot fixed state, sized from StateSpec and a budget."""

from __future__ import annotations

import random

import pytest
import torch

from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.state import DenseStateCache, StateField, StateSpec
from deepinfer_adapters.standalone.cache_manager import CacheManager, round_block_size
from deepinfer_adapters.standalone.runner import load_model


def _spec() -> StateSpec:
    spec = StateSpec()
    spec.add("a", StateField("kv", (3,), torch.float32, "rows", ratio=1),
             StateField("idx", (2,), torch.bfloat16, "rows", ratio=4),
             StateField("ring", (5, 3), torch.float32, "fixed"),
             StateField("score", (2,), torch.float32, "fixed", fill=float("-inf")))
    spec.add("b", StateField("hca", (4,), torch.float32, "rows", ratio=8))
    return spec


def test_paged_rows_read_back_like_dense_across_blocks():
    spec = _spec()
    rng = random.Random(0)
    mgr = CacheManager(spec, num_slots=3, num_blocks=40, block_size=8)
    dense = DenseStateCache(spec, num_slots=3, max_len=96)
    lengths = [0, 0, 0]
    slots = [mgr.allocate_slot() for _ in range(3)]
    for _ in range(30):  # interleaved growth, so a slot's blocks are not contiguous
        s = rng.randrange(3)
        n = rng.randint(1, 13)
        if lengths[s] + n > 96:
            continue
        assert mgr.grow(slots[s], lengths[s] + n)
        mgr.cache.bind({sl: mgr.table(sl) for sl in slots})
        for key, f in spec.fields():
            if f.kind != "rows":
                continue
            first, last = lengths[s] // f.ratio, (lengths[s] + n) // f.ratio
            rows = torch.randn(last - first, *f.shape).to(f.dtype)
            mgr.cache.write_rows(key, f.name, slots[s], first, rows)
            dense.write_rows(key, f.name, slots[s], first, rows)
        lengths[s] += n
    assert any(mgr.table(s) != sorted(mgr.table(s)) or len(mgr.table(s)) > 1 for s in slots)
    for s in slots:
        for key, f in spec.fields():
            if f.kind == "rows":
                end = lengths[s] // f.ratio
                for start in (0, 1, end // 2, max(end - 1, 0)):
                    got = mgr.cache.read_rows(key, f.name, s, start, end)
                    assert torch.equal(got, dense.read_rows(key, f.name, s, start, end)), (key, f.name, s, start)


def test_fields_of_one_address_space_share_their_row_addresses():
    """``model.decode`` computes a step's row addresses once per ``address_space``
    (``shared_row_address``): every field of a space must map (slot, row) alike."""
    spec = _spec()
    spec.add("c", StateField("kv", (2,), torch.bfloat16, "rows", ratio=4),
             StateField("idx", (5,), torch.float32, "rows", ratio=4))
    mgr = CacheManager(spec, num_slots=3, num_blocks=40, block_size=8, max_blocks_per_slot=6)
    slots = [mgr.allocate_slot() for _ in range(3)]
    for length, slot in zip((40, 13, 24), slots):
        assert mgr.grow(slot, length)
    mgr.cache.bind({slot: mgr.table(slot) for slot in slots})
    g = torch.Generator().manual_seed(0)
    slot_ids = torch.tensor([slots[2], slots[0], slots[1]])
    for cache in (DenseStateCache(spec, num_slots=3, max_len=96), mgr.cache):
        fields = [(key, f.name) for key, f in spec.fields() if f.kind == "rows"]
        spaces = {field: cache.address_space(*field) for field in fields}
        assert len(set(spaces.values())) == 3  # ratios 1, 4 (both keys) and 8
        for a in fields:
            rows = torch.randint(-1, cache.row_capacity(*a) + 2, (3, 7), generator=g)  # -1 and past the end too
            for b in fields:
                if spaces[a] == spaces[b]:
                    assert torch.equal(cache.row_address(*a, slot_ids, rows), cache.row_address(*b, slot_ids, rows))
                    # step_row_address: one slot_base per address space for every field of it
                    base = cache.slot_base(*b, slot_ids)
                    assert torch.equal(cache.row_address_at(*a, base, rows), cache.row_address(*a, slot_ids, rows))
                    # row_blocks (kernels that find rows themselves): the same addresses, one table a space
                    table, rows_a_block = cache.row_blocks(*b, slot_ids)
                    r = rows.clamp(0, cache.row_capacity(*a) - 1)
                    found = table.gather(1, r // rows_a_block) * rows_a_block + r % rows_a_block
                    assert torch.equal(found, cache.row_address(*a, slot_ids, rows)), (a, b)


def test_reading_past_the_allocated_blocks_is_an_error():
    mgr = CacheManager(_spec(), num_slots=1, num_blocks=4, block_size=8)
    slot = mgr.allocate_slot()
    assert mgr.grow(slot, 8)
    mgr.cache.bind({slot: mgr.table(slot)})
    mgr.cache.read_rows("a", "kv", slot, 0, 8)
    with pytest.raises(ValueError, match="allocated too few blocks"):
        mgr.cache.write_rows("a", "kv", slot, 8, torch.zeros(1, 3))


def test_fixed_fields_reset_to_their_fill():
    mgr = CacheManager(_spec(), num_slots=2, num_blocks=2, block_size=8)
    ring, score = mgr.cache.fixed("a", "ring"), mgr.cache.fixed("a", "score")
    assert ring.shape == (2, 5, 3) and score.shape == (2, 2)
    ring[1].fill_(7.0)
    score[1].fill_(3.0)
    mgr.cache.reset(1)
    assert (ring[1] == 0).all() and (score[1] == float("-inf")).all()


def test_block_accounting_grow_free_usage():
    spec = _spec()
    mgr = CacheManager(spec, num_slots=2, num_blocks=5, block_size=8)
    assert mgr.bytes_per_block == 8 * 3 * 4 + 2 * 2 * 2 + 1 * 4 * 4  # kv, idx, hca rows in 8 tokens
    assert mgr.bytes_per_slot == 5 * 3 * 4 + 2 * 4 == spec.bytes_per_seq()
    a, b = mgr.allocate_slot(), mgr.allocate_slot()
    assert mgr.allocate_slot() is None
    assert mgr.blocks_for(7) == 1 and mgr.blocks_for(8) == 1 and mgr.blocks_for(9) == 2
    assert mgr.grow(a, 24) and len(mgr.table(a)) == 3
    assert not mgr.grow(b, 24)  # needs 3, 2 left: nothing is taken
    assert len(mgr.table(b)) == 0 and mgr.num_free_blocks == 2
    u = mgr.usage()
    assert (u.used_blocks, u.used_slots) == (3, 2)
    assert u.used_bytes == 3 * mgr.bytes_per_block + 2 * mgr.bytes_per_slot
    mgr.free(a)
    mgr.free(b)
    u = mgr.usage()
    assert (u.used_blocks, u.used_slots, u.used_bytes) == (0, 0, 0)
    assert 0 < u.total_bytes and u.fraction == 0.0


def test_sizing_from_budget():
    spec = _spec()
    per_block = CacheManager(spec, num_slots=1, num_blocks=1, block_size=8).bytes_per_block
    per_slot = spec.bytes_per_seq()
    mgr = CacheManager.from_budget(spec, num_slots=4, max_model_len=64, block_size=8,
                                   budget_bytes=4 * per_slot + 20 * per_block + per_block - 1)
    assert mgr.usage().num_blocks == 20 and mgr.usage().num_slots == 4
    # a generous budget is capped at what num_slots sequences of max_model_len can use
    big = CacheManager.from_budget(spec, num_slots=4, max_model_len=64, block_size=8, budget_bytes=1 << 30)
    assert big.usage().num_blocks == 4 * 8
    # one sequence of max_model_len must fit alone, or the engine could never make progress
    with pytest.raises(ConfigError, match="state memory budget") as err:
        CacheManager.from_budget(spec, num_slots=4, max_model_len=64, block_size=8,
                                 budget_bytes=4 * per_slot + 7 * per_block)
    assert err.value.field == "state_memory_bytes"


def test_block_size_is_rounded_to_every_ratio():
    assert round_block_size(_spec(), 5) == 8
    assert round_block_size(_spec(), 16) == 16
    spec = StateSpec()
    spec.add("x", StateField("r", (1,), torch.float32, "rows", ratio=128))
    assert round_block_size(spec, 64) == 128


@pytest.mark.parametrize("arch,prompt_len,block_size", [("v41", 45, 8), ("v4", 300, 128)])
def test_real_model_logits_match_dense_state(tiny_checkpoint, arch, prompt_len, block_size):
    """The model reads and writes through PagedStateCache exactly as through the dense cache:
    the same chunked prefill + decode gives bit-identical logits."""
    model = load_model(tiny_checkpoint(arch), Numerics.float32().invariant(), progress=False)
    spec = model.state_spec()
    ids = torch.randint(3, 1000, (prompt_len + 2,), generator=torch.Generator().manual_seed(0)).tolist()
    chunks = [(0, prompt_len // 2), (prompt_len // 2, prompt_len), (prompt_len, prompt_len + 1),
              (prompt_len + 1, prompt_len + 2)]
    mgr = CacheManager(spec, num_slots=2, num_blocks=16, block_size=round_block_size(spec, block_size))
    filler, slot = mgr.allocate_slot(), mgr.allocate_slot()  # slot 1, interleaved with slot 0's blocks
    mgr.cache.reset(slot)
    dense = model.new_state(2, 512)
    for s, e in chunks:
        mgr.grow(filler, e)
        mgr.grow(slot, e)
        mgr.cache.bind({slot: mgr.table(slot)})
        paged_logits = model(ForwardBatch.build([(slot, s, ids[s:e])]), mgr.cache).logits
        dense_logits = model(ForwardBatch.build([(slot, s, ids[s:e])]), dense).logits
        assert torch.equal(paged_logits, dense_logits)
    assert len(mgr.table(slot)) >= 2  # crossed a block boundary
