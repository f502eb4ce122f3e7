"""DeepSeek-V4.1-Flash on the tiny checkpoint: the fast paths agree with the slow path.

The slow path is one forward over the whole sequence from position 0. Chunked
prefill, decode steps and mixed batches must reproduce it. Tolerances:
- float32 activations without the quantization round trips: 1e-4 absolute on
  logits of std ~3; in batch-invariant mode (kernels/invariance.py) the GEMMs
  and reductions do not depend on how many rows a step holds, so the paths
  differ only by the fp32 order of the online softmax (observed ~2e-5).
- float32 with every round trip on: 1e-2. A last-bit fp32 difference upstream
  can move one value across an FP8/FP4 rounding boundary, a step of one code
  (observed: 22 of 19M logits moved by 1e-3..1.3e-3). A wrong path gives O(1).
- bfloat16 (the reference's numerics): a mixed batch equals each sequence alone
  *exactly* (batch invariance). Chunked vs full is not bit-exact in bf16, for the
  same reason it is not in DeepSeek's reference: the sparse-attention index row
  of a prefill holds min(n, 128) window slots, so the block-of-64 online softmax
  rounds probabilities to bf16 at different points for different chunkings, and
  the random tiny model amplifies last-bit differences (docs/notes/v41_model.md).
"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.config import parse_config
from deepinfer_adapters.errors import CheckpointError
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.layers.topk import topk_lowest_index_ties
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.presets import release_config

ATOL = 1e-2  # quantization on
ATOL_EXACT = 1e-4  # quantization off
MAX_LEN = 512


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint("v41")


@pytest.fixture(scope="module")
def model_q(ckpt):
    """float32 with every quantization round trip on, batch-invariant: chunking a prompt then
    changes no arithmetic but the attention blocking (see the module docstring)."""
    return DeepseekV41ForCausalLM.from_pretrained(ckpt, Numerics.float32(quant=True).invariant(), progress=False)


@pytest.fixture(scope="module")
def model_bf16(ckpt):
    """The reference's bf16 numerics in batch-invariant mode (as the engine runs them)."""
    return DeepseekV41ForCausalLM.from_pretrained(ckpt, Numerics.reference().invariant(), progress=False)


