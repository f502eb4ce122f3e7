"""Compile a Gluon kernel for sm_90 with no GPU (Triton 3.6, the GPU machine's, in a scratch venv: its bundled
ptxas builds the cubin) and print what decides its speed before any device time is spent: shared memory,
wgmma count, registers, spills and ptxas' notes that it serializes wgmma products (C75xx).
Used by bench_gluon_moe.py and bench_gluon_gemv.py (``--compile-only``)."""

from __future__ import annotations

import os
import re
import subprocess


def compile_sm90(kernel, signature: dict, constexprs: dict, divisible: tuple, label: str, num_warps: int = 4) -> None:
    """``signature``: argument name -> Triton type string ("constexpr" for ``constexprs``' names); the
    ``divisible`` arguments are marked divisible by 16, as a real launch specializes them."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    names = list(kernel.arg_names)
    src = GluonASTSource(kernel, {n: signature[n] for n in names},
                         constexprs={(names.index(k),): v for k, v in constexprs.items()},
                         attrs={(names.index(n),): [["tt.divisibility", 16]] for n in divisible})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    path = f"/tmp/{re.sub(r'[^A-Za-z0-9_]+', '_', label).strip('_')}.ptx"  # one file a variant
    with open(path, "w") as fh:
        fh.write(compiled.asm["ptx"])
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    notes = subprocess.run([ptxas, "-arch=sm_90a", "-v", path, "-o", path.replace(".ptx", ".cubin")],
                           capture_output=True, text=True).stderr
    print(f"{label} compiled for sm_90: shared memory {compiled.metadata.shared} bytes, "
          f"{compiled.asm['ptx'].count('wgmma.mma_async')} wgmma in the PTX")
    print("\n".join(line for line in notes.splitlines() if "C75" in line or "registers" in line or "spill" in line))
