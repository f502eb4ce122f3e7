"""The one attention-like layer through which vLLM sizes, allocates and binds our state.

``DeepinferStateLayer`` is an ``AttentionLayerBase``: the model runner asks it
for a ``KVCacheSpec`` (a ``FullAttentionSpec`` whose page is the byte layout of
``state_cache.PageLayout``), allocates ``num_blocks`` such pages from the KV
cache budget, binds them with ``bind_kv_cache`` and, every step, builds its
metadata with ``StepMetadataBuilder``: just vLLM's ``CommonAttentionMetadata``
(query_start_loc, seq_lens, block table), which the model wrapper turns into a
``ForwardBatch`` and a bound ``VllmStateCache``.
"""

from __future__ import annotations

import torch
from torch import nn

from vllm.config import VllmConfig, get_current_vllm_config
from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
from vllm.v1.attention.backend import (AttentionBackend, AttentionImplBase, AttentionMetadataBuilder,
                                       CommonAttentionMetadata)
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheSpec

from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.model_impl.state import StateSpec
from deepinfer_adapters.vllm_plugin.state_cache import PageLayout, VllmStateCache, check_block_size


class StepMetadataBuilder(AttentionMetadataBuilder[CommonAttentionMetadata]):
    """Hands the model vLLM's common per-step metadata unchanged."""

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> CommonAttentionMetadata:
        return common_attn_metadata


class _NoImpl(AttentionImplBase):  # the model runs its own attention; vLLM never calls this
    def __init__(self, *args, **kwargs) -> None:
        pass


class DeepinferStateBackend(AttentionBackend):
    supported_dtypes = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes = ["auto"]
    forward_includes_kv_cache_update = True

    @staticmethod
    def get_name() -> str:
        return "DEEPINFER_STATE"

    @staticmethod
    def get_impl_cls():
        return _NoImpl

    @staticmethod
    def get_builder_cls():
        return StepMetadataBuilder

    @classmethod
    def supports_head_size(cls, head_size: int) -> bool:
        return True


class DeepinferStateLayer(nn.Module, AttentionLayerBase):
    """Declares the whole model's state (every layer's rows and fixed fields) as one cache."""

    def __init__(self, spec: StateSpec, prefix: str, vllm_config: VllmConfig | None = None) -> None:
        super().__init__()
        vllm_config = vllm_config or get_current_vllm_config()
        self.spec, self.layer_name = spec, prefix
        self.block_size = vllm_config.cache_config.block_size
        try:
            check_block_size(spec, self.block_size)
        except ValueError as exc:
            raise ConfigError(str(exc), "block_size") from exc
        self.layout = PageLayout.build(spec, self.block_size)
        # bytes of one token slot in the FullAttentionSpec view of a page (K + V of one uint8 "head")
        self.head_size = -(-self.layout.page_bytes // (2 * self.block_size))
        self.kv_cache: torch.Tensor | list = torch.tensor([])
        self.num_heads = 0
        ctx = vllm_config.compilation_config.static_forward_context
        if prefix in ctx:
            raise ValueError(f"duplicate layer name {prefix!r}")
        ctx[prefix] = self

    def get_attn_backend(self) -> type[AttentionBackend]:
        return DeepinferStateBackend

    def get_kv_cache_spec(self, vllm_config: VllmConfig) -> KVCacheSpec:
        return FullAttentionSpec(block_size=self.block_size, num_kv_heads=1, head_size=self.head_size,
                                 dtype=torch.uint8)

    def state_cache(self) -> VllmStateCache:
        kv = self.kv_cache
        if isinstance(kv, list):  # older runners bind one tensor per virtual engine
            kv = kv[0]
        if kv.numel() == 0:
            raise RuntimeError("vLLM has not bound the state cache yet")
        num_blocks = kv.shape[0]
        pages = torch.as_strided(kv.view(torch.uint8) if kv.dtype != torch.uint8 else kv,
                                 (num_blocks, self.layout.page_bytes), (kv.stride(0) * kv.element_size(), 1))
        return VllmStateCache(self.spec, self.layout, pages)
