"""Whether Triton can be imported here (the CUDA backends' ``supports`` checks ask once), and
whether its CPU interpreter is on; the float dtypes the Triton kernels load and store."""

from __future__ import annotations

import functools
import os

import torch

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # ImportError, or a broken install
        return False
    return True


def interpreting() -> bool:
    """Triton's CPU interpreter is on (its own switch, read by Triton)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


# Launch the Triton kernels with programmatic dependent launch (kernels/triton_pdl.py) on Hopper and
# later GPUs. On since session 23: H200, V4.1 real widths, graph replays alternating, 5 rounds each: B = 1
# 1.850 ms on against 1.966-1.971 off (every round), B = 8 4.957 against 5.050 (4 of 5 rounds). Session 9 had
# measured it neutral (2.847 against 2.854 at B = 1) on a step of ~300 fewer kernels and no side streams. A
# profile under it counts each kernel's wait as its time (a timeline's gaps turn into overlaps); a GEMV
# prefetching its weights before its wait measured 1-2% slower (session 9).
PDL = True


@functools.cache
def pdl_capable() -> bool:
    """Whether kernels built here can use programmatic dependent launch: compiled (not the CPU
    interpreter) for a Hopper or later GPU."""
    import torch

    return not interpreting() and torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


def pdl_launch() -> dict:
    """Launch options of a kernel that opens with ``triton_pdl.pdl_start``: ``kernel[grid](...,
    **pdl_launch())``."""
    return {"launch_pdl": True} if PDL and pdl_capable() else {}
