"""Shared by the vLLM tests: prompts, the reference greedy outputs, subprocess runners.

Everything that starts vLLM runs in a child process (``python -m tests_vllm.run_vllm``
from the repo root): vLLM spawns its own engine and worker processes and wants a
``__main__`` guard, and one engine per process keeps the tests independent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
# mixed lengths: 1 token, short, longer than the 128-token window, and a ratio-128 boundary crosser
PROMPT_LENS = (1, 6, 37, 150)
MAX_TOKENS = 10


def prompts(seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [[0] + torch.randint(3, 120000, (n - 1,), generator=g).tolist() for n in PROMPT_LENS]


def vllm_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""))
    env.update(extra)
    return env


def run_module(module: str, args: list[str], timeout: float = 400, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=vllm_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def run_vllm(model_dir: Path, dtype: str, out: Path, speculative: dict | None = None, **env: str) -> dict:
    args = [str(model_dir), dtype, str(out)] + ([json.dumps(speculative)] if speculative else [])
    res = run_module("tests_vllm.run_vllm", args, **env)
    if res.returncode != 0:
        raise AssertionError(f"vLLM run failed (rc {res.returncode}):\n{res.stdout[-4000:]}\n{res.stderr[-8000:]}")
    got = json.loads(out.read_text())
    got["log"] = res.stdout + res.stderr
    return got


def greedy_loop(model_dir: Path, dtype: str, prompt_ids: list[list[int]], max_tokens: int) -> list[list[int]]:
    """The slowest possible reference: one full forward over the whole sequence per new token."""
    from deepinfer_adapters.model_impl.batch import ForwardBatch
    from deepinfer_adapters.model_impl.numerics import Numerics
    from deepinfer_adapters.standalone.runner import load_model

    numerics = Numerics.float32() if dtype == "float32" else Numerics.reference()
    model = load_model(model_dir, numerics, progress=False)
    outs = []
    with torch.inference_mode():
        for ids in prompt_ids:
            seq, new = list(ids), []
            for _ in range(max_tokens):
                state = model.new_state(1, len(seq) + 1)
                logits = model(ForwardBatch.build([(0, 0, seq)]), state).logits
                tok = int(logits[-1].argmax())
                seq.append(tok)
                new.append(tok)
            outs.append(new)
    return outs


def standalone(model_dir: Path, dtype: str, prompt_ids: list[list[int]], max_tokens: int) -> list[list[int]]:
    from deepinfer_adapters.decoding.sampling_params import SamplingParams
    from deepinfer_adapters.standalone.llm import LLM

    llm = LLM(str(model_dir), numerics="float32" if dtype == "float32" else "reference", progress=False,
              max_model_len=256)
    res = llm.generate(prompt_ids, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True),
                       use_tqdm=False)
    return [list(r.token_ids) for r in res]
