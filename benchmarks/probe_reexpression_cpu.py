"""Probe (CPU): how far re-expressing V4.1's per-32 codes under wider scales moves the tiny model's logits, with no
GPU kernel involved -- the torch reference with the values the prefill's FP8 paths hand their tensor cores.

Why: on the H200 (session 30, tests/gpu/test_model_prefill_fp8_gpu.py) the tiny model prefilled at 4133 tokens
through both FP8 prefill paths was rel 0.46 from the dense CPU reference, where the same run with them off was 0.19
and the model's noise floor 0.19. This says whether the values alone (``widen_scales`` / ``widen_weight``'s
arithmetic, emulated here in torch) account for that, path by path:
- "dense": the dense FP8 linears' activations per 128 and weights per 128 x 128 tile (``fp8_blockwise``);
- "moe": the routed experts' activations per 128 (``gluon_moe.grouped_gemm_fp8``; their weights as they are);
and, for scale, every FP8 linear's output times (1 + eps N(0, 1)) at eps 1e-3 and 3e-3 (bf16's rounding is 2^-9).

Session 30 (this machine, 2 threads, 4133 tokens; rel to the dense reference): noise floor 0.296; native FP8 weights
on the torch ops 0.164; dense re-expressed 0.055; MoE re-expressed 0.137; perturbed outputs 0.438 (1e-3) and 0.174
(3e-3). So the re-expressed values alone stay inside the floor, and at this length the model's logits move by
anything from 0.17 to 0.44 under perturbations of bf16's size: one long prompt cannot tell a kernel's other
rounding from a wrong result (tests/gpu/test_model_prefill_fp8_gpu.py therefore lowers the paths' thresholds).

Run:  PYTHONPATH=. python benchmarks/probe_reexpression_cpu.py [--prompt 4133]
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import tempfile
import time

import torch

from benchmarks.timing import rel
from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference_fp8 as R
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.quant import ceil_pow2
from deepinfer_adapters.model_impl.tiny_checkpoint import write_tiny_checkpoint
from deepinfer_adapters.presets import tiny_config

E4M3 = torch.float8_e4m3fn


def widened_act(x: torch.Tensor, block: int) -> torch.Tensor:
    """The reference's per-``block`` round trip, then each run of 128 values under its largest scale."""
    v = R.fp8_roundtrip(x, block)
    if block != 32 or x.shape[-1] % 128:
        return v
    s = ceil_pow2(x.float().unflatten(-1, (-1, 32)).abs().amax(-1).clamp_min(1e-4) * (1.0 / 448.0))
    wide = s.unflatten(-1, (-1, 4)).amax(-1).repeat_interleave(128, dim=-1)
    return ((v.float() / wide).to(E4M3).float() * wide).to(x.dtype)


def widened_weight(weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """The dequantized weight with each 128 x 128 tile's codes under the tile's largest scale."""
    w = R.dequant(weight, scale, block).float()
    N, K = w.shape
    s = scale.view(torch.float8_e8m0fnu).float() if scale.dtype in (torch.uint8, torch.float8_e8m0fnu) else scale
    per = s.float().repeat_interleave(block[0], 0)[:N].repeat_interleave(block[1], 1)[:, :K]
    tiles = torch.nn.functional.pad(per, (0, 0, 0, -N % 128)).view(-1, 128, K // 128, 128).amax(dim=(1, 3))
    wide = tiles.repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)
    return (w / wide).to(E4M3).float() * wide


def dense_fp8_linear(x, weight, scale, block, act_block):
    if weight.dim() != 2 or x.shape[-1] % 128 or act_block != 32:
        return R.fp8_linear(x, weight, scale, block, act_block)
    return R.linear(widened_act(x, act_block), widened_weight(weight, scale, block).to(x.dtype)).to(x.dtype)


def moe_fp8_linear(x, weight, scale, block, act_block):
    """What ``_expert`` calls: its activations per 128 where the width allows."""
    if x.shape[-1] % 128 or act_block != 32:
        return ORIGINAL(x, weight, scale, block, act_block)
    return R.linear(widened_act(x, act_block), R.dequant(weight, scale, block)).to(x.dtype)


ORIGINAL = R.fp8_linear


def run(ckpt, numerics, prompt: int, weights: str) -> torch.Tensor:
    model = DeepseekV41ForCausalLM.from_pretrained(ckpt, numerics, device="cpu", progress=False, weights=weights)
    state = model.new_state(1, prompt + 12)
    ids = torch.randint(3, 128000, (prompt + 3,), generator=torch.Generator().manual_seed(5)).tolist()
    with torch.no_grad():
        out = [model(ForwardBatch.build([(0, 0, ids[:prompt])], device="cpu"), state).logits]
        for p in range(prompt, prompt + 3):
            out.append(model(ForwardBatch.build([(0, p, [ids[p]])], device="cpu"), state).logits)
    return torch.cat(out).float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=4133)
    args = ap.parse_args()
    ckpt = pathlib.Path(tempfile.mkdtemp())
    write_tiny_checkpoint(ckpt, "v41", seed=0, num_shards=2, config=tiny_config("v41", moe_intermediate_size=128))
    num = Numerics.reference()
    t = time.time()
    ref = run(ckpt, num, args.prompt, "dense")
    print(f"dense reference: {time.time() - t:.0f} s", flush=True)
    floor = rel(run(ckpt, dataclasses.replace(num, attn_probs_bf16=False), args.prompt, "dense"), ref)
    print(f"noise floor (attention probabilities fp32 instead of bf16): rel {floor:.3f}", flush=True)
    print(f"native fp8 weights, torch ops: rel {rel(run(ckpt, num, args.prompt, 'fp8'), ref):.3f}", flush=True)
    kernels.register("fp8_linear", "reexpressed", dense_fp8_linear, priority=-1000)  # pinned only
    kernels.use_backend("fp8_linear", "reexpressed")
    try:
        print(f"dense re-expressed: rel {rel(run(ckpt, num, args.prompt, 'fp8'), ref):.3f}", flush=True)
    finally:
        kernels.use_backend("fp8_linear", None)
    R.fp8_linear = moe_fp8_linear  # _expert's calls only: the dispatcher holds the original function
    try:
        print(f"moe re-expressed: rel {rel(run(ckpt, num, args.prompt, 'fp8'), ref):.3f}", flush=True)
    finally:
        R.fp8_linear = ORIGINAL
    g = torch.Generator().manual_seed(0)
    for eps in (1e-3, 3e-3):
        def noisy(x, weight, scale, block, act_block, eps=eps):
            y = ORIGINAL(x, weight, scale, block, act_block)
            return (y.float() * (1 + eps * torch.randn(y.shape, generator=g))).to(y.dtype)

        kernels.register("fp8_linear", "perturbed", noisy, priority=-1000)  # pinned only
        kernels.use_backend("fp8_linear", "perturbed")
        R.fp8_linear = noisy
        try:
            print(f"every FP8 linear's output times (1 + {eps} N(0, 1)): rel "
                  f"{rel(run(ckpt, num, args.prompt, 'fp8'), ref):.3f}", flush=True)
        finally:
            kernels.use_backend("fp8_linear", None)
            R.fp8_linear = ORIGINAL


if __name__ == "__main__":
    main()
