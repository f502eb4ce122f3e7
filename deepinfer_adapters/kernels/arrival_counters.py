"""Arrival counters for kernels whose last program of a group finishes the group's work (``triton_hc_post_norm``):
int32 zeros between calls, each group's last arrival re-arms its own.

One set a CUDA stream: calls on one stream run one after the other (under programmatic dependent launch each
kernel waits for the one before), while another stream's may run at the same time. A call that needs more
counters than its stream's set holds gets a larger set, outside a CUDA graph's capture only; the smaller set stays
allocated (``_OUTGROWN``): a graph that captured it keeps its address.
"""

from __future__ import annotations

import torch

MIN_COUNTERS = 1024
_COUNTERS: dict[tuple[torch.device, int], torch.Tensor] = {}
_OUTGROWN: list[torch.Tensor] = []


def counters(device: torch.device, count: int) -> torch.Tensor:
    """At least ``count`` zeroed int32 counters for the current stream of ``device``."""
    on_gpu = device.type == "cuda"
    key = (device, torch.cuda.current_stream(device).cuda_stream if on_gpu else 0)
    have = _COUNTERS.get(key)
    if have is None or have.numel() < count:
        if have is not None and on_gpu and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"{count} arrival counters needed in a CUDA graph's capture, {have.numel()} held: "
                               "run the call once outside the capture first")
        if have is not None:
            _OUTGROWN.append(have)
        have = _COUNTERS[key] = torch.zeros(max(count, MIN_COUNTERS), device=device, dtype=torch.int32)
    return have
