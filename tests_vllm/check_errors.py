"""Child process: build vLLM's engine config for bad checkpoints; print each error as one JSON line."""

from __future__ import annotations

import json
import sys


def main() -> None:
    from vllm.engine.arg_utils import EngineArgs

    for path in sys.argv[1:]:
        try:
            EngineArgs(model=path, dtype="float32", enforce_eager=True, max_model_len=256).create_engine_config()
            print(json.dumps({"model": path, "error": None}))
        except Exception as exc:  # noqa: BLE001 - we report whatever vLLM raised
            print(json.dumps({"model": path, "type": type(exc).__name__, "error": str(exc)}))


if __name__ == "__main__":
    main()
