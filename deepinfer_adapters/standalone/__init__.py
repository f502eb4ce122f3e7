"""The standalone engine: offline generation without vLLM or SGLang (docs/engine.md).

    from deepinfer_adapters.standalone import LLM, SamplingParams
    LLM().generate("Hello", SamplingParams(temperature=0, max_tokens=16))
"""

from deepinfer_adapters.decoding.sampling_params import SamplingParams, SamplingParamsError
from deepinfer_adapters.standalone.cache_manager import CacheUsage
from deepinfer_adapters.standalone.config import EngineConfig
from deepinfer_adapters.standalone.engine import LLMEngine
from deepinfer_adapters.standalone.llm import DEFAULT_MODEL, LLM, PRESETS
from deepinfer_adapters.standalone.outputs import RequestMetrics, RequestOutput
from deepinfer_adapters.standalone.request import RequestError

__all__ = ["LLM", "LLMEngine", "EngineConfig", "SamplingParams", "SamplingParamsError", "RequestOutput",
           "RequestMetrics", "RequestError", "CacheUsage", "DEFAULT_MODEL", "PRESETS"]
