"""Official checkpoint format: write -> read bit-exact, dequantization, every corruption case."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from deepinfer_adapters.cli import main as cli_main
from deepinfer_adapters.config import ARCHES, load_config, parse_config
from deepinfer_adapters.errors import CheckpointError
from deepinfer_adapters.model_impl.checkpoint_spec import expected_tensors
from deepinfer_adapters.model_impl.safetensors_io import INDEX_FILE
from deepinfer_adapters.model_impl.tiny_checkpoint import random_tensors, write_tiny_checkpoint
from deepinfer_adapters.model_impl.weights import PROGRESS_DESC, load_checkpoint, validate_checkpoint
from deepinfer_adapters.presets import tiny_config


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8) if t.element_size() == 1 else t


@pytest.mark.parametrize("arch", ARCHES)
def test_write_then_read_is_bit_exact(arch, tiny_checkpoint):
    path = tiny_checkpoint(arch)
    cfg = load_config(path)
    assert cfg.arch == arch
    loaded = load_checkpoint(path, cfg, dequantize=None, progress=False)
    reference = random_tensors(cfg, seed=0)
    assert loaded.keys() == reference.keys() == expected_tensors(cfg).keys()
    for name, ref in reference.items():
        got = loaded[name]
        assert got.dtype == ref.dtype and got.shape == ref.shape, name
        assert torch.equal(_bits(got), _bits(ref)), name


def test_dtypes_are_the_release_formats(tiny_checkpoint):
    path = tiny_checkpoint("v41")
    raw = {}
    for f in sorted(path.glob("*.safetensors")):
        raw.update(load_file(f))
    assert raw["layers.2.attn.wq_a.weight"].dtype == torch.float8_e4m3fn
    assert raw["layers.2.attn.wq_a.scale"].dtype == torch.float8_e8m0fnu
    # V4.1 blocks are 32x32: q_lora_rank 96 x hidden 128 -> 3 x 4 scales
    assert tuple(raw["layers.2.attn.wq_a.scale"].shape) == (3, 4)
    # index wq_b: 16 heads x 32 = 512 out, q_lora_rank 96 in
    assert tuple(raw["layers.2.attn.indexer.wq_b.scale"].shape) == (16, 3)
    assert raw["layers.2.ffn.experts.0.w1.weight"].dtype == torch.int8
    assert tuple(raw["layers.2.ffn.experts.0.w1.weight"].shape) == (64, 64)  # [inter, hidden/2]
    assert tuple(raw["layers.2.ffn.experts.0.w1.scale"].shape) == (64, 4)  # hidden/32
    assert raw["layers.1.engram.embed.weight"].dtype == torch.float8_e4m3fn
    assert raw["layers.0.attn.attn_sink"].dtype == torch.float32
    assert raw["embed.weight"].dtype == torch.bfloat16
    assert "layers.6.attn.compressor.wgate.weight" not in raw  # ratio-1 source has no gate
    assert "layers.2.attn.compressor.wgate.weight" in raw
    v4 = {}
    for f in sorted(tiny_checkpoint("v4").glob("*.safetensors")):
        v4.update(load_file(f))
    assert v4["layers.0.ffn.gate.tid2eid"].dtype == torch.int64
    assert "layers.0.ffn.gate.bias" not in v4 and "layers.3.ffn.gate.bias" in v4
    tid2eid = v4["layers.0.ffn.gate.tid2eid"]
    assert all(len(set(row.tolist())) == row.numel() for row in tid2eid[:1000])  # distinct experts per token


def test_few_shard_variant_has_a_complete_index(tiny_checkpoint):
    path = tiny_checkpoint("v4", shards=3)
    index = json.loads((path / INDEX_FILE).read_text())
    shards = sorted(path.glob("model-*.safetensors"))
    assert [p.name for p in shards] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert set(index["weight_map"].values()) == {p.name for p in shards}
    assert index["weight_map"].keys() == expected_tensors(load_config(path)).keys()
    assert index["metadata"]["total_size"] == sum(
        t.numel() * t.element_size() for f in shards for t in load_file(f).values())


def test_fixture_overrides_write_their_own_checkpoint(tiny_checkpoint):
    """``tiny_checkpoint(arch, **overrides)``: a checkpoint of the overridden preset, cached
    under its overrides and apart from the plain one."""
    path = tiny_checkpoint("v4", vocab_size=512)
    assert tiny_checkpoint("v4", vocab_size=512) == path != tiny_checkpoint("v4")
    cfg = load_config(path)
    assert cfg == parse_config(tiny_config("v4", vocab_size=512)) and cfg.vocab_size == 512
    validate_checkpoint(path, cfg)
    assert tuple(load_checkpoint(path, cfg, dequantize=None, progress=False)["embed.weight"].shape) == (512, 128)


def test_seed_determines_the_weights(tmp_path):
    cfg = parse_config(tiny_config("v4"))
    a, b, c = random_tensors(cfg, seed=1), random_tensors(cfg, seed=1), random_tensors(cfg, seed=2)
    name = "layers.2.attn.wq_b.weight"
    assert torch.equal(_bits(a[name]), _bits(b[name]))
    assert not torch.equal(_bits(a[name]), _bits(c[name]))


def test_dequantized_load(tiny_checkpoint):
    path = tiny_checkpoint("v41")
    cfg = load_config(path)
    dense = load_checkpoint(path, cfg, dequantize=torch.float32, progress=False)
    assert not any(k.endswith(".scale") and not k.endswith("hc_attn_scale") and "hc_" not in k for k in dense)
    w = dense["layers.2.attn.wq_a.weight"]
    assert w.dtype == torch.float32 and w.shape == (96, 128)
    assert dense["layers.2.ffn.experts.3.w2.weight"].shape == (128, 64)
    assert dense["layers.1.engram.embed.weight"].shape[1] == 32
    for name, t in dense.items():
        if t.is_floating_point():
            assert torch.isfinite(t.float()).all(), name
    # FP8 weights keep their N(0, 1/fan_in) spread through quantization
    assert 0.5 < float(w.std() * 128**0.5) < 1.5


def test_random_weights_are_well_conditioned(tiny_checkpoint):
    """Embedding -> RMSNorm -> head gives logits with a real spread and no ties at the top."""
    path = tiny_checkpoint("v41")
    cfg = load_config(path)
    w = load_checkpoint(path, cfg, dequantize=torch.float32, progress=False)
    ids = torch.randint(0, cfg.vocab_size, (64,), generator=torch.Generator().manual_seed(0))
    h = w["embed.weight"][ids].float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps) * w["norm.weight"].float()
    logits = h @ w["head.weight"].float().T
    assert 1.5 < float(logits.std()) < 10
    top2 = logits.topk(2).values
    assert bool((top2[:, 0] > top2[:, 1]).all())


# ---------------------------------------------------------------- corruption cases ----


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory) -> Path:
    """A V4 checkpoint with a 512-token vocabulary: small enough to copy per test."""
    raw = tiny_config("v4")
    raw["vocab_size"] = 512
    out = tmp_path_factory.mktemp("small")
    write_tiny_checkpoint(out, "v4", config=raw, num_shards=3)
    return out


@pytest.fixture
def ckpt(small_checkpoint, tmp_path) -> Path:
    out = tmp_path / "ckpt"
    shutil.copytree(small_checkpoint, out)
    return out


def _edit_shard(path: Path, name: str, edit) -> Path:
    index = json.loads((path / INDEX_FILE).read_text())
    shard = path / index["weight_map"][name]
    tensors = load_file(shard)
    edit(tensors)
    save_file(tensors, shard)
    return shard


def _validate(path: Path):
    return validate_checkpoint(path, load_config(path))


def test_valid_small_checkpoint(ckpt):
    assert len(_validate(ckpt)) == len(expected_tensors(load_config(ckpt)))


def test_missing_tensor(ckpt):
    name = "layers.3.attn.compressor.ape"
    _edit_shard(ckpt, name, lambda t: t.pop(name))
    with pytest.raises(CheckpointError, match=r"layers\.3\.attn\.compressor\.ape") as info:
        _validate(ckpt)
    assert "missing" in str(info.value) or "does not contain" in str(info.value)
    assert info.value.tensor == name


def test_missing_tensor_without_index(tmp_path):
    raw = tiny_config("v4")
    raw["vocab_size"] = 512
    write_tiny_checkpoint(tmp_path, "v4", config=raw, num_shards=1)
    _edit_single = tmp_path / "model.safetensors"
    tensors = load_file(_edit_single)
    tensors.pop("layers.2.attn.indexer.wq_b.scale")
    save_file(tensors, _edit_single)
    with pytest.raises(CheckpointError, match=r"missing tensor 'layers\.2\.attn\.indexer\.wq_b\.scale': expected F8_E8M0"):
        _validate(tmp_path)


def test_unexpected_tensor(ckpt):
    _edit_shard(ckpt, "norm.weight", lambda t: t.update({"layers.0.attn.bogus": torch.zeros(3)}))
    with pytest.raises(CheckpointError, match=r"unexpected tensor 'layers\.0\.attn\.bogus'"):
        _validate(ckpt)


def test_wrong_shape(ckpt):
    name = "layers.2.attn.wq_b.weight"
    _edit_shard(ckpt, name, lambda t: t.update({name: t[name][:-1].clone()}))
    with pytest.raises(CheckpointError, match=r"'layers\.2\.attn\.wq_b\.weight'.*wrong shape: expected \[256, 128\], found \[255, 128\]"):
        _validate(ckpt)


def test_wrong_dtype(ckpt):
    name = "layers.2.attn.attn_sink"
    _edit_shard(ckpt, name, lambda t: t.update({name: t[name].to(torch.bfloat16)}))
    with pytest.raises(CheckpointError, match=r"attn_sink'.*wrong dtype: expected F32, found BF16"):
        _validate(ckpt)


def test_tid2eid_int32_is_accepted(ckpt):
    name = "layers.0.ffn.gate.tid2eid"
    _edit_shard(ckpt, name, lambda t: t.update({name: t[name].to(torch.int32)}))
    _validate(ckpt)
    _edit_shard(ckpt, name, lambda t: t.update({name: t[name].to(torch.int16)}))
    with pytest.raises(CheckpointError, match="expected I64 or I32, found I16"):
        _validate(ckpt)


def test_truncated_shard(ckpt):
    shard = sorted(ckpt.glob("model-*.safetensors"))[1]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="truncated") as info:
        _validate(ckpt)
    assert shard.name in str(info.value)


def test_corrupt_header(ckpt):
    shard = sorted(ckpt.glob("model-*.safetensors"))[0]
    data = bytearray(shard.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    data[8 : 8 + 16] = b"\xff" * 16
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt") as info:
        _validate(ckpt)
    assert shard.name in str(info.value)


def test_empty_shard(ckpt):
    shard = sorted(ckpt.glob("model-*.safetensors"))[2]
    shard.write_bytes(b"")
    with pytest.raises(CheckpointError, match=f"{shard.name} is truncated"):
        _validate(ckpt)


def test_index_names_a_missing_shard(ckpt):
    shard = sorted(ckpt.glob("model-*.safetensors"))[2]
    shard.unlink()
    with pytest.raises(CheckpointError, match=f"shard files that do not exist.*{shard.name}"):
        _validate(ckpt)


def test_corrupt_index(ckpt):
    (ckpt / INDEX_FILE).write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="index.json is corrupt"):
        _validate(ckpt)


def test_no_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint in"):
        validate_checkpoint(tmp_path, parse_config(tiny_config("v4")))


def test_load_validates_before_reading(ckpt):
    name = "layers.5.ffn.experts.7.w3.scale"
    _edit_shard(ckpt, name, lambda t: t.pop(name))
    with pytest.raises(CheckpointError, match="experts.7.w3.scale"):
        load_checkpoint(ckpt, load_config(ckpt), progress=False)


def test_progress_bar_over_shards(ckpt, capsys):
    load_checkpoint(ckpt, load_config(ckpt), progress=True)
    err = capsys.readouterr().err
    assert PROGRESS_DESC in err and "3/3" in err


# ------------------------------------------------------------------------ CLI ----


def test_cli_init_tiny_and_inspect(tmp_path, capsys):
    out = tmp_path / "m"
    assert cli_main(["init-tiny", "--arch", "v4-0731", "--out", str(out), "--seed", "3", "--shards", "2"]) == 0
    assert (out / INDEX_FILE).is_file() and (out / "tokenizer.json").is_file()
    assert load_config(out).arch == "v4-0731"
    assert cli_main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "checkpoint OK" in text and "hca" in text and "hash" in text


def test_cli_reports_errors_without_traceback(tmp_path, capsys):
    assert cli_main(["inspect", str(tmp_path)]) == 2
    assert "config.json not found" in capsys.readouterr().err
