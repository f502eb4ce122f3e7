"""Batch-invariant mode of the reference path.

On the CPU, torch picks different GEMM kernels, reduction orders and vector or
scalar transcendental code paths for different tensor shapes, so an fp32 result
for one row can differ in the last bit depending on the other rows of the call.
In batch-invariant mode the reference ops evaluate those places in fp64 and
round once to fp32 (fp64's own shape-dependent differences sit ~2^-29 below an
fp32 ulp and vanish in the rounding), so a sequence's logits never depend on
what else is in the batch: the engine's deterministic sampling relies on it.

Off, the same ops run in fp32 in the order DeepSeek's reference code uses,
which reproduces its CPU results more closely (Numerics.batch_invariant).
The mode is per thread and set by the model around each forward.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_state = threading.local()


def enabled() -> bool:
    return getattr(_state, "on", False)


@contextmanager
def batch_invariant(on: bool) -> Iterator[None]:
    previous = enabled()
    _state.on = on
    try:
        yield
    finally:
        _state.on = previous


def wide(x: torch.Tensor) -> torch.Tensor:
    """x for an fp32-valued computation: fp64 in batch-invariant mode, else fp32."""
    return x.double() if enabled() else x.float()


def narrow(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """x for a product the reference runs in the activation dtype (bf16 GEMMs, fp32
    accumulation): fp64 in batch-invariant mode, else ``dtype`` (default: x's own)."""
    return x.double() if enabled() else x.to(dtype or x.dtype)
