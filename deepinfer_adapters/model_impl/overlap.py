"""Two independent parts of a step side by side on the GPU (a second CUDA stream).

At decode most kernels are too small to fill the GPU, so a part that does not depend on
the work around it can run next to it instead of after it: V4.1's hyper-connection mixes
next to the sublayer they are computed for (single-pass HC: the sublayer reads the previous
mix), the shared expert next to the MoE gate and routing. The same kernels run on the same
inputs, so every value is the same bits as run one after the other; only the time changes.
SGLang runs DeepSeek's shared experts this way in its decode graphs.

CUDA graphs capture the fork and join (the side stream joins the capture through
``wait_stream``; its allocations go to the graph's pool). ``side``'s inputs must stay
referenced until ``side_by_side`` returns (the callers' tensors do): the side stream may
still be reading them while ``main`` runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

A = TypeVar("A")
B = TypeVar("B")

ENABLED = True
MAX_TOKENS = 1024  # up to this many tokens (decode and short steps; prefill is not measured)
_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def side_by_side(x: torch.Tensor, main: Callable[[], A], side: Callable[[], B]) -> tuple[A, B]:
    """(main(), side()); on CUDA with ``x`` (the step's activations, tokens first) at most
    ``MAX_TOKENS`` rows, side() runs on a second stream while main() runs on the current one.
    Elsewhere (CPU, larger steps, torch.compile tracing) one after the other."""
    if not (ENABLED and x.is_cuda and x.shape[0] <= MAX_TOKENS) or torch.compiler.is_compiling():
        b = side()
        return main(), b
    current = torch.cuda.current_stream(x.device)
    stream = _STREAMS.get(x.device)
    if stream is None:
        stream = _STREAMS[x.device] = torch.cuda.Stream(x.device)
    stream.wait_stream(current)
    with torch.cuda.stream(stream):
        b = side()
    a = main()
    current.wait_stream(stream)
    return a, b
