"""`deepinfer-adapters generate`: the default preset from a fresh HOME, flags, YAML config."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deepinfer_adapters.cli import main
from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.standalone.config import EngineConfig
from deepinfer_adapters.standalone.llm import resolve_model


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "deepinfer-adapters"
    if script.is_file():
        return [str(script)]
    found = shutil.which("deepinfer-adapters")
    return [found] if found else [sys.executable, "-m", "deepinfer_adapters.cli"]


def test_generate_hello_builds_the_default_preset_in_a_fresh_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    proc = subprocess.run([*_cli(), "generate", "Hello"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "[0] prompt: 'Hello'" in out and "output: '" in out and "finish_reason=" in out
    assert "RANDOM weights" in out  # the default model says so
    preset = home / ".cache" / "deepinfer-adapters" / "tiny-v41"
    assert (preset / "config.json").is_file() and (preset / ".deepinfer-preset").is_file()
    # built once: resolving it again reuses the files
    stamp = {p.name: p.stat().st_mtime_ns for p in preset.iterdir()}
    monkeypatch.setenv("HOME", str(home))
    path, name = resolve_model("tiny-v41")
    assert path == preset and name == "tiny-v41"
    assert {p.name: p.stat().st_mtime_ns for p in preset.iterdir()} == stamp


def test_generate_with_model_prompts_file_config_and_json(tiny_checkpoint, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Hello\n\nThe sky is\n")
    cfg = tmp_path / "engine.yaml"
    cfg.write_text("max_num_seqs: 2\nnumerics: reference\nmax_model_len: 128\n")
    rc = main(["generate", "--model", str(tiny_checkpoint("v41")), "--prompts-file", str(prompts),
               "--prompt", "One more", "--config", str(cfg), "--numerics", "float32", "--max-tokens", "2",
               "--temperature", "0", "--logprobs", "1", "--json", "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [d["prompt"] for d in lines] == ["One more", "Hello", "The sky is"]  # --prompt, then the file
    assert all(len(d["token_ids"]) == 2 and len(d["logprobs"]) == 2 for d in lines)
    assert "RANDOM" not in out  # a real directory: no preset notice


def test_generate_with_a_json_schema_file(tiny_checkpoint, tmp_path, capsys):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}},
                                  "required": ["ok"], "additionalProperties": False}))
    rc = main(["generate", "--model", str(tiny_checkpoint("v41")), "Hello", "--json-schema", f"@{schema}",
               "--numerics", "float32", "--max-tokens", "12", "--json", "--no-progress"])
    assert rc == 0
    (line,) = [json.loads(l) for l in capsys.readouterr().out.splitlines() if l.startswith("{")]
    assert json.loads(line["text"]) in ({"ok": True}, {"ok": False})


@pytest.mark.parametrize("argv,word", [
    (["generate", "Hello", "--temperature", "-1"], "temperature"),
    (["generate", "Hello", "--top-p", "0"], "top_p"),
    (["generate", "Hello", "--max-tokens", "0"], "max_tokens"),
    (["generate"], "prompt"),
    (["generate", "Hello", "--model", "no-such-model-dir"], "model"),
    (["generate", "Hello", "--regex", "a", "--grammar", 'root ::= "a"'], "structured"),
])
def test_generate_rejects_bad_input(argv, word, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # nothing may be built for these
    assert main(argv) == 2
    assert word in capsys.readouterr().err
    assert not (tmp_path / ".cache").exists()


def test_auto_weights_follow_device_and_batch_invariance():
    """weights: auto -> dense on the CPU; on CUDA fp8 (E4M3 experts) when batch-invariant, fp4 (packed experts:
    the fastest decode) when not; an explicit storage always wins. (No CUDA needed: only the names.)"""
    auto = {(device, inv): EngineConfig(device=device, batch_invariant=inv).resolved_weights()
            for device in ("cpu", "cuda", "cuda:1") for inv in (True, False)}
    assert auto == {("cpu", True): "dense", ("cpu", False): "dense", ("cuda", True): "fp8", ("cuda", False): "fp4",
                    ("cuda:1", True): "fp8", ("cuda:1", False): "fp4"}
    assert EngineConfig(device="cuda", batch_invariant=False, weights="fp8").resolved_weights() == "fp8"
    assert EngineConfig(device="cpu", weights="fp4").resolved_weights() == "fp4"


def test_engine_config_from_yaml_flags_win(tmp_path):
    cfg = tmp_path / "engine.yaml"
    cfg.write_text("max-num-seqs: 3\nnumerics: reference\nstate_memory_bytes: 64MiB\nasync_scheduling: false\n")
    c = EngineConfig.load(cfg, numerics="float32", max_num_batched_tokens=None)
    assert (c.max_num_seqs, c.numerics, c.state_memory_bytes, c.async_scheduling) == (3, "float32", 64 << 20, False)
    assert c.max_num_batched_tokens == EngineConfig().max_num_batched_tokens
    assert EngineConfig().async_scheduling is True  # on by default
    for text, field in [("max_num_seqs: 0\n", "max_num_seqs"), ("numerics: fp8\n", "numerics"),
                        ("state_memory_bytes: lots\n", "state_memory_bytes"), ("bogus: 1\n", "bogus")]:
        cfg.write_text(text)
        with pytest.raises(ConfigError) as e:
            EngineConfig.load(cfg)
        assert e.value.field == field and field in str(e.value)
