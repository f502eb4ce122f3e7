"""Programmatic dependent launch (PDL) for the project's Triton kernels (Hopper and later).

A decode step is hundreds of short kernels; between two of them the GPU drains the first grid,
then launches and ramps up the second. With PDL a kernel is launched while the kernel before it
in the stream still runs: its programs start, then wait (``griddepcontrol.wait``) until that
kernel has finished and its writes are visible. The wait is the first thing every Triton kernel
here does (``pdl_start``), so no kernel reads or writes memory before its predecessor is done,
and the results are the same bits as without PDL. Each kernel also lets its own dependent
launch as soon as all its programs have started (``griddepcontrol.launch_dependents``).

On by default (``triton_support.PDL``): V4.1 B=1 decode graphs 1.85 ms against 1.97 without (H200, session 23;
session 9 had measured it neutral on a step of fewer kernels and no side streams, and 1-2% slower with the Triton
decode GEMV prefetching its weights into L2 before its wait).

Only kernels that open with ``pdl_start`` may be launched with ``pdl_launch()``'s option:
tests/test_triton_pdl.py checks that every Triton kernel of the package does. Kernels from
elsewhere (torch, cuBLAS, FlashMLA) launch as before; a kernel after one of them waits for it
to finish as usual. This module imports triton.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from deepinfer_adapters.kernels import triton_support

# griddepcontrol is SM90 PTX: compiled in where the kernels are built for a Hopper or later GPU;
# the CPU interpreter cannot run PTX
GRID_DEPENDENCY = tl.constexpr(triton_support.pdl_capable())


@triton.jit
def pdl_start():
    """A kernel's first statement: let the next kernel launch, then wait for the previous one."""
    if GRID_DEPENDENCY:
        gdc_launch_dependents()
        gdc_wait()