def _prompt(n: int, seed: int = 0) -> list[int]:
    return torch.randint(3, 128000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _full(model, ids: list[int]) -> torch.Tensor:
    return model(ForwardBatch.build([(0, 0, ids)], all_logits=True), model.new_state(1, MAX_LEN)).logits


def _chunked(model, ids: list[int], chunk: int) -> torch.Tensor:
    state, out = model.new_state(1, MAX_LEN), []
    for s in range(0, len(ids), chunk):
        out.append(model(ForwardBatch.build([(0, s, ids[s : s + chunk])], all_logits=True), state).logits)
    return torch.cat(out)


@pytest.fixture(scope="module")
def long_prompt_full(model_q):
    ids = _prompt(260)
    return ids, _full(model_q, ids)


def test_logits_are_well_conditioned(long_prompt_full):
    _, logits = long_prompt_full
    assert torch.isfinite(logits).all()
    assert 1.0 < float(logits.std()) < 10.0
    top2 = logits.topk(2, dim=-1).values
    assert bool((top2[:, 0] > top2[:, 1]).all())  # no tie for the argmax


@pytest.mark.parametrize("chunk", [1, 5, 129])  # 1: token by token; 5: uneven splits; 129: past the window
def test_chunked_prefill_equals_full(model_q, long_prompt_full, chunk):
    ids, full = long_prompt_full
    if chunk <= 2:
        ids, full = ids[:140], full[:140]  # small chunks: keep it short (still past the window)
    got = _chunked(model_q, ids, chunk)
    torch.testing.assert_close(got, full, atol=ATOL, rtol=0)


def test_chunked_prefill_without_quantization_is_tight(model_q):
    ids = _prompt(200, 8)
    saved, model_q.numerics = model_q.numerics, Numerics.float32(quant=False).invariant()
    try:
        full, got = _full(model_q, ids), _chunked(model_q, ids, 37)
    finally:
        model_q.numerics = saved
    torch.testing.assert_close(got, full, atol=ATOL_EXACT, rtol=0)


def test_prefill_plus_decode_equals_full(model_q, long_prompt_full):
    ids, full = long_prompt_full
    n, k = 200, 12
    state = model_q.new_state(1, MAX_LEN)
    out = [model_q(ForwardBatch.build([(0, 0, ids[:n])], all_logits=True), state).logits]
    for p in range(n, n + k):
        out.append(model_q(ForwardBatch.build([(0, p, ids[p : p + 1])]), state).logits)
    torch.testing.assert_close(torch.cat(out), full[: n + k], atol=ATOL, rtol=0)


def _mixed_step(model, ids_a, ids_b, ids_c):
    """Sequences B and C get earlier context first; then one step holds A's fresh prefill,
    B's continued chunk and C's single-token decode. Returns that step's logits per sequence
    and the same step run for each sequence alone."""
    def prepare():
        state = model.new_state(3, MAX_LEN)
        model(ForwardBatch.build([(1, 0, ids_b[:100])]), state)
        model(ForwardBatch.build([(2, 0, ids_c[:140])]), state)
        return state

    steps = [(0, 0, ids_a[:50]), (1, 100, ids_b[100:130]), (2, 140, ids_c[140:141])]
    state = prepare()
    batch = ForwardBatch.build(steps, all_logits=True)
    mixed = model(batch, state).logits
    together = [mixed[batch.rows(i)] for i in range(3)]
    alone = []
    for step in steps:
        state = prepare()
        alone.append(model(ForwardBatch.build([step], all_logits=True), state).logits)
    return together, alone


def test_mixed_batch_equals_alone_float32(model_q):
    together, alone = _mixed_step(model_q, _prompt(50, 1), _prompt(130, 2), _prompt(141, 3))
    for t, a in zip(together, alone):
        torch.testing.assert_close(t, a, atol=ATOL, rtol=0)


def test_mixed_batch_is_bit_exact_in_bf16(model_bf16):
    together, alone = _mixed_step(model_bf16, _prompt(50, 1), _prompt(130, 2), _prompt(141, 3))
    for t, a in zip(together, alone):
        assert torch.equal(t, a)


def test_index_topk_has_no_ties_on_random_prompts(model_q, long_prompt_full):
    """The tiny checkpoint is built so that, in float32, the k-th and (k+1)-th best index
    scores of a query always differ: selections do not depend on the tie rule."""
    ids, _ = long_prompt_full
    seen = []
    for block in model_q.layers:
        idx = block.attn.indexer
        if idx is None or not block.attn.runs_indexer:
            continue
        original = idx.select

        def spy(scores, visible, scratch, numerics, masked=False, original=original):
            seen.append((scores.float().clone(), visible.clone()))
            return original(scores, visible, scratch, numerics, masked=masked)

        idx.select = spy
    try:
        _full(model_q, ids)
    finally:
        for block in model_q.layers:
            if block.attn.indexer is not None:
                block.attn.indexer.__dict__.pop("select", None)
    assert len(seen) == 4  # index sources 2, 4, 6, 8
    k = model_q.cfg.index_topk
    checked = 0
    for scores, visible in seen:
        for row, vis in zip(scores, visible.tolist()):
            if vis > k:
                top = row[:vis].topk(k + 1).values
                assert top[k - 1] > top[k]
                checked += 1
    assert checked > 500


def test_draft_is_batch_invariant_and_uses_markov_head(model_q):
    ids_a, ids_b = _prompt(40, 5), _prompt(70, 6)
    state = model_q.new_state(2, MAX_LEN)
    out = model_q(ForwardBatch.build([(0, 0, ids_a), (1, 0, ids_b)]), state)
    first = out.logits.argmax(-1).tolist()
    both = model_q.draft(first, [39, 69], [0, 1], state)
    assert both.tokens.shape == (2, 5) and both.confidence.shape == (2, 5)
    # same drafts alone, from a state built alone
    state_b = model_q.new_state(2, MAX_LEN)
    model_q(ForwardBatch.build([(1, 0, ids_b)]), state_b)
    alone = model_q.draft(first[1:], [69], [1], state_b)
    torch.testing.assert_close(both.logits[1], alone.logits[0], atol=ATOL, rtol=0)
    assert torch.equal(both.tokens[1], alone.tokens[0])
    # greedy drafts follow the Markov-corrected logits, token by token
    assert torch.equal(both.tokens, both.logits.argmax(-1))
    # draft i's Markov bias comes from the token before it
    stage = model_q.mtp[-1]
    prev = torch.cat([torch.tensor(first)[:, None], both.tokens[:, :-1]], 1)
    bias = stage.markov_head.head(stage.markov_head.embed.weight[prev].float(), model_q.numerics)
    assert float(bias.abs().max()) > 0  # the head is live


def test_draft_block_is_non_causal(model_q):
    """Every draft query sees all block keys: changing the noise token changes draft 0."""
    ids = _prompt(30, 7)
    state = model_q.new_state(1, MAX_LEN)
    out = model_q(ForwardBatch.build([(0, 0, ids)]), state)
    first = out.logits.argmax(-1).tolist()
    a = model_q.draft(first, [29], [0], state).logits[0, 0]
    noise = model_q.cfg.draft.noise_token_id
    object.__setattr__(model_q.cfg.draft, "noise_token_id", noise + 1)
    try:
        b = model_q.draft(first, [29], [0], state).logits[0, 0]
    finally:
        object.__setattr__(model_q.cfg.draft, "noise_token_id", noise)
    assert (a - b).abs().max() > 1e-3


def test_tie_rule_prefers_lower_index():
    scores = torch.tensor([[1.0, 3.0, 3.0, -torch.inf, -torch.inf, 2.0]])
    idx, vals = topk_lowest_index_ties(scores, 4)
    assert idx.tolist() == [[0, 1, 2, 5]]
    idx, _ = topk_lowest_index_ties(torch.full((1, 6), -torch.inf), 3)
    assert idx.tolist() == [[0, 1, 2]]


def test_state_spec_matches_the_spec_formulas():
    """model_spec.md section 3 (V4.1, bf16 reference layout): 1,600 elements = 3,200 B per
    token; 43 window rings of 128 x 512; 3 ratio-2 compressors x 2 x [2, 512] fp32; Engram
    keeps the last 3 token ids."""
    with torch.device("meta"):
        model = DeepseekV41ForCausalLM(parse_config(release_config("v41")), Numerics.reference())
    spec = model.state_spec()
    assert spec.bytes_per_token() == 3200
    assert spec.bytes_per_token("layers.2") == 3 * 640 / 2 * 2 / 3  # one ratio-2 source: 640 elems / 2 tokens
    assert spec.bytes_per_token("layers.20") == 640 * 2
    assert spec.bytes_per_token("layers.21") == 0  # a reuse layer keeps no rows
    windows = 43 * 128 * 512 * 2
    compressors = 3 * 2 * 2 * 512 * 4
    assert spec.bytes_per_seq() == windows + compressors + 3 * 8
    assert spec.bytes_for(1000) == 1000 * 3200 + spec.bytes_per_seq()


def _copy_with(ckpt, tmp_path, name, edit):
    """A copy of the checkpoint with one tensor edited (None removes it)."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    out = tmp_path / "m"
    shutil.copytree(ckpt, out)
    shard = out / json.loads((out / "model.safetensors.index.json").read_text())["weight_map"][name]
    tensors = load_file(shard)
    changed = edit(tensors[name])
    if changed is None:
        tensors.pop(name)
    else:
        tensors[name] = changed
    save_file(tensors, shard)
    return out


def test_missing_tensor_is_named(ckpt, tmp_path):
    out = _copy_with(ckpt, tmp_path, "layers.4.engram.embed.scale", lambda t: None)
    with pytest.raises(CheckpointError, match=r"layers\.4\.engram\.embed\.scale"):
        DeepseekV41ForCausalLM.from_pretrained(out, progress=False)


def test_misshaped_tensor_is_named(ckpt, tmp_path):
    out = _copy_with(ckpt, tmp_path, "layers.6.attn.indexer.wk.weight", lambda t: t[:, :-1].clone())
    with pytest.raises(CheckpointError, match=r"layers\.6\.attn\.indexer\.wk\.weight.*wrong shape"):
        DeepseekV41ForCausalLM.from_pretrained(out, progress=False)


# ------------------------------------------------------------------ bounded replay ----

from deepinfer_adapters.model_impl.replay import Replay  # noqa: E402


def _replay_run(model, ids, mode, chunk=150, decode=4, keep=140):
    """Prefill ``ids`` in chunks under ``mode``, then greedy-decode a few tokens."""
    state, prefill = model.new_state(1, MAX_LEN), []
    rows_seen = []
    consumer = model.layers[model.cfg.candidate_source_layer_id + 1].ffn
    hook = consumer.register_forward_pre_hook(lambda mod, args: rows_seen.append(args[0].shape[0]))
    try:
        for s in range(0, len(ids), chunk):
            batch = ForwardBatch.build([(0, s, ids[s : s + chunk])])
            batch.prompt_len = [len(ids)]
            prefill.append(model(batch, state, Replay(mode, keep)).logits)
    finally:
        hook.remove()
    p, tok, decoded = len(ids), int(prefill[-1].argmax()), []
    for _ in range(decode):
        logits = model(ForwardBatch.build([(0, p, [tok])]), state).logits
        decoded.append(logits)
        tok, p = int(logits.argmax()), p + 1
    return torch.cat(prefill), torch.cat(decoded), sum(rows_seen)


@pytest.mark.parametrize("which", ["model_q", "model_bf16"])
def test_replay_mask_and_compact_agree_exactly(which, request):
    """Bit for bit, given batch-invariant numerics (compact runs the consumer layers on
    fewer rows than mask)."""
    model = request.getfixturevalue(which)
    ids = _prompt(400, 9)
    saved, model.numerics = model.numerics, model.numerics.invariant()
    try:
        mask = _replay_run(model, ids, "mask")
        compact = _replay_run(model, ids, "compact")
    finally:
        model.numerics = saved
    assert torch.equal(mask[0], compact[0]) and torch.equal(mask[1], compact[1])
    # compact runs the consumer layers on the kept rows only: the last 140 prompt
    # positions, plus the last row of each chunk that lies wholly before them
    assert mask[2] == 400 and compact[2] == 140 + 1


def test_replay_off_is_exact(model_q):
    ids = _prompt(300, 10)
    off = _replay_run(model_q, ids, "off")
    plain_state = model_q.new_state(1, MAX_LEN)
    plain = [model_q(ForwardBatch.build([(0, s, ids[s : s + 150])]), plain_state).logits for s in (0, 150)]
    assert torch.equal(off[0], torch.cat(plain))


def test_replay_keep_must_cover_the_window(model_q):
    batch = ForwardBatch.build([(0, 0, _prompt(10))])
    batch.prompt_len = [10]
    with pytest.raises(ValueError, match="replay keep .* must be >= sliding_window"):
        model_q(batch, model_q.new_state(1, MAX_LEN), Replay("mask", 100))
    with pytest.raises(ValueError, match="replay mode must be one of"):
        model_q(batch, model_q.new_state(1, MAX_LEN), Replay("sometimes", 140))


def test_tie_rules_agree_when_there_are_no_ties(model_q, long_prompt_full):
    """float32 index scores of the tiny checkpoint have no ties at the k-th pick (tested
    above), so the reference's torch.topk order and our rule select the same rows."""
    import dataclasses as dc

    ids = long_prompt_full[0][:150]
    ours = _full(model_q, ids)
    saved = model_q.numerics
    model_q.numerics = dc.replace(saved, topk_ties="torch")
    try:
        torch_ties = _full(model_q, ids)
    finally:
        model_q.numerics = saved
    assert torch.equal(torch_ties, ours)


REWIND = 5  # DSpark's block size: a verify step writes 1 + 5 positions


def _verify_then_restart(model, ids, prompt_len, drafts, accepted, rewind):
    """Prefill, one verify step [true token, *drafts], then restart after the accepted drafts (what a
    speculative decoder does). Returns the restart chunk's logits and a DSpark draft after it."""
    state = model.new_state(1, MAX_LEN, rewind=rewind)
    model(ForwardBatch.build([(0, 0, ids[:prompt_len])]), state)
    model(ForwardBatch.build([(0, prompt_len, [ids[prompt_len], *drafts])], all_logits=True), state)
    restart = prompt_len + 1 + accepted
    tail = ids[restart:]
    logits = model(ForwardBatch.build([(0, restart, tail)], all_logits=True), state).logits
    draft = model.draft([int(logits[-1].argmax())], [len(ids) - 1], [0], state)
    return logits, draft


@pytest.mark.parametrize("prompt_len,accepted", [(150, 0), (161, 1), (150, 3)])
def test_state_rewinds_over_rejected_drafts(model_q, prompt_len, accepted):
    """Rows a verify step wrote for rejected drafts never reach the restarted computation: with
    state sized for rewinds, restarting after garbage drafts equals restarting after true tokens,
    bit for bit (every row up to the restart point is the same computation in both; the window,
    compressor, Engram and DSpark rings keep the rejected rows out of every slot read later)."""
    ids = _prompt(prompt_len + 1 + REWIND + 6, 7)
    true_drafts = ids[prompt_len + 1 : prompt_len + 1 + REWIND]
    garbage = true_drafts[:accepted] + _prompt(REWIND - accepted, 8)
    got, got_draft = _verify_then_restart(model_q, ids, prompt_len, garbage, accepted, REWIND)
    want, want_draft = _verify_then_restart(model_q, ids, prompt_len, true_drafts, accepted, REWIND)
    assert torch.equal(got, want)
    assert torch.equal(got_draft.logits, want_draft.logits) and torch.equal(got_draft.tokens, want_draft.tokens)
    # and the restarted rows are the sequence's logits (up to chunking, see the module docstring)
    restart = prompt_len + 1 + accepted
    torch.testing.assert_close(got, _full(model_q, ids)[restart:], atol=ATOL, rtol=0)


def test_state_without_rewind_slots_is_corrupted_by_rejected_drafts(model_q):
    """The control for the test above: the same restart on state sized without rewind slots differs."""
    prompt_len, accepted = 150, 1
    ids = _prompt(prompt_len + 1 + REWIND + 6, 7)
    true_drafts = ids[prompt_len + 1 : prompt_len + 1 + REWIND]
    garbage = true_drafts[:accepted] + _prompt(REWIND - accepted, 8)
    got, _ = _verify_then_restart(model_q, ids, prompt_len, garbage, accepted, 0)
    want, _ = _verify_then_restart(model_q, ids, prompt_len, true_drafts, accepted, 0)
    assert not torch.equal(got, want)
