"""The transformers V4-Flash reference harness (deepinfer_adapters/model_impl/hf_v4.py) on a tiny checkpoint.

Checks that transformers' DeepseekV4ForCausalLM runs the tiny V4 preset as is,
that every one of its tensors is filled from the official-format checkpoint,
and that its logits are usable as a parity target.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers.models.deepseek_v4")

from deepinfer_adapters.config import load_config
from deepinfer_adapters.model_impl.hf_v4 import build_hf_model, hf_logits, name_mapping, use_lowest_index_tie_break
from deepinfer_adapters.model_impl.tiny_checkpoint import write_tiny_checkpoint
from deepinfer_adapters.model_impl.weights import load_checkpoint

VOCAB = 129280


@pytest.fixture(scope="module")
def tiny_v4(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("hf-tiny-v4")
    write_tiny_checkpoint(path, "v4", seed=0)
    model, report = build_hf_model(path, torch.float32, return_report=True)
    return path, model, report


def _prompt(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


def test_every_transformers_tensor_comes_from_the_checkpoint(tiny_v4):
    path, model, report = tiny_v4
    cfg = load_config(path)
    state = model.state_dict()
    # build_hf_model asserts no missing/unexpected keys; check the count and values too.
    assert report.filled == len(state)
    assert report.ignored and all(name.startswith("mtp.") for name in report.ignored)  # no MTP in transformers
    official = load_checkpoint(path, cfg, dequantize=torch.float32, progress=False)
    mapping = name_mapping(cfg)
    for src, dst in mapping.items():
        assert torch.equal(state[dst].to(official[src].dtype), official[src]), f"{src} -> {dst}"
    # Stacked experts: gate_up_proj[e] = [w1; w3], down_proj[e] = w2.
    for layer in cfg.main_layers:
        n = layer.index
        gate_up = state[f"model.layers.{n}.mlp.experts.gate_up_proj"]
        down = state[f"model.layers.{n}.mlp.experts.down_proj"]
        for e in (0, layer.n_routed_experts - 1):
            w1, w2, w3 = (official[f"layers.{n}.ffn.experts.{e}.{w}.weight"] for w in ("w1", "w2", "w3"))
            assert torch.equal(gate_up[e], torch.cat([w1, w3])) and torch.equal(down[e], w2)
    n_experts = sum(3 * layer.n_routed_experts for layer in cfg.main_layers)
    n_main = sum(1 for name in official if not name.startswith("mtp."))
    assert len(mapping) + n_experts == n_main  # every main-model tensor used exactly once
    # Hash layers carry tid2eid, score layers the selection bias.
    assert model.model.layers[0].mlp.gate.tid2eid.dtype == torch.long
    assert torch.equal(model.model.layers[0].mlp.gate.tid2eid, official["layers.0.ffn.gate.tid2eid"].long())
    assert torch.equal(model.model.layers[3].mlp.gate.e_score_correction_bias, official["layers.3.ffn.gate.bias"])


def test_logits_are_finite_with_real_spread(tiny_v4):
    _, model, _ = tiny_v4
    logits = hf_logits(model, _prompt(40, seed=0))
    assert logits.shape == (40, VOCAB) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all()
    assert logits.std().item() > 0.5


def test_long_prompt_crosses_window_and_ratio_128_blocks(tiny_v4):
    _, model, _ = tiny_v4
    ids = _prompt(300, seed=1)  # > 128 window, two complete ratio-128 blocks, 75 ratio-4 entries > top-k 16
    logits = hf_logits(model, ids)
    assert logits.shape == (300, VOCAB)
    assert torch.isfinite(logits).all() and logits.std().item() > 0.5


def test_lowest_index_tie_break_makes_prefixes_consistent(tiny_v4):
    # With transformers' own torch.topk, exact indexer ties (score 0) are broken
    # differently for different prompt lengths, so a prefix's logits can differ from
    # the full prompt's. With a fixed rule, row p depends only on tokens 0..p.
    path, _, _ = tiny_v4
    model = build_hf_model(path)  # a second instance: the fixture's model stays unhooked
    assert use_lowest_index_tie_break(model) == 2  # the two ratio-4 (CSA) layers
    ids = _prompt(300, seed=1)
    full = hf_logits(model, ids)
    for n in (67, 200, 257):
        torch.testing.assert_close(hf_logits(model, ids[:n]), full[:n], atol=1e-3, rtol=0)
