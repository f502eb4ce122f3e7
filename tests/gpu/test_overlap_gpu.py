"""Side-by-side streams (model_impl/overlap.py) change no value: prefill and graph-replayed
decode with the overlap on (the decode steps' side streams urgent) give the same bits and leave the same state as
with it off."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.model_impl import overlap
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v4 import DeepseekV4ForCausalLM
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.standalone.cuda_graphs import DecodeGraphs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")

MAX_LEN = 256
SLOTS = [1, 0, 2]


def _run(model):
    """Prefill 3 prompts, then 4 graph-replayed decode steps: (logits of each, state after)."""
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, 128000, (n,), generator=g).tolist() for n in (40, 9, 70)]
    state = model.new_state(4, MAX_LEN)  # slot 3: padding
    with torch.inference_mode():
        logits = [model(ForwardBatch.build([(s, 0, p) for s, p in zip(SLOTS, prompts)], device="cuda"),
                        state).logits.clone()]
        graphs = DecodeGraphs(model, state, pad_slot=3, max_batch=4, max_len=MAX_LEN, device="cuda")
        tokens, pos = [p[-1] for p in prompts], [len(p) for p in prompts]
        for _ in range(4):
            out = graphs.run(torch.tensor(tokens, device="cuda"), torch.tensor(pos, device="cuda"),
                             torch.tensor(SLOTS, device="cuda"), max(pos) + 1).clone()
            logits.append(out)
            tokens, pos = out.argmax(-1).tolist(), [p + 1 for p in pos]
    torch.cuda.synchronize()
    return logits, {k: t.clone() for k, t in state._tensors.items()}


@pytest.mark.parametrize("arch,flipped", [("v41", {}), ("v41", {"DECODE_PRELUDE": not overlap.DECODE_PRELUDE}),
                                          ("v41", {"REJOIN_JOINED": not overlap.REJOIN_JOINED}),
                                          ("v41", {"KEYS_PARTS_JOINED": "before_scores"}),
                                          ("v41", {"KEYS_PARTS_JOINED": "before_topk"}),
                                          ("v4", {}), ("v4", {"REJOIN_JOINED": not overlap.REJOIN_JOINED})],
                         ids=["v41", "v41-prelude", "v41-rejoin", "v41-parts_before_scores", "v41-parts_before_topk",
                              "v4", "v4-rejoin"])
def test_overlap_changes_no_bit(tiny_checkpoint, monkeypatch, arch, flipped):
    """With overlap.py's defaults and with the ``flipped`` switches: V4.1's compressed layers' shared index
    tensors built ahead from the step's start on a stream of their own or by their first reader
    (``DECODE_PRELUDE``); the parts' owners joining them again when they end, or only where something failed
    (``REJOIN_JOINED``: every part must still be joined, or the graph's capture fails); an index layer's keys parts
    joined before its index scores, before its top-k or after it (``KEYS_PARTS_JOINED``)."""
    for name, value in flipped.items():
        monkeypatch.setattr(overlap, name, value)
    cls = DeepseekV41ForCausalLM if arch == "v41" else DeepseekV4ForCausalLM
    # native weights: the routed experts in one kernel (the dense experts' loop syncs with the host)
    model = cls.from_pretrained(tiny_checkpoint(arch), Numerics.reference(), device="cuda", progress=False,
                                weights="fp8", with_draft=False)
    assert model.layers[0].ffn.shared_experts is not None  # the MoE overlap applies
    monkeypatch.setattr(overlap, "_STREAMS", {})
    monkeypatch.setattr(overlap, "ENABLED", False)
    off, state_off = _run(model)
    assert not overlap._STREAMS
    monkeypatch.setattr(overlap, "ENABLED", True)
    # the decode steps' side streams urgent (batch bucket 4; by default only one-token steps are), the prefill's not
    monkeypatch.setattr(overlap, "URGENT_SIDE_TOKENS", 4)
    on, state_on = _run(model)
    # each side part not yet joined holds the lowest free stream level. V4: the shared expert only (one level).
    # V4.1: a source's publishing and the indexer's head weights, the HC mixes, inside their main part attention's
    # keys, inside those the indexer's query side, the window ring and the compressed KV rows: 5 or more at once
    depths = {depth for _, depth, _ in overlap._STREAMS}
    assert depths == set(range(len(depths))) and (len(depths) >= 5 if arch == "v41" else depths == {0}), depths
    assert {priority for _, _, priority in overlap._STREAMS} == {0, overlap.URGENT_PRIORITY}
    assert not overlap._live  # every part joined
    same = [torch.equal(a, b) for a, b in zip(on, off)]
    print(f"REPORT overlap {arch} flipped={flipped}: prefill + {len(on) - 1} graph decode steps bit-identical {same}")
    assert all(same), [float((a - b).abs().max()) for a, b in zip(on, off)]
    for key, t in state_off.items():
        assert torch.equal(state_on[key], t), f"state {key}"
