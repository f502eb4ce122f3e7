"""vLLM's weight stream -> the dense official-name dict our models load.

vLLM's default loader yields the checkpoint's tensors as stored (official names,
FP8/FP4 payloads with their ``.scale`` partners). We check the names against the
tensor contract (checkpoint_spec.expected_tensors), dequantize each pair exactly
as ``weights.load_checkpoint`` does, and hand the dense dict to the model's own
``load_weights``; official names are mapped to parameter names there
(``base.module_name``). Every mismatch is a ``CheckpointError`` naming the tensor.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from deepinfer_adapters.config import ModelConfig
from deepinfer_adapters.errors import CheckpointError
from deepinfer_adapters.model_impl.checkpoint_spec import expected_tensors
from deepinfer_adapters.model_impl.weights import check_complete, dequantize_tensor


def dense_from_stream(weights: Iterable[tuple[str, torch.Tensor]], cfg: ModelConfig,
                      dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    expected = expected_tensors(cfg)
    raw: dict[str, torch.Tensor] = {}
    for name, tensor in weights:
        if name not in expected:
            raise CheckpointError(f"unexpected tensor {name!r} in the checkpoint: no such tensor for this "
                                  f"{cfg.arch} config", tensor=name)
        spec = expected[name]
        if tuple(tensor.shape) != tuple(spec.shape):
            raise CheckpointError(f"tensor {name!r} has the wrong shape: expected {list(spec.shape)}, found "
                                  f"{list(tensor.shape)}", tensor=name)
        raw[name] = tensor
    check_complete(expected, raw)
    dense: dict[str, torch.Tensor] = {}
    for name, tensor in raw.items():
        spec = expected[name]
        if spec.kind in ("plain", "hc"):
            dense[name] = tensor
        elif spec.scale_for is None:  # a quantized weight; its scale is consumed with it
            scale = raw[f"{name.removesuffix('.weight')}.scale"]
            dense[name] = dequantize_tensor(spec.kind, tensor, scale, cfg, dtype)
    return dense

