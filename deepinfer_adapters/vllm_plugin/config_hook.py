"""Per-architecture config hook (vLLM's ``MODELS_CONFIG_MAP``), run while vLLM builds its config.

It runs in the process that builds the engine config, before any worker starts,
so a checkpoint that is not a V4/V4.1 model or lacks a tensor fails there with
our typed error (ConfigError / CheckpointError) rather than deep inside a worker.
It also turns prefix caching off: a request's fixed state lives in its first
vLLM block, which must never be shared between requests; and it routes the
``dspark`` speculative method to our drafter (vllm_plugin/dspark.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger("vllm.plugins.deepinfer_adapters")  # under vLLM's logger: shown with its handlers


def _check_checkpoint(model: str, arch_name: str) -> None:
    from deepinfer_adapters.model_impl.weights import validate_checkpoint
    from deepinfer_adapters.vllm_plugin.model import checkpoint_config

    path = Path(model)
    if not path.is_dir():  # a hub id: the worker validates after download
        return
    cfg = checkpoint_config(path, arch_name, arch_name == "DeepseekV41ForCausalLM")
    validate_checkpoint(path, cfg)


def _drop_quantization(model_config) -> None:
    """Our model dequantizes the official FP8/FP4 tensors itself (weights.py); vLLM's
    quantization config would only reject --dtype float32 and build layers we never use."""
    for c in {id(x): x for x in (model_config.hf_config, model_config.hf_text_config)}.values():
        if getattr(c, "quantization_config", None) is not None:
            try:
                delattr(c, "quantization_config")
            except AttributeError:
                c.quantization_config = None
    arch_config = getattr(model_config, "model_arch_config", None)
    if arch_config is not None and getattr(arch_config, "quantization_config", None) is not None:
        arch_config.quantization_config = None
    model_config.quantization = None


def install_config_hooks(models: dict[str, str]) -> None:
    from vllm.model_executor.models import config as model_configs

    class DeepinferConfigHook(model_configs.VerifyAndUpdateConfig):
        @staticmethod
        def verify_and_update_model_config(model_config) -> None:
            arch = model_config.architecture
            _check_checkpoint(model_config.model, arch)
            _drop_quantization(model_config)

        @staticmethod
        def verify_and_update_config(vllm_config) -> None:
            if vllm_config.cache_config.enable_prefix_caching:
                logger.info("deepinfer_adapters: prefix caching disabled (per-request state lives in the "
                            "request's first KV block)")
                vllm_config.cache_config.enable_prefix_caching = False
            spec = vllm_config.speculative_config
            if spec is not None and spec.method == "dspark":
                from deepinfer_adapters.vllm_plugin.dspark import route_dspark_to_our_proposer

                route_dspark_to_our_proposer(vllm_config)
                logger.info("deepinfer_adapters: speculative method dspark runs our DSpark drafter "
                            "(vLLM custom_class proposer)")

    for arch in models:
        model_configs.MODELS_CONFIG_MAP[arch] = DeepinferConfigHook
