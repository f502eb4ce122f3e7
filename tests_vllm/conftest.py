"""Tests that need vLLM (run in the vLLM virtual environment: .ci/vllm.sh).

Nothing here is skipped: without vLLM or our entry point every test fails loudly.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest


def pytest_sessionstart(session) -> None:
    import vllm  # noqa: F401  (an ImportError here is the point: wrong environment)

    names = [ep.name for ep in importlib.metadata.entry_points(group="vllm.general_plugins")]
    if "deepinfer_adapters" not in names:
        raise pytest.UsageError(f"entry point vllm.general_plugins:deepinfer_adapters is not installed "
                                f"(found {names}); pip install --no-deps -e . in this environment")


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict[str, Path]:
    from deepinfer_adapters.model_impl.tiny_checkpoint import write_tiny_checkpoint

    root = tmp_path_factory.mktemp("tiny")
    out = {}
    for arch in ("v41", "v4"):
        write_tiny_checkpoint(root / arch, arch, seed=0)
        out[arch] = root / arch
    return out
