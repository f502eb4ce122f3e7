"""deepinfer-adapters: DeepSeek-V4.1-Flash and V4-Flash in PyTorch, one model for our
standalone engine, vLLM and SGLang.

    from deepinfer_adapters import LLM, SamplingParams
    LLM().generate(["Hello"], SamplingParams(temperature=0, max_tokens=16))

The public names are imported lazily, so ``import deepinfer_adapters`` stays cheap
and never pulls in a host (vLLM, SGLang) or a GPU stack.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "LLM": "deepinfer_adapters.standalone",
    "LLMEngine": "deepinfer_adapters.standalone",
    "EngineConfig": "deepinfer_adapters.standalone",
    "RequestOutput": "deepinfer_adapters.standalone",
    "SamplingParams": "deepinfer_adapters.decoding.sampling_params",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'deepinfer_adapters' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
