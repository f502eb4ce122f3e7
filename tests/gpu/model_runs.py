"""What the model-level GPU tests share: a fixed prompt, and one prefill followed by single-token
decode steps, with every row's logits collected on the host."""

from __future__ import annotations

import torch

from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics

PROMPT = 40
DECODE = 3
MAX_LEN = 256


def prompt_ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(3, 128000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def prefill_then_decode(ckpt, numerics: Numerics, device: str, weights: str = "dense", **load) -> torch.Tensor:
    """Prefill (logits of every prompt row) then DECODE single-token steps fed with fixed
    tokens: [PROMPT + DECODE, vocab] fp32 on the host. ``load``: more from_pretrained arguments."""
    model = DeepseekV41ForCausalLM.from_pretrained(ckpt, numerics, device=device, progress=False, weights=weights,
                                                   **load)
    state = model.new_state(1, MAX_LEN)
    ids = prompt_ids(PROMPT + DECODE)
    with torch.no_grad():
        out = [model(ForwardBatch.build([(0, 0, ids[:PROMPT])], all_logits=True, device=device), state).logits]
        for p in range(PROMPT, PROMPT + DECODE):
            out.append(model(ForwardBatch.build([(0, p, [ids[p]])], device=device), state).logits)
    return torch.cat(out).float().cpu()
