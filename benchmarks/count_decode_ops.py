"""Count the ATen ops (≈ kernel launches) one ``model.decode`` step issues, by op, by layer
and by model source line.

At batch 1 a decode step replayed from a CUDA graph is launch-bound: every small torch op
costs ~1-3 us of GPU time however little it computes. This runs one step of the reduced
V4.1 of benchmarks/bench_real_width.py (7 layers, one per layer role; tiny widths on the
CPU) under a TorchDispatchMode and attributes each op to the innermost model source line
that issued it.

Kernel ops (``deepinfer_adapters.kernels``) whose fast backend takes over on the GPU are
shown as one launch each (``[rms_norm]``, ...), not as the reference's torch ops: on the
CPU the tool assumes the backends the H200 picks for a bf16 decode (``CUDA_BACKENDS``);
on a CUDA device it reads the dispatcher's real choice and counts the torch ops the fast
backends' wrappers issue themselves.

    PYTHONPATH=. python benchmarks/count_decode_ops.py [--device cpu] [--batch 1] [--context 4096] [--arch v4]
        [--sequence layers.3]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter, defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from deepinfer_adapters import kernels
from deepinfer_adapters.config import parse_config
from deepinfer_adapters.kernels import invariance, triton_route
from deepinfer_adapters.model_impl import native_format
from deepinfer_adapters.model_impl.batch import DecodeBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from benchmarks.bench_real_width import fill_random, fill_state, random_hasher, reduced_config

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(kernels.__file__)))
DISPATCH_FILE = os.path.abspath(kernels.__file__)

# Ops that only make a new view or allocate: no kernel launch on the GPU.
NO_LAUNCH = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "slice", "select", "unsqueeze", "squeeze",
    "expand", "permute", "transpose", "t", "unflatten", "flatten", "alias", "detach", "view_as_real",
    "view_as_complex", "split", "split_with_sizes", "unbind", "empty", "empty_strided", "empty_like", "lift_fresh",
    "_local_scalar_dense", "diagonal", "narrow", "chunk", "unfold", "conj", "_conj", "resolve_conj", "resolve_neg",
    "_neg_view", "real", "imag", "new_empty", "new_empty_strided", "sym_size", "sym_stride", "sym_numel", "is_same_size",
}


def _returns_an_input(name: str, args: tuple, out) -> bool:
    """An out-of-place op whose result is one of its inputs (``x.to(x.dtype)``, ``contiguous``
    of a contiguous tensor): nothing runs."""
    if name.endswith("_") or not isinstance(out, torch.Tensor):
        return False
    return any(isinstance(a, torch.Tensor) and a.data_ptr() == out.data_ptr() and a.shape == out.shape
               for a in args)


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def cuda_backend_takes_over(op: str, args: tuple, kwargs: dict) -> bool:
    """Whether a fast backend runs ``op`` for these (CPU) arguments on the H200, bf16 decode:
    every op of benchmarks/bench_real_width.py's OPS, ``linear`` only for a bf16 weight with an fp32 x,
    or a bf16 x and an fp32 result (others run the torch reference there too)."""
    if invariance.enabled():
        return False
    if op == "linear":
        x, weight = args[0], args[1]
        out_dtype = args[2] if len(args) > 2 else kwargs.get("out_dtype", torch.float32)
        fp32_of_x = x.dtype == torch.float32 or (x.dtype == torch.bfloat16 and out_dtype == torch.float32)
        return fp32_of_x and weight.dtype == torch.bfloat16
    if op == "fp8_roundtrip" and len(args) > 2 and args[2] is not None:  # a dims slice: the reference
        return False
    if op == "moe_route":  # not for a gate temperature other than 1
        return triton_route.fits(*args, **kwargs)
    return op in {"rms_norm", "hc_pre_norm", "apply_rope", "sparse_attn", "hc_split_sinkhorn", "hc_mix_logits", "hc_pre",
                  "hc_post", "fp8_linear", "fp8_grouped_linear", "moe_experts", "index_scores",
                  "topk_lowest_index", "topk_torch_order", "softmax_pool", "fp8_roundtrip", "fp4_roundtrip_e8m0",
                  "fp4_roundtrip_e4m3", "swiglu", "engram_gate", "hadamard", "hc_mixes", "compressor_v4_gather",
                  "rms_norm_in_dtype"}


class OpCounter(TorchDispatchMode):
    """Records (op name, layer, call site) for every launching op; kernel ops taken over by a
    fast backend count once, under their own name in brackets."""

    def __init__(self, model: torch.nn.Module, simulate_cuda: bool) -> None:
        super().__init__()
        self.simulate_cuda = simulate_cuda
        self.module_names = {id(m): name for name, m in model.named_modules()}
        self.records: list[tuple[str, str, str]] = []
        self.inside_fast: list[str] = []  # kernel ops being run by a fast backend (simulated)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        out = func(*args, **(kwargs or {}))
        if not self.inside_fast and name not in NO_LAUNCH and not _returns_an_input(name, args, out):
            if name in ("to", "_to_copy"):  # name the conversion: dtype round trips stand out
                name = f"to {_dtype_name(args[0])}->{_dtype_name(out)}"
            self.records.append((name, *self._where()))
        return out

    def kernel_call(self, op: str, *args, **kwargs):
        """Stands in for ``kernels.call`` while counting."""
        backend = kernels._pick(op, args, kwargs)
        fast = cuda_backend_takes_over(op, args, kwargs) if self.simulate_cuda else backend.name != "torch"
        if not fast or self.inside_fast:
            return backend.fn(*args, **kwargs)
        self.records.append((f"[{op}]", *self._where()))
        if not self.simulate_cuda:  # a real fast backend: count its wrapper's torch ops too
            return backend.fn(*args, **kwargs)
        self.inside_fast.append(op)
        try:
            return backend.fn(*args, **kwargs)
        finally:
            self.inside_fast.pop()

    def _where(self) -> tuple[str, str]:
        """(layer, call site): the innermost model module on the stack and the innermost
        line of the package outside the kernel dispatcher."""
        layer, site = "model", None
        frame = sys._getframe(2)
        while frame is not None:
            path = frame.f_code.co_filename
            if path.startswith(PACKAGE_DIR) and os.path.abspath(path) != DISPATCH_FILE:
                if site is None:
                    rel = os.path.relpath(path, PACKAGE_DIR)
                    site = f"{rel}:{frame.f_lineno} {frame.f_code.co_name}"
                owner = frame.f_locals.get("self")
                module = self.module_names.get(id(owner)) if owner is not None else None
                if module is not None and module.startswith("layers.") and layer == "model":
                    layer = ".".join(module.split(".")[:2])
            frame = frame.f_back
        return layer, site or "?"


def build(device: str, batch: int, context: int, arch: str = "v41"):
    if arch == "v4":  # benchmarks/bench_v4_width.py's reduced V4-Flash (4 layers: sliding x2, CSA, HCA)
        from benchmarks import bench_v4_width as v4

        model, cfg = v4.build_ours(v4.reduced_config(tiny=device == "cpu"), device, Numerics.reference())
    else:
        cfg = parse_config(reduced_config(tiny=device == "cpu"))
        model = native_format.build(DeepseekV41ForCausalLM, cfg, Numerics.reference(), device=device,
                                    hasher=random_hasher(cfg, device), with_draft=False)
        fill_random(model, cfg)
    state = model.new_state(batch, context + 8)
    fill_state(state, cfg, torch.Generator(device=device).manual_seed(2))
    ids = torch.randint(3, cfg.vocab_size, (batch,), generator=torch.Generator().manual_seed(batch)).tolist()
    step = DecodeBatch.build(ids, [context] * batch, list(range(batch)), max_len=context + 1, device=device)
    return model, state, step


def count_step(model, state, step, simulate_cuda: bool) -> OpCounter:
    counter = OpCounter(model, simulate_cuda)
    original = kernels.call
    kernels.call = counter.kernel_call
    try:
        with torch.inference_mode(), counter:
            model.decode(step, state)
    finally:
        kernels.call = original
    return counter


def report(counter: OpCounter, top: int, sequence: list[str]) -> None:
    records = counter.records
    for layer in sequence:  # one layer's ops in issue order (a graph timeline's kernels by name)
        print(f"\n{layer} in issue order:")
        for op, _, site in (r for r in records if r[1] == layer):
            print(f"  {op:28s} {site}")
    print(f"launching ops per decode step: {len(records)}")
    by_op = Counter(op for op, _, _ in records)
    print("\nby op:")
    for op, n in by_op.most_common():
        print(f"  {n:6d}  {op}")
    by_layer = defaultdict(Counter)
    for op, layer, _ in records:
        by_layer[layer][op] += 1
    print("\nby layer (total: top ops):")
    for layer in sorted(by_layer, key=lambda s: (s != "model", int(s.split(".")[1]) if "." in s else -1)):
        ops = by_layer[layer]
        print(f"  {layer:10s} {sum(ops.values()):5d}: " + ", ".join(f"{op} {n}" for op, n in ops.most_common(8)))
    by_site = defaultdict(Counter)
    for op, _, site in records:
        by_site[site][op] += 1
    print(f"\ntop {top} call sites (summed over layers):")
    for site, ops in sorted(by_site.items(), key=lambda kv: -sum(kv[1].values()))[:top]:
        print(f"  {sum(ops.values()):5d}  {site}: " + ", ".join(f"{op} {n}" for op, n in ops.most_common()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--arch", choices=("v41", "v4"), default="v41",
                    help="v41: bench_real_width.py's reduced V4.1; v4: bench_v4_width.py's reduced V4-Flash")
    ap.add_argument("--top", type=int, default=40, help="call sites to list")
    ap.add_argument("--sequence", nargs="*", default=[], metavar="LAYER",
                    help="also list these layers' ops in issue order (e.g. layers.3; model: the step's own)")
    ap.add_argument("--reference", action="store_true",
                    help="count every kernel op's torch reference too (what the CPU really runs)")
    args = ap.parse_args()
    model, state, step = build(args.device, args.batch, args.context, args.arch)
    with torch.inference_mode():
        model.decode(step, state)  # warm-up: lazily built tables (RoPE) are not per-step work
    simulate = args.device == "cpu" and not args.reference
    report(count_step(model, state, step, simulate), args.top, args.sequence)


if __name__ == "__main__":
    main()
