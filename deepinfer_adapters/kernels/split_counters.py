"""Arrival counters for split-K GEMMs that add their own partials (``fp8_triton_jit.add_splits_when_last``).

A split-K GEMM used to end with a second launch, ``split_sum_kernel``; a V4.1 decode step had ~46 of them
(eager profile, session 15), each a few microseconds of a CUDA-graph replay for a few kilobytes of work.
Instead each program of a split tile stores its partial and counts itself in, and the last to arrive adds the
tile's partials in split order (the second launch's order, so its bits) and puts the counter back to zero.

The counters are int32 zeros in one buffer per device, handed out in turn, a launch's slice one counter a
tile: kernels that may run at once (side streams) get different slices as long as fewer than ``COUNTERS``
are taken in between, and every kernel leaves its slice zero, so a CUDA graph replays its captured slices
as they were. The buffer is made outside a capture (a capture records its zeroing but does not run it);
until then ``take`` answers None and the caller keeps the second launch.
"""

from __future__ import annotations

import threading

import torch

ENABLED = True  # off: every split GEMM adds its partials in a second launch (``take`` answers None)
COUNTERS = 1 << 16
_lock = threading.Lock()
_buffers: dict[torch.device, torch.Tensor] = {}
_next: dict[torch.device, int] = {}


def take(device: torch.device, n: int) -> torch.Tensor | None:
    """``n`` zeroed int32 counters for one launch, or None (switched off, no buffer yet while a graph is
    captured, or more than the buffer holds)."""
    if not ENABLED or n > COUNTERS:
        return None
    with _lock:
        buf = _buffers.get(device)
        if buf is None:
            if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                return None
            buf = _buffers[device] = torch.zeros(COUNTERS, dtype=torch.int32, device=device)
        start = _next.get(device, 0)
        start = 0 if start + n > COUNTERS else start
        _next[device] = start + n
        return buf[start:start + n]
