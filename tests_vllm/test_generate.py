"""vllm.LLM with our plugin == our own greedy decoding, token for token."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests_vllm.helpers import MAX_TOKENS, greedy_loop, prompts, run_vllm, standalone


def _pids(path) -> dict[int, str]:
    out = {}
    for line in path.read_text().splitlines():
        pid, name = line.split(" ", 1)
        out[int(pid)] = name
    return out


def test_v41_float32_matches_standalone_and_greedy_loop(tiny, tmp_path):
    """V4.1 under vLLM's normal process layout (LLM process -> EngineCore -> worker)."""
    pid_log = tmp_path / "register.log"
    t0 = time.time()
    got = run_vllm(tiny["v41"], "float32", tmp_path / "out.json", DEEPINFER_VLLM_REGISTER_LOG=str(pid_log))
    t1 = time.time()
    want = standalone(tiny["v41"], "float32", prompts(), MAX_TOKENS)
    loop = greedy_loop(tiny["v41"], "float32", prompts()[:3], MAX_TOKENS)  # the 150-token one costs ~50 s
    print(f"v41/float32: vLLM process {t1 - t0:.1f}s (LLM() {got['init_s']:.1f}s, generate {got['generate_s']:.1f}s)"
          f", references {time.time() - t1:.1f}s")
    assert got["model_cls"] == "deepinfer_adapters.vllm_plugin.model:DeepseekV41ForCausalLM"
    assert got["tokens"] == want
    assert got["tokens"][:3] == loop  # float32: incremental decoding equals full recomputation
    # register() ran in the LLM process, the engine core and the worker: each call logged its pid
    pids = _pids(pid_log)
    assert got["pid"] in pids, pids
    names = set(pids.values())
    assert "EngineCore" in names and any(n.startswith("VllmWorker") for n in names), pids
    assert "deepinfer_adapters: registered DeepseekV41ForCausalLM" in got["log"]  # the INFO line


def test_v4_float32_matches_standalone(tiny, tmp_path):
    """V4 in float32. (bf16 is not used here: our model's bf16 reference numerics are not batch
    invariant, so bf16 tokens depend on how vLLM happens to batch the prefills; see docs/vllm.md.)"""
    t0 = time.time()
    got = run_vllm(tiny["v4"], "float32", tmp_path / "out.json")
    t1 = time.time()
    want = standalone(tiny["v4"], "float32", prompts(), MAX_TOKENS)
    print(f"v4/float32: vLLM process {t1 - t0:.1f}s (LLM() {got['init_s']:.1f}s, generate {got['generate_s']:.1f}s)"
          f", standalone {time.time() - t1:.1f}s")
    assert got["model_cls"] == "deepinfer_adapters.vllm_plugin.model:DeepseekV4ForCausalLM"
    assert got["tokens"] == want


def test_v41_dspark_speculative_decoding_is_lossless(tiny, tmp_path):
    """--speculative-config {"method": "dspark", "num_speculative_tokens": 5}: the config hook routes
    it to our proposer, which drafts 5 tokens every step, and greedy tokens stay exactly the
    standalone engine's. The random tiny drafter gets nothing accepted (every such verify step is
    rolled back by 5 positions); so that partial acceptance is exercised as well, the run routes
    "dspark" to a subclass (tests_vllm/oracle_proposer.py) that, on every other step of each
    request, drafts the true continuation with a wrong third token: 2 of 5 accepted, rolled back
    by 3. One engine covers both (it was two engine starts: CI time)."""
    want = standalone(tiny["v41"], "float32", prompts(), MAX_TOKENS)
    sequences = tmp_path / "sequences.json"
    sequences.write_text(json.dumps([p + w for p, w in zip(prompts(), want)]))
    got = run_vllm(tiny["v41"], "float32", tmp_path / "dspark.json", {"method": "dspark", "num_speculative_tokens": 5},
                   DSPARK_PROPOSER="tests_vllm.oracle_proposer.OracleProposer", ORACLE_SEQUENCES=str(sequences))
    m = got["spec_metrics"]
    print("dspark + oracle:", m, f"init {got['init_s']:.1f}s, generate {got['generate_s']:.1f}s")
    assert "speculative method dspark runs our DSpark drafter" in got["log"]
    drafts, per_pos = m["vllm:spec_decode_num_drafts"], m["vllm:spec_decode_num_accepted_tokens_per_pos"]
    assert drafts > 0
    assert m["vllm:spec_decode_num_draft_tokens"] == 5 * drafts
    # the oracle's steps accept 2 (1 where a single known token is left), never past its wrong token
    assert per_pos[1] >= len(want) and per_pos[2:] == [0, 0, 0]
    assert drafts - per_pos[0] >= len(want)  # our drafter's steps: nothing accepted, rolled back by 5
    assert m["vllm:spec_decode_num_accepted_tokens"] == sum(per_pos)
    assert got["tokens"] == want
