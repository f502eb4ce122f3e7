"""Decode steps replayed from CUDA graphs.

A decode step of a large MoE model at small batch is launch-bound: thousands of
small kernels, each costing more to issue from Python than to run. ``model.decode``
(one token per sequence, every per-sequence value a device tensor, no host sync) is
captured once per (batch bucket, length bucket) and replayed with new inputs written
into the same tensors.

- Batch buckets: 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, ... below ``max_batch``, and
  ``max_batch`` itself (``batch_buckets``); a step of B sequences runs the smallest
  bucket >= B.
  The extra rows decode a dummy token in ``pad_slot``, a state slot no request owns
  (the host reserves it, with its own pages), so they never touch real state.
- Length buckets: ``max_len`` is part of the graph's shapes (the index scan covers
  max_len // ratio compressed rows), so steps are grouped by the next power of two
  of their longest context (at least 1024), capped at the host's ``max_len``.
- Graphs are captured lazily, the first time a bucket pair is met, after two warm-up
  runs on a side stream (Triton compiles, autotunes and lazily built tables happen
  there, not inside the capture). Capture runs on the padding inputs only, so it
  writes nothing but the padding slot's state. All graphs share one memory pool.
- ``capture=False`` runs the same padded, bucketed ``model.decode`` eagerly (CPU
  tests; a GPU without graphs).
"""

from __future__ import annotations

import torch

from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.model_impl.batch import DecodeBatch
from deepinfer_adapters.model_impl.state import StateCache

MIN_LEN_BUCKET = 1024
# a capture runs on the stream its warm-up ran on, not on torch's own capture stream: what a kernel caches per stream
# at its first call (``kernels.arrival_counters``: a zeroed set each stream) is then made by the warm-up, outside the
# graph. On torch's stream every replay zero-fills the capture stream's counters before layer 0's first hc_post_norm
# (~1.4 us on the B=1 critical path, outside PDL: session 35's s35d timeline). H200, V4.1 at real widths, 7
# alternating rounds (session 36, part s36c; its graph tests passed and the fill is gone from the timeline): B=1 -3.7
# us with it (5 of 7), B=8 +21.9 us (7 of 7, unexplained): off
CAPTURE_ON_WARMUP_STREAM = False


def batch_buckets(max_batch: int) -> list[int]:
    sizes = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    return [s for s in sizes if s < max_batch] + [max_batch]


def len_bucket(max_len: int, cap: int) -> int:
    return min(cap, max(MIN_LEN_BUCKET, 1 << (max(max_len, 1) - 1).bit_length()))


def decode_mode(requested: str, model: torch.nn.Module, device: torch.device | str) -> str:
    """EngineConfig.decode resolved for this model and device: graphs | eager | forward."""
    has_decode = hasattr(model, "decode") and not getattr(model, "with_draft", False)
    if requested == "auto":
        return "graphs" if has_decode and torch.device(device).type == "cuda" else "forward"
    if requested != "forward" and not has_decode:
        raise ConfigError(f"decode={requested!r} needs a model with a batched decode step (DeepSeek-V4.1 or V4, "
                          f"without draft stages); this one is {type(model).__name__}: use decode='forward'",
                          "decode")
    if requested == "graphs" and torch.device(device).type != "cuda":
        raise ConfigError("decode='graphs' needs a CUDA device; use 'eager' on the CPU", "decode")
    return requested


class DecodeGraphs:
    def __init__(self, model: torch.nn.Module, state: StateCache, *, pad_slot: int, max_batch: int, max_len: int,
                 device: torch.device | str, capture: bool = True) -> None:
        self.model, self.state, self.pad_slot, self.max_len = model, state, pad_slot, max_len
        self.buckets = batch_buckets(max_batch)
        self.capture = capture and torch.device(device).type == "cuda"
        self.device = torch.device(device)
        self._ids = torch.zeros(max_batch, dtype=torch.long, device=device)
        self._pos = torch.zeros(max_batch, dtype=torch.long, device=device)
        self._slots = torch.full((max_batch,), pad_slot, dtype=torch.long, device=device)
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool = torch.cuda.graph_pool_handle() if self.capture else None

    @property
    def num_graphs(self) -> int:
        return len(self._graphs)

    def bucket(self, num_seqs: int) -> int:
        for b in self.buckets:
            if b >= num_seqs:
                return b
        raise ValueError(f"{num_seqs} sequences exceed the largest decode bucket {self.buckets[-1]}")

    @torch.inference_mode()
    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, max_len: int) -> torch.Tensor:
        """Logits [B, vocab] fp32 of one decode step (B = len(input_ids))."""
        n = input_ids.shape[0]
        b, length = self.bucket(n), len_bucket(max_len, self.max_len)
        if not self.capture:
            self._fill(input_ids, positions, slots, b)
            return self.model.decode(self._batch(b, length), self.state)[:n]
        graph, logits = self._graph(b, length)  # before the fill: a capture runs on padding inputs
        self._fill(input_ids, positions, slots, b)
        graph.replay()
        return logits[:n]

    def capture_all(self, max_len: int | None = None) -> None:
        """Capture every batch bucket ahead of time (benchmarks: no capture inside timings)."""
        if self.capture:
            length = len_bucket(max_len or self.max_len, self.max_len)
            for b in self.buckets:
                self._graph(b, length)

    def _graph(self, b: int, length: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        if (b, length) not in self._graphs:
            self._graphs[(b, length)] = self._capture(b, length)
        return self._graphs[(b, length)]

    def _fill(self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, b: int) -> None:
        n = input_ids.shape[0]
        self._ids[:n].copy_(input_ids, non_blocking=True)
        self._pos[:n].copy_(positions, non_blocking=True)
        self._slots[:n].copy_(slots, non_blocking=True)
        self._pad(n, b)

    def _pad(self, start: int, end: int) -> None:
        self._ids[start:end] = 0
        self._pos[start:end] = 0
        self._slots[start:end] = self.pad_slot

    def _batch(self, b: int, length: int) -> DecodeBatch:
        return DecodeBatch(self._ids[:b], self._pos[:b], self._slots[:b], length)

    def _capture(self, b: int, length: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        self._pad(0, b)  # warm-up and capture touch the padding slot only
        batch = self._batch(b, length)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self.model.decode(batch, self.state)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, stream=side if CAPTURE_ON_WARMUP_STREAM else None):
            logits = self.model.decode(batch, self.state)
        return graph, logits
