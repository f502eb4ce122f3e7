"""config.json parsing: the three release formats, round trips, layer roles, named errors.

Expected roles are the published layer tables of model_spec.md sections 2.4/2.5,
written out here by hand rather than derived from the parser's rules.
"""

from __future__ import annotations

import copy
import json
import math

import pytest

from deepinfer_adapters.config import ARCHES, AttnRole, Routing, load_config, parse_config
from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.model_impl.checkpoint_spec import expected_tensors
from deepinfer_adapters.presets import engram_table_rows, release_config, tiny_config

BYTES = {"BF16": 2, "F32": 4, "I8": 1, "I32": 4, "I64": 8, "F8_E4M3": 1, "F8_E8M0": 1}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("make", [release_config, tiny_config])
def test_round_trip(arch, make, tmp_path):
    raw = make(arch)
    cfg = parse_config(raw)
    assert cfg.arch == arch
    assert cfg.to_release_dict() == raw
    cfg.save(tmp_path / "config.json")
    assert json.loads((tmp_path / "config.json").read_text()) == raw
    assert load_config(tmp_path) == cfg


def _roles(cfg):
    out = {}
    for layer in cfg.main_layers:
        out.setdefault(layer.attn, []).append(layer.index)
    return out


def test_v4_flash_layer_roles():
    cfg = parse_config(release_config("v4"))
    roles = _roles(cfg)
    assert roles[AttnRole.WINDOW] == [0, 1]
    assert roles[AttnRole.CSA] == list(range(2, 43, 2))
    assert roles[AttnRole.HCA] == list(range(3, 42, 2))
    assert [l.index for l in cfg.main_layers if l.routing is Routing.HASH] == [0, 1, 2]
    assert cfg.draft.kind == "mtp" and cfg.draft.num_stages == 1
    (mtp,) = cfg.draft_layers
    assert (mtp.index, mtp.attn, mtp.routing, mtp.n_routed_experts) == (43, AttnRole.WINDOW, Routing.SCORE, 256)
    assert cfg.quant.fp8_block == (128, 128) and cfg.quant.expert_dtype == "fp4"
    assert cfg.pad_token_id == 1  # V4 pads with EOS


def test_v4_0731_dspark_stages():
    cfg = parse_config(release_config("v4-0731"))
    assert cfg.arch == "v4-0731"
    assert cfg.num_nextn_predict_layers == 1  # the release says 1 ...
    assert cfg.draft.kind == "dspark" and cfg.draft.num_stages == 3  # ... but ships 3 stages
    assert (cfg.draft.block_size, cfg.draft.noise_token_id, cfg.draft.target_layer_ids) == (5, 128799, (40, 41, 42))
    assert [l.index for l in cfg.draft_layers] == [43, 44, 45]
    assert all(l.attn is AttnRole.WINDOW and l.n_routed_experts == 256 for l in cfg.draft_layers)


def test_v41_flash_layer_roles():
    cfg = parse_config(release_config("v41"))
    roles = _roles(cfg)
    assert roles[AttnRole.WINDOW] == [0, 1]
    assert roles[AttnRole.KV_INDEX_SOURCE] == [2, 8, 14]
    assert roles[AttnRole.CANDIDATE_SOURCE] == [20]
    assert roles[AttnRole.REINDEX] == [24, 28, 32, 36]
    reuse = [*range(3, 8), *range(9, 14), *range(15, 20), *range(21, 24), *range(25, 28),
             *range(29, 32), *range(33, 36), *range(37, 40)]
    assert roles[AttnRole.REUSE] == reuse
    layer = {l.index: l for l in cfg.layers}
    assert (layer[7].kv_source, layer[7].index_source) == (2, 2)
    assert (layer[23].kv_source, layer[23].index_source, layer[23].uses_candidate_pool) == (20, 20, False)
    assert (layer[26].kv_source, layer[26].index_source, layer[26].uses_candidate_pool) == (20, 24, True)
    assert layer[24].uses_candidate_pool and not layer[20].uses_candidate_pool
    assert [l.index for l in cfg.layers if l.engram] == [1, 14]
    assert all(l.routing is Routing.SCORE for l in cfg.layers)
    assert cfg.rms_norm_eps == 1e-20 and cfg.pad_token_id == 2 and cfg.image_token_id == 129264
    assert cfg.quant.fp8_block == (32, 32) and cfg.quant.expert_dtype == "fp4" and cfg.quant.fmt is None
    d = cfg.draft
    assert (d.kind, d.num_stages, d.block_size, d.target_layer_ids, d.markov_rank) == ("dspark", 3, 5, (37, 38, 39), 256)
    assert [(l.index, l.n_routed_experts, l.num_experts_per_tok) for l in cfg.draft_layers] == [
        (40, 128, 3), (41, 128, 3), (42, 128, 3)]
    assert cfg.engram.n_hash_columns == 24 and cfg.engram.compressed_vocab_size == 99092


