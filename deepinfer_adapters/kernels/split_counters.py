"""Zeroed int32 counters for kernels that add their split-K partials themselves
(``fp8_triton_jit.last_split_sums``): the last program of a tile to arrive sums the partials
and sets its counter back to 0, so one buffer serves every launch.

Launches on one stream run one after another (with programmatic dependent launch, each
kernel waits for its predecessor before touching memory), so they can share counters; launches
on two streams can run at once (the shared experts' side stream, model_impl/overlap.py), so
each stream gets its own range. A CUDA graph replays the counters its capture recorded: the
range of the stream it was captured on, which nothing else uses while it runs.

The buffer is allocated outside graph capture only (memory allocated during a capture belongs
to that graph's pool); until then, and for more tiles or streams than it holds, ``counters``
returns None and the caller sums its partials with a second launch as before.
"""

from __future__ import annotations

import torch

SLOTS = 4096  # tiles per launch a range holds
STREAMS = 16  # ranges per device

_BUFFERS: dict[int, torch.Tensor] = {}
_RANGES: dict[tuple[int, int], int] = {}  # (device, stream handle) -> range


def counters(device: torch.device, tiles: int) -> torch.Tensor | None:
    """``tiles`` zeroed counters for a launch on the current stream of ``device``, or None. Off
    CUDA (Triton's CPU interpreter) a fresh zeroed tensor each call."""
    if tiles > SLOTS:
        return None
    if device.type != "cuda":
        return torch.zeros(tiles, dtype=torch.int32, device=device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    buffer = _BUFFERS.get(index)
    if buffer is None:
        if torch.cuda.is_current_stream_capturing():
            return None
        buffer = _BUFFERS[index] = torch.zeros(STREAMS * SLOTS, dtype=torch.int32, device=device)
    key = (index, torch.cuda.current_stream(device).cuda_stream)
    slot = _RANGES.get(key)
    if slot is None:
        taken = sum(1 for (i, _) in _RANGES if i == index)
        if taken >= STREAMS:
            return None
        slot = _RANGES[key] = taken
    return buffer[slot * SLOTS: slot * SLOTS + tiles]
