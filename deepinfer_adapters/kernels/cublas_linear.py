"""CUDA backend of ``linear`` for bf16 weights with fp32 activations (registered as "cublas_split").

Where it matters: the LM head (129280 x 5120 bf16, 1.3 GB) and the MoE gate take
fp32 inputs, and the reference converts the whole bf16 weight to fp32 on every call
(``weight.to(x.dtype)``: 2.6 GB written and read again per decode step for the head).

Here the weight stays bf16 and x is split into two bf16 terms, x = hi + lo with
hi = bf16(x) and lo = bf16(x - hi); one cuBLAS GEMM over the stacked [hi; lo] rows
(the weight read once) with fp32 output (``torch.mm(..., out_dtype=float32)``), then
the two halves added. Products of bf16 values are exact in fp32 and accumulate in
fp32, as in the reference's fp32 GEMM:
- when x's values are bf16 (the head and gate inputs: a bf16 activation cast up),
  lo is 0 and the result equals the reference up to fp32 summation order;
- otherwise x - hi - lo is below 2^-18 |x|, i.e. a few fp32 ulps of each input.
A bf16 x with an fp32 result (the MoE gate passes its bf16 input so: the reference's fp32
GEMM of its values) is that one GEMM alone, hi being x: at an 8192-token prefill the split's
casts, subtraction and concatenation took ~0.57 ms a layer for the gate (H200 profile, session 15).
Not batch-invariant (cuBLAS picks kernels by row count): in batch-invariant mode the
reference runs instead.
"""

from __future__ import annotations

import torch

from deepinfer_adapters.kernels import invariance, register


def linear(x: torch.Tensor, weight: torch.Tensor, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    lead, k = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, k)
    if x2.dtype == torch.bfloat16:  # an fp32 result of bf16 values (the gate): hi is x, lo would be 0
        return torch.mm(x2, weight.t(), out_dtype=torch.float32).view(*lead, weight.shape[0]).to(out_dtype)
    hi = x2.to(torch.bfloat16)
    lo = (x2 - hi.float()).to(torch.bfloat16)
    out = torch.mm(torch.cat([hi, lo]), weight.t(), out_dtype=torch.float32)
    n = x2.shape[0]
    return (out[:n] + out[n:]).view(*lead, weight.shape[0]).to(out_dtype)


def supports(x: torch.Tensor, weight: torch.Tensor, out_dtype: torch.dtype = torch.float32, **_) -> bool:
    return (x.is_cuda and weight.is_cuda and weight.dtype == torch.bfloat16 and not invariance.enabled()
            and (x.dtype == torch.float32 or (x.dtype == torch.bfloat16 and out_dtype == torch.float32)))


register("linear", "cublas_split", linear, supports=supports, priority=10)
