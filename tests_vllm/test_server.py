"""The OpenAI server (python -m vllm.entrypoints.openai.api_server) serves our V4.1 model,
with structured outputs (vLLM's xgrammar backend constraining our model's logits)."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import openai

from tests_vllm.helpers import REPO, vllm_env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_chat_completion(tiny, tmp_path):
    port = _free_port()
    log = open(tmp_path / "server.log", "w")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny["v41"]),
           "--served-model-name", "tiny-v41", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
           "--enforce-eager", "--max-model-len", "256", "--max-num-seqs", "4",
           # no free whitespace inside JSON: the random tiny model would fill max_tokens with it
           "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']
    t0 = time.time()
    server = subprocess.Popen(cmd, cwd=REPO, env=vllm_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 300
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-6000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.time() < deadline, "server did not come up in 300 s"
            time.sleep(1)
        ready = time.time()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        resp = client.chat.completions.create(model="tiny-v41", messages=[{"role": "user", "content": "Hello!"}],
                                              max_tokens=6, temperature=0)
        print(f"server ready in {ready - t0:.1f}s, chat completion {time.time() - ready:.1f}s: {resp.choices[0]}")
        assert resp.model == "tiny-v41"
        assert isinstance(resp.choices[0].message.content, str)
        assert resp.usage.completion_tokens >= 1 and resp.usage.prompt_tokens > 1
        # structured outputs: the random tiny model would never produce these by itself
        regex = client.chat.completions.create(
            model="tiny-v41", messages=[{"role": "user", "content": "A number?"}], max_tokens=20, temperature=0,
            extra_body={"structured_outputs": {"regex": "[0-9]{3}-[a-z]{2}"}})
        assert re.fullmatch("[0-9]{3}-[a-z]{2}", regex.choices[0].message.content), regex.choices[0]
        # finite values only: the random model would extend a free integer or string to max_tokens
        schema = {"type": "object", "properties": {"color": {"enum": ["red", "green"]}, "ok": {"type": "boolean"}},
                  "required": ["color", "ok"], "additionalProperties": False}
        js = client.chat.completions.create(
            model="tiny-v41", messages=[{"role": "user", "content": "JSON?"}], max_tokens=60, temperature=0,
            response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": schema}})
        assert js.choices[0].finish_reason == "stop", js.choices[0]
        value = json.loads(js.choices[0].message.content)
        assert set(value) == {"color", "ok"} and value["color"] in ("red", "green") and isinstance(value["ok"], bool)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
