"""The tiny V4.1 model at the release's attention geometry (64 heads x head_dim 512), where
the FlashMLA sparse kernel (kernels/flashmla_sparse.py) serves ``sparse_attn`` on CUDA
(skipped without CUDA, or without the sgl-flash-mla wheel: tests/gpu/test_flashmla_gpu.py
says so too). tests/gpu/test_model_gpu.py's checkpoint has 4 heads x 64, where FlashMLA does
not apply, so no other model-level test runs it.

Checkpoint: the tiny V4.1 preset with ``num_attention_heads=64, head_dim=512`` and a 6-layer
stack holding every role that attends (layers 0 window | 1 KV+index source, ratio 2 | 2 reuse |
3 candidate source, ratio 1 | 4 reindex in the pool | 5 reuse of the reindex's picks); the
other widths stay tiny (hidden 128, q_lora_rank 96, 16 index heads x 32, real vocabulary).

1. Every ``sparse_attn`` call of the model (prefill, one-token forward steps, batched decode)
   goes to "flashmla", counted through wrappers around the registered backends; each call's
   output is also checked against the torch reference on the same inputs (the model's own
   layouts: window-only, window + compressed picks, leading -1 in decode windows, gathered
   decode keys, K padded to 128): rel <= 4e-3 per call, the op-level test's bound.
2. bf16 logits (Numerics.reference(), prefill of 40 + 3 one-token steps; dense and native FP8
   weights) against the CPU reference, with test_model_gpu.py's yardstick: rel <= 2 x the noise
   floor (the CPU model with fp32 vs bf16 attention probabilities). The same runs with
   ``sparse_attn`` pinned to the Triton kernel, and FlashMLA against Triton, are held to the same
   bound. The random model is chaotic in bf16 (CPU floor 0.36 at this geometry, vs 0.29 for
   test_model_gpu.py's), so this catches gross errors only; check 1 is the precise one.
3. ``model.decode`` on a DecodeBatch of 3 sequences (prompts 37, 150 and 4 tokens: ring
   wrap-around, groups left open, a context shorter than the window) against each sequence's
   own one-token ``forward``, in the engine's numerics (batch-invariant, lowest-index ties) with
   native FP8 weights, 4 steps: logits and every state tensor bit-identical (expected; to be
   confirmed on the H200: on the CPU the same comparison is bitwise, tests/test_decode_v41.py,
   and every CUDA op in invariant mode computes a row alone, FlashMLA included).

CPU side (measured on a 2-core dev machine, torch single-threaded): writing the checkpoint
4.7 s (135 MB), the two CPU reference runs 8.7 s (first load included) + 4.2 s; the CPU floor
is 0.356 (row 0: 0.043). The CUDA side is to be measured on the H200.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.config import load_config
from deepinfer_adapters.kernels import flashmla_sparse, reference, triton_sparse_attn  # noqa: F401  (registers)
from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from tests.gpu.model_runs import DECODE, PROMPT, prefill_then_decode, rel

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)"),
    pytest.mark.skipif(torch.cuda.is_available() and flashmla_sparse._flash_mla() is None,
                       reason="sgl-flash-mla (legacy SM90 kernels) not installed or not loadable: "
                              "FlashMLA cannot serve the model (tests/gpu/test_flashmla_gpu.py skips too)"),
]

# The release's attention geometry (FlashMLA's: H 64, d 512) on a short stack with every role
# that attends over compressed rows (tests/test_config.py::test_tiny_config_overrides).
OVERRIDES = dict(
    num_attention_heads=64, head_dim=512,
    num_hidden_layers=6, compress_ratios=[0, 2, 2, 1, 1, 1, 0, 0, 0], kv_source_layer_ids=[1, 3],
    index_source_layer_ids=[1, 3, 4], candidate_source_layer_id=3, engram_layer_ids=[1, 4],
    dspark_target_layer_ids=[3, 4, 5],
)
CALL_REL = 4e-3  # per sparse_attn call against the torch reference (tests/gpu/test_flashmla_gpu.py)

SLOTS = [2, 0, 3]  # batched decode: scrambled slots, slot 1 unused
PROMPTS = [37, 150, 4]
STEPS = 4
DECODE_MAX_LEN = 512


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint("v41", **OVERRIDES)


@dataclasses.dataclass
class Calls:
    """What the wrapped ``sparse_attn`` backends saw."""

    backends: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    shapes: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # (S, K) per call
    worst_rel: float = 0.0  # against the torch reference on the same inputs

    def summary(self) -> str:
        return (f"calls {dict(self.backends)}, (S, K) shapes {sorted(self.shapes)}, "
                f"worst rel vs torch reference {self.worst_rel:.2e}")


@contextlib.contextmanager
def recorded_sparse_attn():
    """Wrap every registered ``sparse_attn`` backend (same names, ``supports`` and priorities, so
    the dispatch chooses exactly as it would) to count which one runs each call and to compare
    its output with the torch reference on the same inputs."""
    calls = Calls()
    original = kernels._BACKENDS["sparse_attn"]

    def wrap(backend: kernels.Backend) -> kernels.Backend:
        def fn(*args, **kwargs):
            out = backend.fn(*args, **kwargs)
            q, _, _, idx = args[:4]
            calls.backends[backend.name] += 1
            calls.shapes[(q.shape[0], idx.shape[1])] += 1
            ref = reference.sparse_attn(*args, **kwargs)
            calls.worst_rel = max(calls.worst_rel, rel(out.float(), ref.float()))
            return out

        return dataclasses.replace(backend, fn=fn)

    kernels._BACKENDS["sparse_attn"] = [wrap(b) for b in original]
    try:
        yield calls
    finally:
        kernels._BACKENDS["sparse_attn"] = original


def _run(ckpt, numerics: Numerics, device: str, weights: str = "dense") -> torch.Tensor:
    return prefill_then_decode(ckpt, numerics, device, weights, with_draft=False)


@pytest.fixture(scope="module")
def cpu_reference(ckpt):
    """(CPU bf16 logits, noise floor): the floor is the distance to the CPU model with fp32
    attention probabilities, an equally valid rounding."""
    num = Numerics.reference()
    cpu = _run(ckpt, num, "cpu")
    alt = _run(ckpt, dataclasses.replace(num, attn_probs_bf16=False), "cpu")
    return cpu, rel(alt, cpu)


@pytest.fixture(scope="module")
def gpu_runs(ckpt):
    """``run(weights, backend, decode_split)`` -> (logits, Calls), each configuration run once per module;
    backend None: the automatic choice, else ``sparse_attn`` pinned to it. ``decode_split`` False: the
    split decode config (``triton_sparse_attn.DECODE_SPLIT_QUERIES``, above FlashMLA for one-token
    steps outside batch-invariant mode) off, so FlashMLA serves every call."""
    cache: dict[tuple[str, str | None, bool], tuple[torch.Tensor, Calls]] = {}

    def run(weights: str, backend: str | None, decode_split: bool = False) -> tuple[torch.Tensor, Calls]:
        key = (weights, backend, decode_split)
        if key not in cache:
            kernels.use_backend("sparse_attn", backend)
            split = triton_sparse_attn.DECODE_SPLIT_QUERIES
            triton_sparse_attn.DECODE_SPLIT_QUERIES = split if decode_split else 0
            try:
                with recorded_sparse_attn() as calls:
                    logits = _run(ckpt, Numerics.reference(), "cuda", weights)
            finally:
                kernels.use_backend("sparse_attn", None)
                triton_sparse_attn.DECODE_SPLIT_QUERIES = split
            cache[key] = (logits, calls)
        return cache[key]

    return run


@pytest.mark.parametrize("weights", ["dense", "fp8"])
def test_flashmla_serves_every_sparse_attn_call(ckpt, gpu_runs, weights):
    _, calls = gpu_runs(weights, None)
    layers = load_config(ckpt).num_hidden_layers
    print(f"REPORT model flashmla ({weights} weights) sparse_attn: {calls.summary()}")
    assert calls.backends == {"flashmla": layers * (1 + DECODE)}  # one call per layer and step
    assert {s for s, _ in calls.shapes} == {PROMPT, 1}  # the prefill and the one-token steps
    assert calls.worst_rel <= CALL_REL


def test_split_decode_serves_the_one_token_steps(ckpt, cpu_reference, gpu_runs):
    """With the split decode config on (the default outside batch-invariant mode), the one-token
    steps go to it and the prefill to FlashMLA; each call within the split-K bound of the reference
    (tests/gpu/test_sparse_attn_gpu.py), the logits within the noise floor."""
    cpu, floor = cpu_reference
    logits, calls = gpu_runs("dense", None, decode_split=True)
    layers = load_config(ckpt).num_hidden_layers
    print(f"REPORT model split decode sparse_attn: {calls.summary()}; logits vs cpu rel={rel(logits, cpu):.3e}")
    assert calls.backends == {"flashmla": layers, "triton_decode_split": layers * DECODE}
    assert calls.worst_rel <= 6e-3
    assert rel(logits, cpu) <= 2 * floor


@pytest.mark.parametrize("weights", ["dense", "fp8"])
def test_bf16_flashmla_and_triton_within_noise_floor(cpu_reference, gpu_runs, weights):
    cpu, floor = cpu_reference
    flash, flash_calls = gpu_runs(weights, None)
    triton, triton_calls = gpu_runs(weights, "triton")
    assert set(flash_calls.backends) == {"flashmla"} and set(triton_calls.backends) == {"triton"}
    for name, gpu in (("flashmla", flash), ("triton", triton)):
        agree = float((gpu.argmax(-1) == cpu.argmax(-1)).float().mean())
        print(f"REPORT model64x512 bf16 {weights} cuda(sparse_attn={name}) vs cpu: rel={rel(gpu, cpu):.3e} "
              f"row0 rel={rel(gpu[:1], cpu[:1]):.3e} decode rows rel={rel(gpu[PROMPT:], cpu[PROMPT:]):.3e} "
              f"argmax agree={agree:.2f} | noise floor (cpu probs fp32 vs bf16) rel={floor:.3e}")
    print(f"REPORT model64x512 bf16 {weights} cuda flashmla vs triton: rel={rel(flash, triton):.3e} "
          f"row0 rel={rel(flash[:1], triton[:1]):.3e} | triton calls worst rel vs torch reference "
          f"{triton_calls.worst_rel:.2e}")
    for name, gpu in (("flashmla", flash), ("triton", triton)):
        assert torch.isfinite(gpu).all(), name
        assert rel(gpu, cpu) <= 2 * floor, name
    assert rel(flash, triton) <= 2 * floor


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(5)
    return [torch.randint(3, 128000, (n,), generator=g).tolist() for n in PROMPTS]


def batched_decode_vs_alone(model, device: str) -> tuple[bool, float, dict, Calls]:
    """Prefill PROMPTS together, copy the state, then STEPS one-token steps: each sequence's own
    ``forward`` on one state, ``model.decode`` of all of them on the copy (both fed forward's
    greedy tokens). Returns (logits bit-identical at every step, max abs difference, state tensor
    -> bit-identical after the last step, the sparse_attn calls)."""
    state = model.new_state(4, DECODE_MAX_LEN)  # slot 1 unused
    prompts = _prompts()
    exact, worst = True, 0.0
    with torch.no_grad(), recorded_sparse_attn() as calls:
        model(ForwardBatch.build([(s, 0, p) for s, p in zip(SLOTS, prompts)], device=device), state)
        other = copy.deepcopy(state)
        tokens, positions = [p[-1] for p in prompts], [len(p) for p in prompts]
        for _ in range(STEPS):
            alone = torch.cat([model(ForwardBatch.build([(s, p, [t])], device=device), state).logits
                               for s, p, t in zip(SLOTS, positions, tokens)])
            batched = model.decode(DecodeBatch.build(tokens, positions, SLOTS, max_len=DECODE_MAX_LEN,
                                                     device=device), other)
            assert batched.shape == alone.shape and torch.isfinite(batched).all()
            exact &= torch.equal(batched, alone)
            worst = max(worst, float((batched - alone).abs().max()))
            tokens, positions = alone.argmax(-1).tolist(), [p + 1 for p in positions]
    same_state = {key: torch.equal(t, other._tensors[key]) for key, t in state._tensors.items()}
    return exact, worst, same_state, calls


def test_batched_decode_equals_per_sequence_forward(ckpt):
    model = DeepseekV41ForCausalLM.from_pretrained(ckpt, Numerics.reference().invariant(), device="cuda",
                                                   progress=False, weights="fp8", with_draft=False)
    exact, worst, same_state, calls = batched_decode_vs_alone(model, "cuda")
    print(f"REPORT model64x512 batched decode ({len(SLOTS)} seqs, {STEPS} steps, invariant numerics, fp8 weights) "
          f"vs per-sequence forward: bit-exact {exact}, max abs {worst:.2e}; state tensors equal "
          f"{sum(same_state.values())}/{len(same_state)}; sparse_attn {calls.summary()}")
    # prefill: one call per sequence and layer; each step: one per sequence and layer alone, one per layer batched
    layers = model.cfg.num_hidden_layers
    assert calls.backends == {"flashmla": layers * len(SLOTS) * (1 + STEPS) + layers * STEPS}
    assert calls.worst_rel <= CALL_REL
    assert exact, f"batched decode differs from the per-sequence forward: max abs {worst:.2e}"
    assert all(same_state.values()), [key for key, same in same_state.items() if not same]
