"""Timing helpers shared by the benchmark scripts (device events, medians).

``time_graph`` captures one call per input set in a CUDA graph (no launch gaps);
input sets rotate so the data does not sit in the 60 MB L2. ``time_eager`` times
what Python-driven code sees, launches included. ``ceilings`` measures the copy
bandwidth and the bf16 / FP8 matrix rates once per run.
"""

from __future__ import annotations

import datetime
import statistics
import sys

import torch

L2_BYTES = 60e6


def paired_rounds(off: list[float], on: list[float]) -> tuple[float, int]:
    """An A/B's alternating rounds (one time per side a round): the median of the per-round differences on - off
    and the number of rounds where on was faster. Each difference pairs two runs taken back to back, so a drift of
    the GPU's speed between rounds cancels (session 28: rounds of one side spread +-40 us at B=1, the medians of the
    two sides' sets alone could not resolve a 10 us change)."""
    if len(off) != len(on) or not off:
        raise ValueError(f"paired_rounds: {len(off)} and {len(on)} rounds")
    diffs = [b - a for a, b in zip(off, on)]
    return statistics.median(diffs), sum(d < 0 for d in diffs)


def _event():
    return torch.cuda.Event(enable_timing=True)


def time_eager(fn, reps: int = 20, warm: int = 3) -> float:
    """Median µs per call."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = _event(), _event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def time_graph(fns, reps: int = 20) -> float:
    """Median µs per call of ``fns`` (one call per input set), replayed from one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    for _ in range(3):
        g.replay()
    times = []
    for _ in range(reps):
        a, b = _event(), _event()
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / len(fns))
    del g
    return statistics.median(times)


def ceilings() -> dict[str, float]:
    """Copy bandwidth (read + write, B/s) and 8192^3 bf16 / FP8 (tensor-wise _scaled_mm) rates."""
    x = torch.randn(1 << 29, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    copy_bw = 2 * x.numel() * 2 / (time_eager(lambda: y.copy_(x), reps=10) * 1e-6)
    del x, y
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    bf16 = 2 * n**3 / (time_eager(lambda: a @ b, reps=10) * 1e-6)
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    fp8 = 2 * n**3 / (time_eager(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16), reps=10) * 1e-6)
    del a, b, a8, b8
    torch.cuda.empty_cache()
    return {"copy_bw": copy_bw, "bf16_flops": bf16, "fp8_flops": fp8}


def run_info() -> dict:
    """Where, when and how a benchmark ran: GPU, SMs, torch, Triton, the command, the UTC time."""
    import triton

    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "triton": triton.__version__, "command": " ".join(sys.argv),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())
