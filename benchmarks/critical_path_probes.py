"""Critical-path probes for bench_real_width's A/Bs (``--ab probe_NAME:B``): each removes or shrinks one kind of
work in the decode step so that the A/B's step time says how much of that work sits on the step's critical path --
the most a fusion that removes it could gain. The probed step computes wrong values (its logits are not compared);
it is timed only. A probe is not a configuration: nothing here is used outside the benchmark.

- ``probe_split_sum``: the K-split partials' sum (``sum_splits``, ~47 launches a B=1 step) returns an
  unwritten tensor, no launch;
- ``probe_act_quant``: the dense Gluon GEMVs' activation quantization (``act_quant`` before each, ~46 launches)
  returns unwritten tensors, no launch;
- ``probe_sinkhorn1``: the hyper-connection mixes with one Sinkhorn pass instead of the model's 20;
- ``probe_route``: the MoE route (one launch a MoE layer) returns fixed experts and weights, no launch;
- ``probe_topk``: the index top-k (the selections of the compressed rows) returns fixed rows, no launch;
- ``probe_gemv_NAME``: the dense Gluon GEMVs of one weight shape at V4.1's widths (wq_a+wkv, wq_b, wo_b, the shared
  expert's two; ``all``: every dense one) return unwritten outputs (their act_quant still runs), no launch;
- ``probe_wo_a``: the grouped wo_a returns an unwritten output, no launch;
- ``probe_attn``: the sparse attention returns an unwritten output, no launch;
- ``probe_pairs``: one token's routed experts' GEMVs (``pair_gemm``, w13 and w2) return unwritten outputs;
- ``probe_index_scores``, ``probe_hc_post``, ``probe_rope``: those ops return unwritten outputs (RoPE: its input);
- ``probe_head``: the LM head (the ``linear`` of the vocabulary's rows) returns an unwritten output;
- ``probe_rms_norm`` (returns its input), ``probe_hc_pre_norm``, ``probe_swiglu_quant`` (one token's experts'
  activation between w13 and w2), ``probe_window`` (the decode window's store + gather), ``probe_selected_keys``
  (a compressed layer's keys and index: fixed, valid index rows): unwritten outputs, no launch (session 26;
  run in session 27);
- ``probe_engram_gate`` (the Engram layer's gate returns its input streams), ``probe_roundtrips`` (the cache's FP8 /
  FP4 round trips return their input), ``probe_bf16_linears`` (the ``linear``s of a bf16 x for a bf16 result --
  V4.1's ratio-1 compressor, the indexer's weights_proj / wk -- return unwritten outputs), ``probe_ring_pool`` (a
  ratio-2 compressor's decode ring and pooling: an unwritten output): no launch (session 27: prepared, not yet run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import gluon_gemv, triton_fp8_gemm, triton_hc, triton_linear, triton_moe

Made = TypeVar("Made")
_CONSTANTS: dict[tuple, object] = {}


def _constant(key: tuple, make: Callable[[], Made]) -> Made:
    """Tensors made once (the graph's warm-up runs before its capture, so a capture finds them made)."""
    if key not in _CONSTANTS:
        _CONSTANTS[key] = make()
    return _CONSTANTS[key]


def _unsummed(parts: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(parts.shape[1:], device=parts.device, dtype=out_dtype)


def _unquantized(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    M, K = x.shape
    return (torch.empty(M, K, device=x.device, dtype=torch.float8_e4m3fn),
            torch.empty(M, K // block, device=x.device, dtype=torch.float32))


def _module_patch(name: str, fn: Callable, modules) -> tuple[Callable[[], None], Callable[[], None]]:
    saved = {m: getattr(m, name) for m in modules}
    return (lambda: [setattr(m, name, fn) for m in modules],
            lambda: [setattr(m, name, f) for m, f in saved.items()])


def _backend_probe(op: str, name: str, fn: Callable) -> tuple[Callable[[], None], Callable[[], None]]:
    kernels.register(op, name, fn, supports=lambda *a, **k: False, priority=-100)  # only where pinned
    return lambda: kernels.use_backend(op, name), lambda: kernels.use_backend(op, None)


def _fixed_route(logits, bias, topk, renormalize, eps, scale, temp=1.0, ids=None):
    T = logits.shape[0]
    return _constant(("route", T, topk, logits.device), lambda: (
        torch.full((T, topk), 1.0 / topk, device=logits.device),
        torch.arange(topk, device=logits.device).repeat(T, 1)))


def _fixed_topk(scores: torch.Tensor, k: int):
    lead, m = scores.shape[:-1], scores.shape[-1]
    n = scores.numel() // max(m, 1)
    idx, val = _constant(("topk", n, k, scores.dtype, scores.device), lambda: (
        torch.arange(k, device=scores.device).repeat(n, 1), torch.zeros(n, k, device=scores.device,
                                                                         dtype=scores.dtype)))
    return idx.view(*lead, k), val.view(*lead, k)


def _one_pass_mixes(x, fn, norm_eps, scale, base, hc, iters, eps):
    return triton_hc.hc_mixes(x, fn, norm_eps, scale, base, hc, 1, eps)


GEMV_SHAPES = {"wqa": [(1792, 5120)], "wq_b": [(32768, 1280)], "wo_b": [(5120, 8192)],
               "shared": [(4608, 5120), (5120, 2304)], "all": None}


def _skipped_gemv(shapes):
    real = gluon_gemv.gemv

    def gemv(q, q_scale, weight, scale, out_dtype):
        if shapes is None or tuple(weight.shape) in shapes:
            return torch.empty(q.shape[0], weight.shape[0], device=q.device, dtype=out_dtype)
        return real(q, q_scale, weight, scale, out_dtype)
    return gemv


def _unprojected(x, weight, scale, block, **_):
    T, G, _ = x.shape
    return torch.empty(T, G, weight.shape[0] // G, device=x.device, dtype=x.dtype)


def _unattended(q, *args, **kwargs):
    return torch.empty_like(q)


def _skipped_pairs(q, q_scale, a_rows, experts, weight, scale, block, out_dtype, *, partials=False):
    return torch.empty(experts.numel(), weight.shape[1] * 128, device=q.device, dtype=out_dtype)


def _unscored(q, keys, weights, visible=None):
    return torch.empty(q.shape[0], keys.shape[-2], device=q.device, dtype=q.dtype)  # keys: a tensor or PooledRows


def _unmixed(y, residual, post, comb):
    return torch.empty(residual.shape, device=y.device, dtype=y.dtype)


def _unrotated(x, freqs, inverse=False, overwrite=False):
    return x


HEAD_ROWS = 129280  # V4.1's vocabulary


def _unwritten_linear(x, weight, out_dtype=torch.float32, **kwargs):
    return torch.empty(*x.shape[:-1], weight.shape[0], device=x.device, dtype=out_dtype)


def _linear_probe(name: str, applies: Callable[..., bool]) -> tuple[Callable[[], None], Callable[[], None]]:
    """The ``linear`` calls ``applies(x, weight, out_dtype)`` picks, alone to an unwritten output (first in the
    registry for them while the probe is on); every other ``linear`` call keeps the backend it would have had."""
    on = [False]
    kernels.register("linear", name, _unwritten_linear, priority=1000,
                     supports=lambda x, weight, out_dtype=torch.float32, **k: on[0] and applies(x, weight, out_dtype))
    return lambda: on.__setitem__(0, True), lambda: on.__setitem__(0, False)


def _unnormed(x, weight, eps):
    return x


def _unmixed_norm(x, pre, weight, eps):
    return torch.empty(x.shape[:-2] + x.shape[-1:], device=x.device, dtype=x.dtype)


def _unactivated(h13, route_w, limit, block, *, dequant_to=None):
    R, I = h13.shape[-2], h13.shape[-1] // 2
    if dequant_to is not None:
        return torch.empty(R, I, device=h13.device, dtype=dequant_to), None
    return (torch.empty(R, I, device=h13.device, dtype=torch.float8_e4m3fn),
            torch.empty(R, I // block, device=h13.device, dtype=torch.float32))


def _unwindowed(rows, write_rows, read_rows, kv):
    return torch.empty(read_rows.numel(), kv.shape[-1], device=kv.device, dtype=kv.dtype)


def _fixed_keys(window, window_valid, pool, picked, *_):
    B, W, d = window.shape
    K = W + picked.shape[1]
    index = _constant(("keys", B, K, window.device), lambda: torch.arange(B * K, device=window.device).view(B, K))
    return torch.empty(B, K, d, device=window.device, dtype=window.dtype), index


def _unchanged(x, *args, **kwargs):
    return x


def _unpooled(kv, score, kv_ring, score_ring, at, group, out_dtype=torch.float32):
    return torch.empty(kv.shape, device=kv.device, dtype=out_dtype)


def _several(*switches: tuple[Callable[[], None], Callable[[], None]]) -> tuple[Callable[[], None], Callable[[], None]]:
    return lambda: [on() for on, _ in switches], lambda: [off() for _, off in switches]


PROBES = {
    "probe_split_sum": _module_patch("sum_splits", _unsummed, (gluon_gemv, triton_linear, triton_fp8_gemm)),
    "probe_act_quant": _module_patch("act_quant", _unquantized, (gluon_gemv,)),
    "probe_sinkhorn1": _backend_probe("hc_mixes", "probe_sinkhorn1", _one_pass_mixes),
    "probe_route": _backend_probe("moe_route", "probe_fixed", _fixed_route),
    **{f"probe_topk{'' if op == 'topk_lowest_index' else '_torch'}": _backend_probe(op, "probe_fixed", _fixed_topk)
       for op in ("topk_lowest_index", "topk_torch_order")},
    **{f"probe_gemv_{name}": _module_patch("gemv", _skipped_gemv(shapes), (gluon_gemv,))
       for name, shapes in GEMV_SHAPES.items()},
    "probe_wo_a": _backend_probe("fp8_grouped_linear", "probe_skip", _unprojected),
    "probe_attn": _backend_probe("sparse_attn", "probe_skip", _unattended),
    "probe_pairs": _module_patch("pair_gemm", _skipped_pairs, (gluon_gemv,)),
    "probe_index_scores": _backend_probe("index_scores", "probe_skip", _unscored),
    "probe_hc_post": _backend_probe("hc_post", "probe_skip", _unmixed),
    "probe_rope": _backend_probe("apply_rope", "probe_skip", _unrotated),
    "probe_head": _linear_probe("probe_head", lambda x, weight, out_dtype: weight.shape[0] == HEAD_ROWS),
    "probe_rms_norm": _backend_probe("rms_norm", "probe_skip", _unnormed),
    "probe_hc_pre_norm": _backend_probe("hc_pre_norm", "probe_skip", _unmixed_norm),
    "probe_swiglu_quant": _module_patch("swiglu_quant", _unactivated, (triton_moe,)),
    "probe_window": _backend_probe("window_store_gather", "probe_skip", _unwindowed),
    "probe_selected_keys": _backend_probe("selected_keys", "probe_skip", _fixed_keys),
    "probe_engram_gate": _backend_probe("engram_gate", "probe_skip", _unchanged),
    "probe_roundtrips": _several(*(_backend_probe(op, "probe_skip", _unchanged)
                                   for op in ("fp8_roundtrip", "fp4_roundtrip_e8m0", "fp4_roundtrip_e4m3"))),
    "probe_bf16_linears": _linear_probe("probe_bf16",
                                        lambda x, weight, out_dtype: x.dtype == out_dtype == torch.bfloat16),
    "probe_ring_pool": _backend_probe("ring_pool", "probe_skip", _unpooled),
}
