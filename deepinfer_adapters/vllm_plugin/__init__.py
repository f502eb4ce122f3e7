"""vLLM plugin: ``vllm.general_plugins`` entry point ``deepinfer_adapters``.

``register()`` runs in every vLLM process (API server / LLM process, engine core,
workers, the registry's inspection subprocess). It is idempotent, imports only
vLLM's registries and op classes (no model code, no device work), registers lazy
"module:Class" model targets and our custom ops (``register_oot``, custom_ops.py);
importing ``deepinfer_adapters`` never imports vLLM.
"""

from __future__ import annotations

import os

LOGGER_NAME = "vllm.plugins.deepinfer_adapters"  # under vLLM's logger: shown with vLLM's logging setup

# architecture name in config.json -> our vLLM model class (lazy "module:Class")
MODELS: dict[str, str] = {
    "DeepseekV41ForCausalLM": "deepinfer_adapters.vllm_plugin.model:DeepseekV41ForCausalLM",
    "DeepseekV4ForCausalLM": "deepinfer_adapters.vllm_plugin.model:DeepseekV4ForCausalLM",
}
# documented in docs/vllm.md: each register() call appends "<pid> <process name>" to this file
PID_FILE_ENV = "DEEPINFER_VLLM_REGISTER_LOG"

_registered = False


def _record_call() -> None:
    path = os.environ.get(PID_FILE_ENV)
    if path:
        import multiprocessing

        with open(path, "a") as fh:
            fh.write(f"{os.getpid()} {multiprocessing.current_process().name}\n")


def register() -> None:
    global _registered
    _record_call()
    if _registered:
        return
    from vllm import ModelRegistry

    for arch, target in MODELS.items():
        ModelRegistry.register_model(arch, target)  # last writer wins: replaces vLLM's in-tree class
    from deepinfer_adapters.vllm_plugin.config_hook import install_config_hooks

    install_config_hooks(MODELS)
    ops = _register_custom_ops()
    from vllm.logger import init_logger

    _registered = True
    init_logger(LOGGER_NAME).info(
        "deepinfer_adapters: registered %s (overriding vLLM's in-tree classes of the same names); custom ops %s",
        ", ".join(f"{a} -> {t}" for a, t in MODELS.items()), ", ".join(ops))


def _register_custom_ops() -> list[str]:
    """register_oot our mHC ops under vLLM's in-tree class names (see custom_ops.py); importing
    vLLM's op module does no device work. Returns "InTree -> Ours" for the log line."""
    from vllm.model_executor.custom_op import op_registry_oot

    from deepinfer_adapters.vllm_plugin.custom_ops import OOT_OPS

    done = []
    for in_tree, ours in OOT_OPS.items():
        if op_registry_oot.get(in_tree.__name__) is not ours:  # register_oot refuses a second entry
            in_tree.register_oot(ours)
        done.append(f"{in_tree.__name__} -> {ours.__name__}")
    return done
