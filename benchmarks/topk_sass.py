"""Offline SASS of the row top-k kernels (``triton_topk.topk_kernel`` and ``gluon_topk_jit.topk_gluon_kernel``),
with no GPU: instructions a thread, barriers and lane shuffles for a bf16 row of ``m`` scores at the launchers'
shapes. At decode one program holds an SM alone with up to 16 warps, so the kernel is bound by the SM's issue
(4 warp-instructions a clock) and its barriers' round trips.

Needs Triton 3.6 in a scratch venv (as ``sass_count.py``):
    PYTHONPATH=. /tmp/tri36/bin/python benchmarks/topk_sass.py [m ...]
Session 35 (m = 4104, 16 warps): Triton (an 8192 block) 2344 instructions a thread, 60 barriers, 80 shuffles; Gluon
at 16 scores a thread 2008, 33, 5; Gluon with the row in two parts (``gluon_topk.SPLIT_ROW``, 8 + 1 a thread) below.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon._runtime import GluonASTSource

from benchmarks.sass_count import _INSTR
from deepinfer_adapters.kernels import gluon_topk, triton_topk
from deepinfer_adapters.kernels.gluon_topk_jit import topk_gluon_kernel

_PTRS = {"S": "*bf16", "IDX": "*i64", "VAL": "*bf16"}


def _sass(kernel, source, const: dict, warps: int) -> str:
    names = list(kernel.arg_names)
    sig = {n: _PTRS.get(n, "constexpr" if n in const else "i32") for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if n in _PTRS or n.startswith("stride")}
    src = source(kernel, sig, constexprs={(names.index(k),): v for k, v in const.items()}, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    path = "/tmp/topk_sass.cubin"
    with open(path, "wb") as fh:
        fh.write(compiled.asm["cubin"])
    tool = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    return subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout


def _summary(name: str, text: str) -> str:
    ops = collections.Counter(m.group(2) for line in text.splitlines() if (m := _INSTR.match(line)))
    return (f"{name:8s} {sum(ops.values()):5d} instructions a thread, {ops['BAR']:3d} barriers, "
            f"{ops['SHFL']:3d} shuffles")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", nargs="*", type=int, default=[1026, 4104])
    args = ap.parse_args()
    _, triton_kernel = triton_topk._kernel()
    for m in args.rows:
        block = max(16, triton.next_power_of_2(m))
        warps = max(1, min(triton_topk.MAX_WARPS, block // (32 * triton_topk.ROW_PER_THREAD)))
        text = _sass(triton_kernel, ASTSource, dict(BLOCK=block, TORCH_ORDER=False, KEY_BITS=16), warps)
        print(f"m {m}: " + _summary("triton", text) + f" ({warps} warps)")
        for split in (False, True):
            gluon_topk.SPLIT_ROW = split
            warps, per, tail = gluon_topk.shape(m)
            text = _sass(topk_gluon_kernel, GluonASTSource,
                         dict(W=warps, PER=per, TAIL=tail, TORCH_ORDER=False, KEY_BITS=16, PDL=True), warps)
            print(f"m {m}: " + _summary("gluon", text) + f" ({warps} warps, {per} + {tail} scores a thread)")


if __name__ == "__main__":
    main()
