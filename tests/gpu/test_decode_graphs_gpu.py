"""V4.1 ``model.decode`` and its CUDA graphs on the GPU (skipped without CUDA).

1. decode == forward on CUDA, float32 numerics, dense weights (torch reference ops on
   CUDA + Triton sparse attention with exact fp32 dots): every per-sequence value is
   on the device now, so this checks the device-side indexing (rings, paged rows,
   masked row writes) where the CPU test cannot. Tolerance 1e-4 on logits of std ~3,
   as the CPU tests of chunked vs full (tests/test_model_v41.py).
2. Graph replay == eager decode, bf16 + native FP8 weights (the Triton kernels): the
   same kernels on the same shapes, replayed with new inputs over several steps and
   batch sizes padded to buckets; the state each path leaves must agree too.
3. The engine with decode="graphs" against decode="forward": the first token of each
   request comes from the (shared) prefill and must agree; later tokens come from the
   graphed decode. The tiny bf16 model is chaotic (tests/gpu/test_model_gpu.py), so
   only a majority of later tokens is asserted; the counts are printed.
"""

from __future__ import annotations

import copy

import pytest
import torch

from deepinfer_adapters.model_impl import overlap
from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.standalone import LLM, EngineConfig, LLMEngine
from deepinfer_adapters.decoding.sampling_params import SamplingParams
from deepinfer_adapters.standalone import cuda_graphs
from deepinfer_adapters.standalone.cuda_graphs import DecodeGraphs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")

MAX_LEN = 512
SLOTS = [2, 0, 3]
PROMPTS = [37, 150, 4]


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint("v41")


def _prompts():
    g = torch.Generator().manual_seed(5)
    return [torch.randint(3, 128000, (n,), generator=g).tolist() for n in PROMPTS]


def _prefilled(model):
    state = model.new_state(5, MAX_LEN)  # slot 4: padding
    prompts = _prompts()
    with torch.inference_mode():
        model(ForwardBatch.build([(s, 0, p) for s, p in zip(SLOTS, prompts)], device="cuda"), state)
    return state, [p[-1] for p in prompts], [len(p) for p in prompts]


def test_decode_equals_forward_on_cuda_float32(ckpt):
    model = DeepseekV41ForCausalLM.from_pretrained(ckpt, Numerics.float32(quant=True), device="cuda",
                                                   progress=False, with_draft=False)
    state, tokens, positions = _prefilled(model)
    other = copy.deepcopy(state)
    worst = 0.0
    with torch.inference_mode():
        for _ in range(5):
            fwd = model(ForwardBatch.build([(s, p, [t]) for s, p, t in zip(SLOTS, positions, tokens)],
                                           device="cuda"), state).logits
            dec = model.decode(DecodeBatch.build(tokens, positions, SLOTS, max_len=MAX_LEN, device="cuda"), other)
            worst = max(worst, (dec - fwd).abs().max().item())
            tokens, positions = fwd.argmax(-1).tolist(), [p + 1 for p in positions]
    print(f"decode vs forward, CUDA float32: max abs {worst:.2e}")
    assert worst < 1e-4
    for key, t in state._tensors.items():
        torch.testing.assert_close(other._tensors[key], t, atol=1e-4, rtol=1e-4, msg=f"state {key}")


@pytest.mark.parametrize("urgent_tokens,warmup_stream", [(0, False), (1, False), (4, False), (1, True)])
def test_graph_replay_equals_eager_decode(ckpt, urgent_tokens, warmup_stream, monkeypatch):
    """With side streams of a higher CUDA priority than the step's (``overlap.URGENT_SIDE_TOKENS``: none, at one
    token, up to four) too: the same kernels, whichever stream's blocks the scheduler takes first; and captured on
    the warm-up's stream (``cuda_graphs.CAPTURE_ON_WARMUP_STREAM``: the per-stream caches made outside the graph)."""
    monkeypatch.setattr(overlap, "URGENT_SIDE_TOKENS", urgent_tokens)
    monkeypatch.setattr(cuda_graphs, "CAPTURE_ON_WARMUP_STREAM", warmup_stream)
    model = DeepseekV41ForCausalLM.from_pretrained(ckpt, Numerics.reference(), device="cuda", progress=False,
                                                   weights="fp8", with_draft=False)
    state, tokens, positions = _prefilled(model)
    eager_state = copy.deepcopy(state)
    graphs = DecodeGraphs(model, state, pad_slot=4, max_batch=4, max_len=MAX_LEN, device="cuda")
    eager = DecodeGraphs(model, eager_state, pad_slot=4, max_batch=4, max_len=MAX_LEN, device="cuda", capture=False)
    exact = True
    # steps of 3 sequences (bucket 4: one padding row), then 1 and 2 of them
    for step, pick in enumerate([[0, 1, 2], [0, 1, 2], [1], [0, 2], [0, 1, 2]]):
        ids = torch.tensor([tokens[i] for i in pick], device="cuda")
        pos = torch.tensor([positions[i] for i in pick], device="cuda")
        slots = torch.tensor([SLOTS[i] for i in pick], device="cuda")
        max_len = max(positions[i] for i in pick) + 1
        got = graphs.run(ids, pos, slots, max_len).clone()
        want = eager.run(ids, pos, slots, max_len)
        assert got.shape == (len(pick), model.cfg.vocab_size) and torch.isfinite(got).all()
        exact &= torch.equal(got, want)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=f"step {step}")
        for j, i in enumerate(pick):
            tokens[i], positions[i] = int(got[j].argmax()), positions[i] + 1
    print(f"graph replay vs eager (urgent side streams up to {urgent_tokens} tokens, captured on the warm-up's "
          f"stream {warmup_stream}): bit-exact {exact}; "
          f"graphs captured {graphs.num_graphs}")
    assert graphs.num_graphs == 3  # buckets 4, 1, 2 at one length bucket
    for key, t in eager_state._tensors.items():
        if key[0] == "engram" or not t.dtype.is_floating_point:
            assert torch.equal(state._tensors[key][:4], t[:4]), f"state {key}"
        else:
            torch.testing.assert_close(state._tensors[key][:4], t[:4], atol=1e-5, rtol=1e-5, msg=f"state {key}")


def test_engine_with_graphs_matches_forward(ckpt):
    prompts = [_prompts()[i] for i in range(3)] + [[5, 6, 7, 8, 9]]
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    outs = {}
    for mode in ("graphs", "forward"):
        cfg = EngineConfig(decode=mode, weights="fp8", batch_invariant=False, device="cuda", max_num_seqs=4,
                           max_model_len=MAX_LEN)
        engine = LLMEngine(ckpt, cfg, progress=False)
        outs[mode] = [o.token_ids for o in LLM.from_engine(engine).generate(prompts, params, use_tqdm=False)]
        if mode == "graphs":
            assert engine.runner.decode_steps > 0 and engine.runner.decode_graphs.num_graphs > 0
        engine.close()
    first = [a[0] == b[0] for a, b in zip(outs["graphs"], outs["forward"])]
    later = [x == y for a, b in zip(outs["graphs"], outs["forward"]) for x, y in zip(a[1:], b[1:])]
    print(f"engine graphs vs forward: first tokens {sum(first)}/{len(first)}, later {sum(later)}/{len(later)}")
    assert all(first)
    assert sum(later) >= len(later) // 2
