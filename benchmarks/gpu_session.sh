#!/usr/bin/env bash
# One device call (< 10 min on the H200) that checks and times what is pending on the GPU.
# Usage from the repo root, with the wheels of ../shared/reference/gpu.md in .whl/ (carry .whl):
#   bash benchmarks/gpu_session.sh            # tests, then the real-width benchmark
# Results land in $OUT (the device tool brings them back). Summaries are printed last.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD:/tmp/site
# 1. GPU parity and invariance tests (all of tests/gpu: ~2.5 min)
timeout 240 python -m pytest -q tests/gpu -p no:cacheprovider -s > "$OUT/gpu_tests.log" 2>&1
echo "tests/gpu: $(tail -1 "$OUT/gpu_tests.log")"
grep -hE "REPORT (flashmla|index_scores|model)|FAILED|Error|passed|failed" "$OUT/gpu_tests.log" | head -40
# 2. reduced V4.1-Flash at real widths: decode (graphs) and prefill, next to the floors (~2.5 min)
timeout 200 python benchmarks/bench_real_width.py --out "$OUT" --batches 1 8 32 128 --ref-batches 1 \
  --no-prefill-ref --large-m-paths bf16_cublas --moe-paths bf16 --reps 3 --prefill-reps 2 \
  --prefill-backends sparse_attn=flashmla index_scores=triton sparse_attn=flashmla,index_scores=triton \
  > "$OUT/real_width.log" 2>&1
sed -n '/^SUMMARY/,$p' "$OUT/real_width.log"
