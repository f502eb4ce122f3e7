"""vLLM plugin: ``vllm.general_plugins`` entry point ``deepinfer_adapters``.

``register()`` runs in every vLLM process (API server / LLM process, engine core,
workers, the registry's inspection subprocess). It is idempotent, imports only
vLLM's registries (no model code, no device work) and registers lazy
"module:Class" targets, so importing ``deepinfer_adapters`` never imports vLLM.
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
    from vllm.logger import init_logger

    _registered = True
    init_logger(LOGGER_NAME).info("deepinfer_adapters: registered %s (overriding vLLM's in-tree classes of the same names)",
                ", ".join(f"{a} -> {t}" for a, t in MODELS.items()))