@pytest.mark.parametrize("arch", ARCHES)
def test_tiny_presets_have_every_role(arch):
    cfg = parse_config(tiny_config(arch))
    assert cfg.vocab_size == 129280 and cfg.sliding_window == 128
    present = {l.attn for l in cfg.main_layers}
    if arch == "v41":
        assert present == {AttnRole.WINDOW, AttnRole.KV_INDEX_SOURCE, AttnRole.CANDIDATE_SOURCE,
                           AttnRole.REINDEX, AttnRole.REUSE}
        assert {l.compress_ratio for l in cfg.main_layers if l.is_kv_source} == {1, 2}
        assert len([l for l in cfg.main_layers if l.engram]) == 2
        assert cfg.draft.num_stages == 3 and cfg.draft.kind == "dspark"
    else:
        assert present == {AttnRole.WINDOW, AttnRole.CSA, AttnRole.HCA}
        assert any(l.routing is Routing.HASH for l in cfg.layers)
        assert cfg.draft.kind == ("mtp" if arch == "v4" else "dspark")


def test_tiny_config_overrides():
    """Overrides change the named fields only (V4.1: in the text config), keep the preset's
    other widths, re-derive the Engram table rows, and must name existing, consistent fields."""
    base = parse_config(tiny_config("v41"))
    wide = parse_config(tiny_config("v41", num_attention_heads=64, head_dim=512))
    assert (wide.num_attention_heads, wide.head_dim) == (64, 512)
    assert (wide.hidden_size, wide.qk_rope_head_dim, wide.layers, wide.engram) == (
        base.hidden_size, base.qk_rope_head_dim, base.layers, base.engram)
    assert tiny_config("v41")["text_config"]["head_dim"] == 64  # the preset itself is untouched
    short = tiny_config("v41", num_hidden_layers=6, compress_ratios=[0, 2, 2, 1, 1, 1, 0, 0, 0],
                        kv_source_layer_ids=[1, 3], index_source_layer_ids=[1, 3, 4], candidate_source_layer_id=3,
                        engram_layer_ids=[4], dspark_target_layer_ids=[3, 4, 5])
    cfg = parse_config(short)
    assert [l.attn for l in cfg.main_layers] == [AttnRole.WINDOW, AttnRole.KV_INDEX_SOURCE, AttnRole.REUSE,
                                                 AttnRole.CANDIDATE_SOURCE, AttnRole.REINDEX, AttnRole.REUSE]
    assert cfg.engram.layer_ids == (4,) and cfg.engram.num_embeddings == (base.engram.num_embeddings[0],)
    assert cfg.to_release_dict() == short
    assert parse_config(tiny_config("v4", vocab_size=512)).vocab_size == 512  # V4: root fields
    with pytest.raises(ConfigError, match="head_dims") as err:
        tiny_config("v41", head_dims=512)
    assert err.value.field == "head_dims"
    with pytest.raises(ConfigError, match="compress_ratios"):  # 6 layers but the preset's 13 ratios
        tiny_config("v41", num_hidden_layers=6)


def test_engram_rows_follow_the_prime_rule():
    # The release's engram_num_embeddings, reproduced from its vocab size and 3 x 8 columns.
    assert engram_table_rows(2, 16_000_000, 24) == [384006168, 384016682]


def _size(specs):
    return sum(math.prod(s.shape) * BYTES[s.dtype] for s in specs.values())


