"""How closely a forward pass follows the official reference's rounding points.

The official inference code runs bf16 activations, quantizes every activation to
FP8 (per block of the weight block width, power-of-two scales) before an FP8 or
FP4 GEMM, and round-trips cached keys through FP8/FP4 because the weights were
trained that way (QAT). ``Numerics.reference()`` does all of that. Tests that
compare two of our own paths (chunked vs full, batched vs alone) can use
float32 without the round trips to get tight tolerances; the parity tests
against transformers turn off what transformers does not simulate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Numerics:
    dtype: torch.dtype = torch.bfloat16  # activations between ops
    act_quant: bool = True  # FP8 activation quantization before FP8/FP4 linears
    kv_quant: bool = True  # FP8/FP4 round trips of window KV, compressed KV, index q/k
    attn_probs_bf16: bool = True  # sparse_attn casts probabilities to bf16 before P @ V
    # fp64 where CPU torch's fp32 results depend on tensor shapes (kernels/invariance.py):
    # a sequence's logits then never depend on the rest of the batch. Off follows the
    # reference code's fp32 arithmetic more closely. The engine turns it on.
    batch_invariant: bool = False
    # top-k ties (index selection, candidate pool): "lowest_index" (our documented rule,
    # layers/topk.py) or "torch" (torch.topk's own order, as DeepSeek's reference code)
    topk_ties: str = "lowest_index"

    @classmethod
    def reference(cls) -> "Numerics":
        """The official reference's numerics (bf16, every quantization point, its fp32
        arithmetic order and torch.topk's tie order). On the CPU this reproduces DeepSeek's
        reference code bit for bit on V4.1 prefills (docs/notes/v41_reference_check.md)."""
        return cls(topk_ties="torch")

    @classmethod
    def float32(cls, quant: bool = False) -> "Numerics":
        """float32 activations; with ``quant`` the round trips stay on."""
        return cls(dtype=torch.float32, act_quant=quant, kv_quant=quant, attn_probs_bf16=False)

    def invariant(self) -> "Numerics":
        """The same numerics in batch-invariant mode, with our stated tie rule (what the
        engine runs: tokens depend only on the request, never on the batch)."""
        return dataclasses.replace(self, batch_invariant=True, topk_ties="lowest_index")
