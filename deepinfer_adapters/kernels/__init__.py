"""Kernel dispatch. Every op has a pure-torch reference (``kernels.reference``);
faster backends (Triton, TileLang, FlashMLA, ...) register against the same
signature and are picked by ``supports`` (device, dtype, availability), highest
priority first. ``use_backend(op, name)`` pins one, e.g. in parity tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deepinfer_adapters.kernels import reference, reference_fp8


@dataclass(frozen=True)
class Backend:
    name: str
    fn: Callable[..., Any]
    supports: Callable[..., bool]
    priority: int


_BACKENDS: dict[str, list[Backend]] = {}
_PINNED: dict[str, str] = {}


def register(op: str, name: str, fn: Callable[..., Any], *, supports: Callable[..., bool] = lambda *a, **k: True,
             priority: int = 0) -> None:
    backends = [b for b in _BACKENDS.get(op, []) if b.name != name]
    backends.append(Backend(name, fn, supports, priority))
    _BACKENDS[op] = sorted(backends, key=lambda b: -b.priority)


def use_backend(op: str, name: str | None) -> None:
    """Pin ``op`` to backend ``name`` (None: automatic choice again)."""
    if name is None:
        _PINNED.pop(op, None)
        return
    if name not in {b.name for b in _BACKENDS.get(op, [])}:
        raise ValueError(f"kernel op {op!r} has no backend {name!r}; have {[b.name for b in _BACKENDS.get(op, [])]}")
    _PINNED[op] = name


def backends(op: str) -> list[str]:
    return [b.name for b in _BACKENDS.get(op, [])]


def _pick(op: str, args: tuple, kwargs: dict) -> Backend:
    pinned = _PINNED.get(op)
    for b in _BACKENDS[op]:
        if (pinned is None and b.supports(*args, **kwargs)) or b.name == pinned:
            return b
    raise RuntimeError(f"no backend of kernel op {op!r} supports these inputs")


def call(op: str, *args: Any, **kwargs: Any) -> Any:
    return _pick(op, args, kwargs).fn(*args, **kwargs)


def chosen(op: str, *args: Any, **kwargs: Any) -> str:
    """The name of the backend ``call`` would run for these arguments."""
    return _pick(op, args, kwargs).name


for _module in (reference, reference_fp8):
    for _op in _module.OPS:
        register(_op, "torch", getattr(_module, _op), priority=-100)


def linear(*args: Any, **kwargs: Any) -> Any:
    return call("linear", *args, **kwargs)


def rms_norm(*args: Any, **kwargs: Any) -> Any:
    return call("rms_norm", *args, **kwargs)


def rms_norm_in_dtype(*args: Any, **kwargs: Any) -> Any:
    return call("rms_norm_in_dtype", *args, **kwargs)


def apply_rope(*args: Any, **kwargs: Any) -> Any:
    return call("apply_rope", *args, **kwargs)


def sparse_attn(*args: Any, **kwargs: Any) -> Any:
    return call("sparse_attn", *args, **kwargs)


def sparse_attn_inverse_rope(*args: Any, **kwargs: Any) -> Any:
    return call("sparse_attn_inverse_rope", *args, **kwargs)


def _composed_sparse_attn_inverse_rope(q: Any, kv: Any, sink: Any, idx: Any, scale: float, freqs: Any,
                                       probs_bf16: bool = True) -> Any:
    """``sparse_attn``, then its output's last dims rotated back (``apply_rope`` inverse, in place): the output
    path's first step. A backend may fuse the two (triton_sparse_attn: in split-K's merge)."""
    return apply_rope(sparse_attn(q, kv, sink, idx, scale, probs_bf16), freqs, inverse=True, overwrite=True)


register("sparse_attn_inverse_rope", "composed", _composed_sparse_attn_inverse_rope, priority=0)


def hc_split_sinkhorn(*args: Any, **kwargs: Any) -> Any:
    return call("hc_split_sinkhorn", *args, **kwargs)


def hc_mix_logits(*args: Any, **kwargs: Any) -> Any:
    return call("hc_mix_logits", *args, **kwargs)


def hc_mixes(*args: Any, **kwargs: Any) -> Any:
    return call("hc_mixes", *args, **kwargs)


def hc_pre(*args: Any, **kwargs: Any) -> Any:
    return call("hc_pre", *args, **kwargs)


def hc_pre_norm(*args: Any, **kwargs: Any) -> Any:
    return call("hc_pre_norm", *args, **kwargs)


def hc_post(*args: Any, **kwargs: Any) -> Any:
    return call("hc_post", *args, **kwargs)


def hc_post_pre_norm(*args: Any, **kwargs: Any) -> Any:
    return call("hc_post_pre_norm", *args, **kwargs)


def _composed_hc_post_pre_norm(y: Any, residual: Any, post: Any, comb: Any, pre: Any, weight: Any, eps: float) -> Any:
    """``hc_post_pre_norm`` as its two ops, each on its own backend: where no backend takes both in one launch."""
    x = hc_post(y, residual, post, comb)
    return x, hc_pre_norm(x, pre, weight, eps)


register("hc_post_pre_norm", "composed", _composed_hc_post_pre_norm, priority=0)


def index_scores(*args: Any, **kwargs: Any) -> Any:
    return call("index_scores", *args, **kwargs)


def topk_lowest_index(*args: Any, **kwargs: Any) -> Any:
    return call("topk_lowest_index", *args, **kwargs)


def topk_torch_order(*args: Any, **kwargs: Any) -> Any:
    return call("topk_torch_order", *args, **kwargs)


def softmax_pool(*args: Any, **kwargs: Any) -> Any:
    return call("softmax_pool", *args, **kwargs)


def selected_keys(*args: Any, **kwargs: Any) -> Any:
    return call("selected_keys", *args, **kwargs)


def ring_pool(*args: Any, **kwargs: Any) -> Any:
    return call("ring_pool", *args, **kwargs)


def store_rows(*args: Any, **kwargs: Any) -> Any:
    return call("store_rows", *args, **kwargs)


def window_store_gather(*args: Any, **kwargs: Any) -> Any:
    return call("window_store_gather", *args, **kwargs)


def window_slots(*args: Any, **kwargs: Any) -> Any:
    return call("window_slots", *args, **kwargs)


def _composed_ring_pool(kv: Any, score: Any, kv_ring: Any, score_ring: Any, at: Any, group: Any,
                        out_dtype: Any = None) -> Any:
    """``ring_pool`` as torch's row copies and gathers around the ``softmax_pool`` op (its own backend): where no
    backend takes the whole step in one launch."""
    pooled = softmax_pool(*reference.ring_rows(kv, score, kv_ring, score_ring, at, group))
    return pooled if out_dtype is None else pooled.to(out_dtype)


register("ring_pool", "composed", _composed_ring_pool, priority=0)


def compressor_v4_gather(*args: Any, **kwargs: Any) -> Any:
    return call("compressor_v4_gather", *args, **kwargs)


def swiglu(*args: Any, **kwargs: Any) -> Any:
    return call("swiglu", *args, **kwargs)


def moe_route(*args: Any, **kwargs: Any) -> Any:
    return call("moe_route", *args, **kwargs)


def hadamard(*args: Any, **kwargs: Any) -> Any:
    return call("hadamard", *args, **kwargs)


def engram_gate(*args: Any, **kwargs: Any) -> Any:
    return call("engram_gate", *args, **kwargs)


def fp8_roundtrip(*args: Any, **kwargs: Any) -> Any:
    return call("fp8_roundtrip", *args, **kwargs)


def fp4_roundtrip_e8m0(*args: Any, **kwargs: Any) -> Any:
    return call("fp4_roundtrip_e8m0", *args, **kwargs)


def fp4_roundtrip_e4m3(*args: Any, **kwargs: Any) -> Any:
    return call("fp4_roundtrip_e4m3", *args, **kwargs)


def fp8_linear(*args: Any, **kwargs: Any) -> Any:
    return call("fp8_linear", *args, **kwargs)


def fp8_grouped_linear(*args: Any, **kwargs: Any) -> Any:
    return call("fp8_grouped_linear", *args, **kwargs)


def moe_experts(*args: Any, **kwargs: Any) -> Any:
    return call("moe_experts", *args, **kwargs)


# Faster backends register themselves on import; each imports its GPU stack lazily.
from deepinfer_adapters.kernels import triton_sparse_attn  # noqa: E402,F401
from deepinfer_adapters.kernels import triton_fp8_gemm, triton_moe  # noqa: E402,F401
from deepinfer_adapters.kernels import triton_hc, triton_norm_rope  # noqa: E402,F401
from deepinfer_adapters.kernels import cublas_linear, flashmla_sparse, triton_index  # noqa: E402,F401
from deepinfer_adapters.kernels import gluon_gemv, gluon_topk  # noqa: E402,F401
from deepinfer_adapters.kernels import triton_linear, triton_quant, triton_route, triton_topk  # noqa: E402,F401
from deepinfer_adapters.kernels import triton_engram, triton_hadamard  # noqa: E402,F401
from deepinfer_adapters.kernels import triton_compressor, triton_keys, triton_pool  # noqa: E402,F401
from deepinfer_adapters.kernels import triton_window  # noqa: E402,F401
from deepinfer_adapters.kernels import triton_store  # noqa: E402,F401
from deepinfer_adapters.kernels import triton_hc_post_norm  # noqa: E402,F401
