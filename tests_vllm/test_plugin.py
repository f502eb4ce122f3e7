"""register(), the registry override, and clear errors for bad checkpoints."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from safetensors.torch import load_file, save_file

from tests_vllm.helpers import REPO, run_module


def test_import_does_not_import_vllm():
    code = ("import sys, deepinfer_adapters, deepinfer_adapters.vllm_plugin; "
            "assert 'vllm' not in sys.modules, sorted(m for m in sys.modules if m.startswith('vllm'))")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_register_idempotent_and_resolves_our_classes(tmp_path):
    code = """
import logging, sys
logging.basicConfig(level=logging.INFO)  # vLLM configures its handlers only when an engine starts
from vllm.plugins import load_general_plugins
load_general_plugins()
import deepinfer_adapters.vllm_plugin as p
p.register(); p.register()
from vllm import ModelRegistry
from vllm.model_executor.models.config import MODELS_CONFIG_MAP
from vllm.model_executor.models.interfaces_base import is_text_generation_model
for arch in ("DeepseekV41ForCausalLM", "DeepseekV4ForCausalLM"):
    cls = ModelRegistry._try_load_model_cls(arch)
    assert cls.__module__ == "deepinfer_adapters.vllm_plugin.model", cls
    assert is_text_generation_model(cls), cls
    assert MODELS_CONFIG_MAP[arch].__name__ == "DeepinferConfigHook"
print("ok")
"""
    log = tmp_path / "pids"
    res = run_module("tests_vllm.run_code", [code], DEEPINFER_VLLM_REGISTER_LOG=str(log))
    assert res.returncode == 0, res.stderr[-4000:]
    assert "ok" in res.stdout
    assert "registered DeepseekV41ForCausalLM" in res.stdout + res.stderr  # the one INFO line
    assert len(log.read_text().splitlines()) >= 3  # entry point + two explicit calls, registered once


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_clear_errors_for_bad_checkpoints(tiny, tmp_path):
    # 1. a required tensor is missing
    missing = _copy(tiny["v41"], tmp_path / "missing")
    index = json.loads((missing / "model.safetensors.index.json").read_text())
    victim = sorted(n for n in index["weight_map"] if n.startswith("layers.3.attn."))[0]
    shard = missing / index["weight_map"].pop(victim)
    tensors = load_file(shard)
    del tensors[victim]
    save_file(tensors, shard)
    (missing / "model.safetensors.index.json").write_text(json.dumps(index))
    # 2. config.json names V4.1 but the checkpoint is a V4 one
    wrong = _copy(tiny["v4"], tmp_path / "wrong_arch")
    cfg = json.loads((wrong / "config.json").read_text())
    cfg["architectures"] = ["DeepseekV41ForCausalLM"]
    (wrong / "config.json").write_text(json.dumps(cfg))
    # 3. not a DeepSeek V4 config at all, under our architecture name
    other = tmp_path / "not_v4"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 100, "intermediate_size": 64}))
    res = run_module("tests_vllm.check_errors", [str(missing), str(wrong), str(other)], timeout=300)
    lines = [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    assert len(lines) == 3, res.stdout[-3000:] + res.stderr[-3000:]
    by = {l["model"]: l for l in lines}
    print(json.dumps(lines, indent=1))
    assert f"checkpoint is missing tensor {victim!r}" in by[str(missing)]["error"]
    assert "architectures" in by[str(wrong)]["error"] and "DeepseekV4ForCausalLM" in by[str(wrong)]["error"]
    assert "field 'model_type' must be one of" in by[str(other)]["error"]
