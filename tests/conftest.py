"""Shared fixtures: tiny checkpoints written once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepinfer_adapters.model_impl.tiny_checkpoint import write_tiny_checkpoint


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory):
    """``tiny_checkpoint(arch, shards=2, seed=0)`` -> directory, cached per session."""
    cache: dict[tuple[str, int, int], Path] = {}

    def make(arch: str, shards: int = 2, seed: int = 0) -> Path:
        key = (arch, shards, seed)
        if key not in cache:
            out = tmp_path_factory.mktemp(f"tiny-{arch}-{shards}-{seed}")
            write_tiny_checkpoint(out, arch, seed=seed, num_shards=shards)
            cache[key] = out
        return cache[key]

    return make
