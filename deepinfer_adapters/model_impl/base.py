"""What both model classes share: loading official checkpoints, state declaration, outputs."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import torch
from torch import nn

from deepinfer_adapters.config import ModelConfig, load_config
from deepinfer_adapters.errors import CheckpointError
from deepinfer_adapters.kernels.invariance import batch_invariant
from deepinfer_adapters.model_impl import native_format
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.state import DenseStateCache, StateSpec
from deepinfer_adapters.model_impl.weights import load_checkpoint

# hyper-connection tensors are flat names on a block; here they live in HyperConnection submodules
_HC_NAME = re.compile(r"(^|\.)hc_(attn|ffn|head)_(fn|base|scale)$")


def module_name(official: str) -> str:
    """Official checkpoint name -> this package's parameter name."""
    return _HC_NAME.sub(r"\1hc_\2.\3", official)


@dataclass
class ModelOutput:
    logits: torch.Tensor  # [R, vocab] fp32 for the batch's logits rows
    hidden: torch.Tensor | None = None  # model-specific extras (e.g. draft-head inputs)
    rows: torch.Tensor | None = None  # batch row of each logits row when it is not the requested set


@dataclass
class DraftOutput:
    """What a draft head proposes for each sequence."""

    tokens: torch.Tensor  # [B, n] drafted tokens
    logits: torch.Tensor  # [B, n, vocab] fp32 (DSpark: Markov bias included)
    confidence: torch.Tensor  # [B, n] acceptance-probability logits (sigmoid -> probability)


def in_numerics_scope(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a model method under its numerics' batch-invariance mode (forward gets it
    through ``__call__``; draft heads decorate their entry points)."""

    @functools.wraps(method)
    def wrapper(self: "CausalLMBase", *args: Any, **kwargs: Any) -> Any:
        with batch_invariant(self.numerics.batch_invariant):
            return method(self, *args, **kwargs)

    return wrapper


class CausalLMBase(nn.Module):
    cfg: ModelConfig
    numerics: Numerics

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with batch_invariant(self.numerics.batch_invariant):
            return super().__call__(*args, **kwargs)

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, numerics: Numerics | None = None, *,
                        device: str | torch.device = "cpu", progress: bool = True, weights: str = "dense",
                        **model_kwargs: Any):
        """``weights``: "dense" (float64 dequantized, the reference path), "fp8" (as stored,
        for the GPU kernels, FP4 experts converted to E4M3) or "fp4" (FP4 experts packed as
        stored too); model_impl/native_format.py. ``model_kwargs`` go to the model class
        (e.g. ``with_draft=False``)."""
        cfg = load_config(model_dir)
        native_format.check_format(weights)
        if weights in ("fp8", "fp4"):
            block = native_format.PACKED_FP4 if weights == "fp4" else native_format.EXPERT_BLOCK
            return native_format.load(cls, cfg, Path(model_dir), numerics or Numerics.reference(), device=device,
                                      progress=progress, expert_block=block, **model_kwargs)
        model = cls(cfg, numerics or Numerics.reference(), model_dir=Path(model_dir), **model_kwargs)
        model.load_weights(load_checkpoint(model_dir, cfg, dequantize=torch.float32, progress=progress))
        return model.to(device)

    def load_weights(self, dense: dict[str, torch.Tensor]) -> None:
        """Copy dense (dequantized) official tensors in; every parameter must be filled."""
        params = dict(self.named_parameters())
        params.update(dict(self.named_buffers()))
        unfilled = set(k for k in params if not self.is_derived(k))
        for official, tensor in dense.items():
            name = module_name(official)
            if name not in params:
                if self.ignores(official):
                    continue
                raise CheckpointError(f"checkpoint tensor {official!r} has no place in {type(self).__name__}",
                                      tensor=official)
            target = params[name]
            if tuple(target.shape) != tuple(tensor.shape):
                raise CheckpointError(f"tensor {official!r}: model expects {list(target.shape)}, "
                                      f"checkpoint has {list(tensor.shape)}", tensor=official)
            with torch.no_grad():
                target.copy_(tensor.to(target.dtype))
            unfilled.discard(name)
        if unfilled:
            raise CheckpointError(f"parameters not filled by the checkpoint: {sorted(unfilled)[:5]}",
                                  tensor=sorted(unfilled)[0])

    def is_derived(self, name: str) -> bool:
        """Buffers computed at construction rather than loaded."""
        return False

    def ignores(self, official: str) -> bool:
        """Checkpoint tensors this model deliberately does not use (e.g. the vision tower)."""
        return False

    def state_spec(self, rewind: int = 0) -> StateSpec:
        """The per-sequence state; ``rewind`` > 0 sizes it so a sequence can restart up to that
        many positions before its last processed one (speculative decoding)."""
        raise NotImplementedError

    def new_state(self, num_slots: int, max_len: int, rewind: int = 0) -> DenseStateCache:
        device = next(self.parameters()).device
        return DenseStateCache(self.state_spec(rewind), num_slots, max_len, device=device)
