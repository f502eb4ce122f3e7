"""The tiny V4.1 model with native FP8 weights, prefilled at a prefill-sized prompt on CUDA, so that the prefill's
FP8 paths run inside the model: the dense linears on cuBLAS's block-scaled FP8 GEMM (``fp8_blockwise``, from
LARGE_M rows) and the MoE's GEMMs on ``gluon_moe.grouped_gemm_fp8`` (from LARGE_PAIRS token-expert pairs), both on
V4.1's per-32 codes re-expressed under wider scales. Against the dense CPU reference with test_model_gpu.py's
yardstick: within twice the model's own bf16 noise floor, on the prompt's last row and the decode steps after it
(whose keys the prefill wrote). The other model tests' prompts stay far under those sizes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from deepinfer_adapters.kernels import fp8_blockwise, gluon_moe
from deepinfer_adapters.kernels.triton_fp8_gemm import LARGE_M
from deepinfer_adapters.kernels.triton_moe import LARGE_PAIRS
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from tests.gpu.model_runs import prompt_ids, rel

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)"),
    pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                       reason="the FP8 prefill paths are Hopper's"),
]

OVERRIDES = dict(moe_intermediate_size=128)  # w2's inputs a multiple of 128, as the FP8 MoE kernel needs
TOP_K = 2  # the tiny preset's experts a token
PROMPT = max(LARGE_M, -(-LARGE_PAIRS // TOP_K)) + 37
DECODE = 3


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint("v41", **OVERRIDES)


def _run(ckpt, numerics: Numerics, device: str, weights: str = "dense") -> torch.Tensor:
    """The prompt's last row, then DECODE single-token steps: [1 + DECODE, vocab] fp32 on the host."""
    model = DeepseekV41ForCausalLM.from_pretrained(ckpt, numerics, device=device, progress=False, weights=weights)
    state = model.new_state(1, PROMPT + DECODE + 8)
    ids = prompt_ids(PROMPT + DECODE, seed=5)
    with torch.no_grad():
        out = [model(ForwardBatch.build([(0, 0, ids[:PROMPT])], device=device), state).logits]
        for p in range(PROMPT, PROMPT + DECODE):
            out.append(model(ForwardBatch.build([(0, p, [ids[p]])], device=device), state).logits)
    return torch.cat(out).float().cpu()


def test_prefill_fp8_paths_within_noise_floor(ckpt, monkeypatch):
    num = Numerics.reference()
    cpu = _run(ckpt, num, "cpu")
    floor = rel(_run(ckpt, dataclasses.replace(num, attn_probs_bf16=False), "cpu"), cpu)
    calls = {"dense": 0, "moe": 0}
    dense, moe = fp8_blockwise.linear, gluon_moe.grouped_gemm_fp8

    def count(name, fn):
        def counted(*args, **kw):
            calls[name] += 1
            return fn(*args, **kw)
        return counted

    monkeypatch.setattr(fp8_blockwise, "linear", count("dense", dense))
    monkeypatch.setattr(gluon_moe, "grouped_gemm_fp8", count("moe", moe))
    gpu = _run(ckpt, num, "cuda", weights="fp8")
    agree = float((gpu.argmax(-1) == cpu.argmax(-1)).float().mean())
    print(f"REPORT model prefill {PROMPT} tokens, fp8 paths {calls}: rel to the dense cpu reference "
          f"{rel(gpu, cpu):.3e} (last prompt row {rel(gpu[:1], cpu[:1]):.3e}), argmax agree {agree:.2f} "
          f"| noise floor rel={floor:.3e}")
    assert calls["dense"] > 0 and calls["moe"] > 0  # the prefill took both paths
    assert torch.isfinite(gpu).all()
    assert rel(gpu, cpu) <= 2 * floor
