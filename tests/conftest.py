"""Shared fixtures: tiny checkpoints written once per test session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from deepinfer_adapters.model_impl.tiny_checkpoint import write_tiny_checkpoint
from deepinfer_adapters.presets import tiny_config

# The tiny models run thousands of small ops; on two cores OpenMP's fork/join on
# every small gather costs more than it saves (measured: 4.7 ms vs 25 us per
# 127-row gather), so tests run torch single-threaded.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory):
    """``tiny_checkpoint(arch, shards=2, seed=0, **overrides)`` -> directory, cached per session.

    ``overrides`` change fields of the tiny preset (``presets.tiny_config``), e.g. the
    attention widths."""
    cache: dict[tuple[str, int, int, str], Path] = {}

    def make(arch: str, shards: int = 2, seed: int = 0, **overrides: Any) -> Path:
        key = (arch, shards, seed, json.dumps(overrides, sort_keys=True))
        if key not in cache:
            out = tmp_path_factory.mktemp(f"tiny-{arch}-{shards}-{seed}" + ("-custom" if overrides else ""))
            config = tiny_config(arch, **overrides) if overrides else None
            write_tiny_checkpoint(out, arch, seed=seed, num_shards=shards, config=config)
            cache[key] = out
        return cache[key]

    return make
