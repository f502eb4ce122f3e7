"""Offline SASS of the decode GEMM kernels: instructions in the K loop per weight value a thread
covers, with no GPU. Where a kernel is issue-bound, that count sets its time: an H200 SM issues
4 warp-instructions a clock (128 thread-instructions), and holding the copy rate (~4.2 TB/s over
132 SMs at ~1.98 GHz: ~16 bytes a clock an SM) leaves 8 thread-instructions per E4M3 value and 4
per packed E2M1 value, at perfect issue.

Needs Triton 3.6 (the GPU machine's) in a scratch venv here; its bundled ptxas builds sm_90 cubins:
    python3 -m venv /tmp/tri36 && /tmp/tri36/bin/pip install triton==3.6.0 torch==2.13.0
    PYTHONPATH=. /tmp/tri36/bin/python benchmarks/sass_count.py [--dump DIR]

Kernels (decode shapes; pointers, sizes and strides marked divisible by 16 as a real launch
specializes them -- without that Triton neither vectorizes nor pipelines the loads):
  fp4_rows        fp4_gemm_rows_kernel, V4's packed E2M1 experts (activation scales per 128), 16 rows
  fp4_rows_blk    the same with BLOCK_ACC (``triton_fp8_gemm.FP4_BLOCK_ACCUMULATE``): each 128-input block
                  accumulated under the weight scales only, the activation scale applied once a block
  fp4_rows_blk32  BLOCK_ACC with V4.1's activation scales per 32 (each product scaled by both)
  rows_bf16       fp8_gemm_rows_kernel with bf16 steps (V4.1 dense GEMVs, scale blocks of 32)
  rows_fp8        fp8_gemm_rows_kernel with FP8 steps
Session 12 (BENCHMARKS.md): fp4_rows 4.7 instructions a value, rows_bf16 6.4, rows_fp8 4.2; 8-row tiles
make Triton fall back to mma.sync with fp8 -> f16 conversions (no gain). Session 13: fp4_rows_blk 3.0 (3.4
before the scale words), fp4_rows_blk32 4.0 (fp4_rows at V4.1's scales per 32: 4.6).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from deepinfer_adapters.kernels import fp8_triton_jit as jit


_FP4_PTRS = {"A": "*fp8e4nv", "A_SCALE": "*fp32", "W": "*u8", "W_SCALE": "*u8", "OUT": "*bf16", "ROW_IDX": "*i64",
             "TILE_EXPERT": "*i32", "TILE_ROW0": "*i32", "TILE_ROW1": "*i32"}
_FP4_CONST = dict(BLOCK_N=128, BLOCK_T=16, A_SB=128, W_BK=32, GATHER_A=True, SCATTER_OUT=False, PTX=True, TILED=True,
                  BLOCK_ACC=False)
_ROWS_PTRS = {"A": "*fp8e4nv", "A_SCALE": "*fp32", "W": "*fp8e4nv", "W_SCALE": "*u8", "OUT": "*fp32"}
_ROWS_CONST = dict(BLOCK_N=64, BLOCK_T=16, A_SB=32, W_BN=32, W_BK=32, W_E8M0=True, QUANT_A=False)
# name: (kernel, pointer types, constexprs, options, weight values a K-loop iteration covers)
KERNELS = {
    "fp4_rows": (jit.fp4_gemm_rows_kernel, _FP4_PTRS, _FP4_CONST, {"num_warps": 4, "num_stages": 3}, 128 * 64),
    "fp4_rows_blk": (jit.fp4_gemm_rows_kernel, dict(_FP4_PTRS, W_SCALE="*i32"), dict(_FP4_CONST, BLOCK_ACC=True),
                     {"num_warps": 4, "num_stages": 3}, 128 * 128),
    "fp4_rows_blk32": (jit.fp4_gemm_rows_kernel, dict(_FP4_PTRS, W_SCALE="*i32"),
                       dict(_FP4_CONST, BLOCK_ACC=True, A_SB=32), {"num_warps": 4, "num_stages": 3}, 128 * 128),
    "rows_bf16": (jit.fp8_gemm_rows_kernel, _ROWS_PTRS, dict(_ROWS_CONST, KSTEP=128, SUB=1, BF16_STEPS=True),
                  {"num_warps": 4, "num_stages": 3}, 64 * 128),
    "rows_fp8": (jit.fp8_gemm_rows_kernel, _ROWS_PTRS, dict(_ROWS_CONST, KSTEP=32, SUB=4, BF16_STEPS=False),
                 {"num_warps": 4, "num_stages": 4}, 64 * 128),
    # the MoE's bf16-path prefill tile (128 x 128, 8 warps; each weight value to fp32, times its scale, to bf16)
    "bf16_prefill": (jit.fp8_gemm_kernel, dict(_FP4_PTRS, A="*bf16", W="*fp8e4nv", A_SCALE="*bf16", ROW_IDX="*i32"),
                     dict(BLOCK_M=128, BLOCK_N=128, KSTEP=128, SUB=1, A_SB=0, W_BN=1, W_BK=128, W_E8M0=True,
                          GROUPED=True, GATHER_A=True, SCATTER_OUT=False, QUANT_A=False, W_FP4=0, W_TILED=True),
                     {"num_warps": 8, "num_stages": 3}, 128 * 128),
}
_SPECIALIZED = ("N", "K", "k_per_split", "stride_am", "stride_asm", "stride_we", "stride_wn", "stride_wse",
                "stride_wsn", "stride_om", "stride_os")
_INSTR = re.compile(r"\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z0-9_]+)")
_BRANCH = re.compile(r"BRA\s+0x([0-9a-f]+)")


def sass(kernel, ptrs: dict, const: dict, options: dict) -> str:
    names = list(kernel.arg_names)
    sig = {n: ptrs.get(n, "constexpr" if n in const else "i32") for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if n in ptrs or n in _SPECIALIZED}
    src = ASTSource(kernel, sig, constexprs={(names.index(k),): v for k, v in const.items()}, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    path = "/tmp/sass_count.cubin"
    with open(path, "wb") as fh:
        fh.write(compiled.asm["cubin"])
    tool = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    return subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout


def loop_counts(text: str) -> collections.Counter:
    """Opcodes of the main loop: the body of the backward branch that spans the most instructions."""
    instrs = [(int(m.group(1), 16), m.group(2), line) for line in text.splitlines() if (m := _INSTR.match(line))]
    best = (0, 0)
    for addr, op, line in instrs:
        b = _BRANCH.search(line)
        if op == "BRA" and b and int(b.group(1), 16) < addr and addr - int(b.group(1), 16) > best[1] - best[0]:
            best = (int(b.group(1), 16), addr)
    return collections.Counter(op for addr, op, _ in instrs if best[0] <= addr <= best[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernels", nargs="*", default=list(KERNELS))
    ap.add_argument("--dump", default=None, help="write each kernel's SASS to DIR/NAME.sass")
    args = ap.parse_args()
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
    for name in args.kernels:
        kernel, ptrs, const, options, values = KERNELS[name]
        text = sass(kernel, ptrs, const, options)
        if args.dump:
            with open(os.path.join(args.dump, f"{name}.sass"), "w") as fh:
                fh.write(text)
        counts = loop_counts(text)
        threads = 32 * options["num_warps"]
        total = sum(counts.values())
        print(f"{name:14s} loop {total:4d} instructions a thread = {total * threads / values:.2f} a weight value; "
              + ", ".join(f"{op} {n}" for op, n in counts.most_common(8)))


if __name__ == "__main__":
    main()
