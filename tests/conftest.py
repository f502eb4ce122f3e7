"""Shared fixtures: tiny checkpoints written once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from deepinfer_adapters.model_impl.tiny_checkpoint import write_tiny_checkpoint

# The tiny models run thousands of small ops; on two cores OpenMP's fork/join on
# every small gather costs more than it saves (measured: 4.7 ms vs 25 us per
# 127-row gather), so tests run torch single-threaded.
torch.set_num_threads(1)


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