def test_tensor_contract_matches_release_inventories():
    # V4-Flash-0731: 72,317 tensors, 166,878,536,440 payload bytes (header-verified inventory,
    # model_spec.md section 4 / [OT]); V4.1-Flash: 96,085 tensors, 510.3 GB.
    specs = expected_tensors(parse_config(release_config("v4-0731")))
    assert len(specs) == 72_317 and _size(specs) == 166_878_536_440
    specs = expected_tensors(parse_config(release_config("v41")))
    assert len(specs) == 96_085 and round(_size(specs) / 1e9, 1) == 510.3


def _mutate(arch, path, value):
    raw = release_config(arch)
    node = raw
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return raw


BAD_FIELDS = [
    ("v4", "hidden_size", KeyError, "hidden_size"),
    ("v4", "hidden_size", "4096", "hidden_size"),
    ("v4", "model_type", "llama", "model_type"),
    ("v4", "architectures", ["LlamaForCausalLM"], "architectures"),
    ("v4", "compress_ratios", [0, 0] + [4, 128] * 20 + [3, 0], "compress_ratios"),
    ("v4", "compress_ratios", [0, 0] + [4, 128] * 20 + [4], "compress_ratios"),
    ("v4", "num_hash_layers", 99, "num_hash_layers"),
    ("v4", "expert_dtype", "fp16", "expert_dtype"),
    ("v4", "quantization_config.weight_block_size", [128], "quantization_config.weight_block_size"),
    ("v4", "rope_scaling.type", "linear", "rope_scaling.type"),
    ("v4", "num_key_value_heads", 8, "num_key_value_heads"),
    ("v4", "o_groups", 7, "o_groups"),
    ("v4", "rms_norm_eps", -1.0, "rms_norm_eps"),
    ("v4", "norm_topk_prob", "yes", "norm_topk_prob"),
    ("v4-0731", "dspark_target_layer_ids", [40, 41, 43], "dspark_target_layer_ids"),
    ("v41", "text_config", KeyError, "text_config"),
    ("v41", "text_config.hidden_size", KeyError, "text_config.hidden_size"),
    ("v41", "text_config.candidate_source_layer_id", 24, "text_config.candidate_source_layer_id"),
    ("v41", "text_config.kv_source_layer_ids", [2, 8, 14, 20, 22], "text_config.kv_source_layer_ids"),
    ("v41", "text_config.index_source_layer_ids", [0, 2, 8, 14, 20], "text_config.index_source_layer_ids"),
    ("v41", "text_config.engram_num_embeddings", [384006168], "text_config.engram_num_embeddings"),
    ("v41", "text_config.compress_ratios", [0, 0] + [2] * 18 + [1] * 20 + [0, 0], "text_config.compress_ratios"),
    ("v41", "text_config.dspark_num_experts_per_tok", 200, "text_config.dspark_num_experts_per_tok"),
    ("v41", "quantization_config.expert_dtype", KeyError, "quantization_config.expert_dtype"),
    ("v41", "pad_token_id", -2, "pad_token_id"),
]


@pytest.mark.parametrize("arch,path,value,field", BAD_FIELDS)
def test_bad_field_names_itself(arch, path, value, field):
    with pytest.raises(ConfigError) as info:
        parse_config(_mutate(arch, path, value))
    assert info.value.field == field
    assert f"'{field}'" in str(info.value)


def test_v41_ratio_mismatch_between_source_and_reader():
    raw = release_config("v41")
    ratios = raw["text_config"]["compress_ratios"]
    ratios[5] = 1  # layer 5 reads KV source 2, which has ratio 2
    with pytest.raises(ConfigError, match="layer 5 has ratio 1 but reads KV source 2"):
        parse_config(raw)


def test_missing_or_invalid_file(tmp_path):
    with pytest.raises(ConfigError, match="config.json not found"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path)


def test_unknown_keys_survive_round_trip():
    raw = release_config("v41")
    raw["text_config"]["future_knob"] = 3
    raw["quantization_config"]  # untouched
    cfg = parse_config(copy.deepcopy(raw))
    assert cfg.to_release_dict() == raw
