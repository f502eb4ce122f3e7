"""Rotary tables: interleaved pairs on the last ``qk_rope_head_dim`` dims (model_spec.md 2.1).

Window-only layers use ``rope_theta`` without YaRN; compressed layers use
``compress_rope_theta`` with YaRN over the original context (no mscale). The
same per-layer table serves q, window KV, compressed KV and indexer q/k.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from deepinfer_adapters.config import ModelConfig


@lru_cache(maxsize=16)
def _inv_freqs(rd: int, base: float, orig_len: int, factor: float, beta_fast: float, beta_slow: float) -> torch.Tensor:
    # device="cpu" explicitly: the table is cached, and a model built under torch.device("meta")
    # (model_impl/native_format.py) must not cache a meta tensor
    freqs = 1.0 / (base ** (torch.arange(0, rd, 2, dtype=torch.float32, device="cpu") / rd))
    if orig_len > 0:
        def corrected_dim(rotations: float) -> float:
            return rd * math.log(orig_len / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low = max(math.floor(corrected_dim(beta_fast)), 0)
        high = min(math.ceil(corrected_dim(beta_slow)), rd - 1)
        ramp = ((torch.arange(rd // 2, dtype=torch.float32, device="cpu") - low) / max(high - low, 1e-3)).clamp(0, 1)
        freqs = freqs / factor * ramp + freqs * (1 - ramp)
    return freqs


class RotaryTable:
    """Complex rotations for any positions, for one layer kind."""

    def __init__(self, cfg: ModelConfig, compressed: bool) -> None:
        r = cfg.rope
        if compressed:
            args = (cfg.qk_rope_head_dim, r.compress_theta, r.original_max_position_embeddings, r.factor,
                    r.beta_fast, r.beta_slow)
        else:
            args = (cfg.qk_rope_head_dim, r.theta, 0, r.factor, r.beta_fast, r.beta_slow)
        self.kind = args  # equal for every layer with the same table
        self.inv_freqs = _inv_freqs(*args)

    def __call__(self, positions: torch.Tensor) -> torch.Tensor:
        """[n] integer positions -> [n, rd/2] complex64."""
        return _rotations(positions.cpu(), self.inv_freqs).to(positions.device)

    def lookup(self, positions: torch.Tensor, max_len: int) -> torch.Tensor:
        """The same values as ``__call__`` read from a table on ``positions``' device that
        covers positions < ``max_len``: no host sync, so a CUDA graph can capture it (the
        table is built when first asked for, i.e. during warm-up, not capture)."""
        return _device_table(self.inv_freqs, positions.device, _table_len(max_len))[positions]


def _rotations(positions: torch.Tensor, inv_freqs: torch.Tensor) -> torch.Tensor:
    angles = torch.outer(positions.to(torch.float32), inv_freqs)  # fp32, as the reference
    # cos/sin through fp64: vectorized fp32 cos/sin round differently at different tensor sizes
    rot = torch.polar(torch.ones_like(angles, dtype=torch.float64), angles.double())
    return rot.to(torch.complex64)


def _table_len(max_len: int) -> int:
    return 1 << max(12, (max(max_len, 1) - 1).bit_length())  # powers of two from 4096: few rebuilds


_TABLES: dict[tuple[int, torch.device], torch.Tensor] = {}


def _device_table(inv_freqs: torch.Tensor, device: torch.device, length: int) -> torch.Tensor:
    key = (id(inv_freqs), torch.device(device))  # inv_freqs are lru-cached: one object per layer kind
    table = _TABLES.get(key)
    if table is None or table.shape[0] < length:
        table = _rotations(torch.arange(length), inv_freqs).to(device)
        _TABLES[key] = table
    return table
