"""torch.profiler over one step: the op tables, plus the step's kernels in launch order.

``profile_step`` writes ``profile_{name}.txt`` (top ops by host and by GPU time) and
``kernels_{name}.txt``: every GPU kernel of the step in order with its duration and the
innermost ATen / kernel-op frame that launched it, then the same summed by kernel name.
The ordered list is what maps a graph replay's time onto the model's source (the op
tables alone merge every GEMM of a step into one row).

``timeline_step`` profiles a CUDA graph replay itself and writes ``timeline_{name}.txt``: the
step's span on the GPU against the union of its kernels' intervals (the rest is idle: launch
gaps between dependent kernels) and against their summed durations (more than the union where
side streams overlap), then the largest idle gaps and the kernels around them.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

import torch


def log(msg: str) -> None:
    print(msg, flush=True)


def _kernel_rows(prof) -> list[tuple[str, float, str]]:
    """(kernel name, us, launching op) for each GPU kernel, in start order."""
    rows = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        parent, op = e.cpu_parent, ""
        while parent is not None:  # the innermost named op above the runtime launch call
            if not parent.name.startswith(("cuda", "cu")):
                op = parent.name
                break
            parent = parent.cpu_parent
        rows.append((e.time_range.start, e.name, e.time_range.elapsed_us(), op))
    return [(name, us, op) for _, name, us, op in sorted(rows)]


def profile_step(step, out_dir: str, name: str = "decode_b1") -> None:
    """One call of ``step`` (after one warm call) under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    table = events.table(sort_by="self_cpu_time_total", row_limit=40)
    with open(os.path.join(out_dir, f"profile_{name}.txt"), "w") as fh:
        fh.write(table + "\n\n" + events.table(sort_by="self_device_time_total", row_limit=25))
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx"))
    gpu_us = sum(e.self_device_time_total for e in events)
    log(f"profile {name}: {launches} kernel launches, GPU busy {gpu_us / 1e3:.1f} ms; top by GPU time:")
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:25]:
        log(f"  {e.key[:60]:60s} calls {e.count:6d} self cpu {e.self_cpu_time_total / 1e3:8.2f} ms "
            f"gpu {e.self_device_time_total / 1e3:8.2f} ms")
    try:
        rows = _kernel_rows(prof)
    except Exception as e:  # the ordered trace is extra detail; the tables above stand alone
        log(f"kernel trace failed: {type(e).__name__}: {e}")
        return
    by_name = defaultdict(lambda: [0, 0.0])
    for kernel, us, _ in rows:
        by_name[kernel[:90]][0] += 1
        by_name[kernel[:90]][1] += us
    with open(os.path.join(out_dir, f"kernels_{name}.txt"), "w") as fh:
        fh.write(f"# {len(rows)} kernels, {sum(r[1] for r in rows):.1f} us\n# us  kernel  <- op\n")
        for kernel, us, op in rows:
            fh.write(f"{us:9.2f}  {kernel[:90]}  <- {op[:60]}\n")
        fh.write("\n# by kernel: calls, total us, mean us\n")
        for kernel, (n, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
            fh.write(f"{n:5d} {us:10.1f} {us / n:8.2f}  {kernel}\n")
    log(f"kernels {name}: {len(rows)} kernels, {sum(r[1] for r in rows) / 1e3:.2f} ms summed")


def _intervals(prof) -> list[tuple[float, float, str]]:
    """(start us, end us, kernel name) of each GPU kernel, in start order."""
    return [row[:3] for row in _stream_intervals(prof)]


def _stream_intervals(prof) -> list[tuple[float, float, str, int]]:
    """``_intervals`` with each kernel's CUDA stream (its device resource id)."""
    rows = [(e.time_range.start, e.time_range.end, e.name, e.device_resource_id) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted(rows)


def step_rows(rows: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """A graph replay's kernel intervals without the leading input copies (``Memcpy``): the host
    launches the replay after them (slowly under the profiler), so they are not the step."""
    first = next((i for i, row in enumerate(rows) if not row[2].startswith("Memcpy")), len(rows))
    return rows[first:]


def timeline_summary(rows: list[tuple[float, float, str]]) -> tuple[dict, list, dict]:
    """Kernel intervals (start us, end us, name; start order) of one step -> (span / busy (the union
    of the intervals) / idle / summed durations / kernel count, the idle gaps as (us, kernel before,
    kernel after), per kernel name (calls, summed us)), after ``step_rows``."""
    rows = step_rows(rows)
    if not rows:
        return {}, [], {}
    busy, idle, end, prev = 0.0, [], rows[0][0], ""
    by_name: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for start, stop, kernel in rows:
        if start > end:
            idle.append((start - end, prev, kernel))
        busy += max(0.0, stop - max(start, end))
        if stop > end:
            end, prev = stop, kernel
        by_name[kernel][0] += 1
        by_name[kernel][1] += stop - start
    span = end - rows[0][0]
    result = {"kernels": len(rows), "span_us": span, "busy_us": busy, "idle_us": span - busy,
              "summed_us": sum(stop - start for start, stop, _ in rows)}
    return result, idle, dict(by_name)


def timeline_step(step, out_dir: str, name: str, gaps: int = 25, note: str = "") -> dict:
    """One call of ``step`` (a graph replay; after one warm call) under torch.profiler: span,
    busy (the union of kernel intervals), idle, summed kernel time; the ``gaps`` largest idle
    gaps with the kernels before and after them; each kernel's calls and time as they run in the
    replay (durations next to side-stream kernels differ from an eager profile's). ``note``: a line
    for the file's head (how to read it)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    with_streams = _stream_intervals(prof)
    stream_of = {row[:3]: row[3] for row in with_streams}
    rows = step_rows([row[:3] for row in with_streams])
    result, idle, by_name = timeline_summary(rows)
    if not result:
        log(f"timeline {name}: no kernels traced")
        return {}
    busy, summed = result["busy_us"], result["summed_us"]
    with open(os.path.join(out_dir, f"timeline_{name}.txt"), "w") as fh:
        fh.write(f"# {len(rows)} kernels; span {result['span_us']:.1f} us, busy {busy:.1f} (union of kernel "
                 f"intervals), idle {result['idle_us']:.1f} in {len(idle)} gaps, kernels summed {summed:.1f} "
                 f"(summed / busy {summed / busy:.3f}: > 1 where streams overlap)\n")
        if note:
            fh.write(f"# {note}\n")
        fh.write(f"# the {gaps} largest gaps: us, kernel before -> kernel after\n")
        for gap, before, after in sorted(idle, reverse=True)[:gaps]:
            fh.write(f"{gap:8.2f}  {before[:60]} -> {after[:60]}\n")
        fh.write("\n# by kernel, as they run in the replay: calls, total us, mean us\n")
        for kernel, (n, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
            fh.write(f"{n:5d} {us:10.1f} {us / n:8.2f}  {kernel[:90]}\n")
        fh.write("\n# kernels in start order: start us (from the first), us, end us, stream, kernel\n")
        for start, stop, kernel in rows:
            fh.write(f"{start - rows[0][0]:9.2f} {stop - start:8.2f} {stop - rows[0][0]:9.2f} "
                     f"{stream_of[(start, stop, kernel)]:4d}  {kernel[:90]}\n")
    log(f"timeline {name}: {json.dumps({k: round(v, 1) for k, v in result.items()})}")
    return result
