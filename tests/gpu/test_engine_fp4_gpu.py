"""The standalone engine with ``weights="fp4"`` (the checkpoint's FP4 experts kept packed) on the GPU,
tiny V4.1 checkpoint, bf16, decode replayed from CUDA graphs (skipped without CUDA).

- Batch-invariant mode (the default): every MoE call takes the bf16 path, whose products of exactly
  dequantized operands are the same for packed E2M1 and for E4M3 experts of the same values, so the
  greedy tokens and their logprobs equal the ``weights="fp8"`` engine's, bit for bit.
- Without batch invariance: decode and short prefills take the packed experts' FP8 kernel
  (``fp4_gemm_rows_kernel``; at these widths w13 in 128-input blocks, w2 span by span), other
  products than E4M3's (their error is tests/gpu/test_moe_gpu.py's to bound), and the tiny bf16 model
  is chaotic (tests/gpu/test_model_gpu.py): the kernel must have run and every output be well formed;
  how many first tokens agree with the fp8 engine's is printed (H200, session 13: 2 of 4).
"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.decoding.sampling_params import SamplingParams
from deepinfer_adapters.kernels import triton_fp8_gemm
from deepinfer_adapters.standalone import LLM, EngineConfig, LLMEngine

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    return [torch.randint(3, 128000, (n,), generator=g).tolist() for n in (5, 37, 120, 9)]


def _run(ckpt, weights: str, invariant: bool):
    cfg = EngineConfig(weights=weights, batch_invariant=invariant, decode="graphs", device="cuda", max_num_seqs=4,
                       max_model_len=256)
    engine = LLMEngine(ckpt, cfg, progress=False)
    experts = [m.routed for m in engine.runner.model.modules() if getattr(m, "routed", None) is not None]
    assert experts and all(e.packed_fp4 == (weights == "fp4") for e in experts)
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=1)
    outs = LLM.from_engine(engine).generate(_prompts(), params, use_tqdm=False)
    assert engine.runner.decode_steps > 0
    engine.close()
    return outs


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint("v41")


def test_fp4_engine_equals_fp8_engine_in_batch_invariant_mode(ckpt):
    fp8, fp4 = _run(ckpt, "fp8", True), _run(ckpt, "fp4", True)
    for a, b in zip(fp8, fp4):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    print(f"REPORT engine fp4 == fp8 (invariant): {sum(len(a.token_ids) for a in fp8)} tokens")


def test_fp4_engine_without_batch_invariance_runs_the_packed_kernel(ckpt, monkeypatch):
    launches = []
    original = triton_fp8_gemm._fp4_rows
    monkeypatch.setattr(triton_fp8_gemm, "_fp4_rows", lambda *a, **k: launches.append(1) or original(*a, **k))
    fp4 = _run(ckpt, "fp4", False)
    assert launches  # the packed experts' FP8 kernel ran (decode and short prefills)
    fp8 = _run(ckpt, "fp8", False)
    for out in fp4:
        assert len(out.token_ids) == 8 and all(0 <= t < 129280 for t in out.token_ids)
    first = [a.token_ids[0] == b.token_ids[0] for a, b in zip(fp4, fp8)]
    print(f"REPORT engine fp4 vs fp8 (not invariant): first tokens {sum(first)}/{len(first)}, "
          f"{len(launches)} packed-kernel GEMMs")
