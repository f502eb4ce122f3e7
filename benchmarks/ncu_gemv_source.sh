#!/bin/bash
# Nsight Compute's per-instruction view (SASS, warp-stall samples) of one Gluon decode GEMV launch at M = 1
# (session 23: wq_b takes ~17 us from DRAM and from L2 alike, so something other than its bytes bounds it).
# Usage on the GPU machine: bash benchmarks/ncu_gemv_source.sh LINEAR OUT_DIR
set -u
linear=${1:-wq_b}; out=${2:-/tmp}; tag=$linear
export PYTHONPATH=$PWD:${PYTHONPATH:-}
cat > /tmp/one_gemv.py <<PY
import torch
from benchmarks.bench_decode_gemv import BLOCK, LINEARS, random_weight
from deepinfer_adapters.kernels import gluon_gemv
g = torch.Generator(device="cuda").manual_seed(0)
N, K = LINEARS["$linear"]
w = random_weight(N, K, g)
x = torch.randn(1, K, device="cuda", generator=g).bfloat16()
for _ in range(5):
    gluon_gemv.fp8_linear(x, *w, BLOCK, 32)
torch.cuda.synchronize()
PY
ncu --clock-control none --kernel-name regex:fp8_gemv --launch-skip 3 --launch-count 1 --section WarpStateStats \
  --section SourceCounters --page source --print-source sass --csv python /tmp/one_gemv.py \
  > "$out/ncu_gemv_source_$tag.csv" 2> "$out/ncu_gemv_source_$tag.err"
ncu --clock-control none --kernel-name regex:fp8_gemv --launch-skip 3 --launch-count 1 --section WarpStateStats \
  --section SpeedOfLight --section SchedulerStats python /tmp/one_gemv.py > "$out/ncu_gemv_details_$tag.txt" 2>&1
