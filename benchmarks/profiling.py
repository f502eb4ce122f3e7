"""torch.profiler over one step: the op tables, plus the step's kernels in launch order.

``profile_step`` writes ``profile_{name}.txt`` (top ops by host and by GPU time) and
``kernels_{name}.txt``: every GPU kernel of the step in order with its duration and the
innermost ATen / kernel-op frame that launched it, then the same summed by kernel name.
The ordered list is what maps a graph replay's time onto the model's source (the op
tables alone merge every GEMM of a step into one row).
"""

from __future__ import annotations

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
