"""``moe_gate``'s one-launch kernel (kernels/triton_route.py, prepared in session 27: the gate's split GEMM, then the
row tile's last program adds the partials and routes) under Triton's CPU interpreter: the same weights and ids, bit
for bit, as the three launches it replaces -- ``triton_linear.linear`` (split GEMM + split sum) and
``triton_route.moe_route`` -- with a K split and without, bias per expert and per token, V4's hash ids, without the
renormalisation, an expert count off the column tile, several tokens in a row tile; the arrival counters re-armed.
On the CPU the op runs composed (the kernel takes CUDA tensors only); tests/gpu/test_route_gpu.py checks the GPU."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference
from tests.triton_interpreter import run_interpreted

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import arrival_counters, triton_linear, triton_route

g = torch.Generator().manual_seed(0)
cases = [  # M, E, K, bias ("shared" / "token" / None), hash ids, renormalize
    (1, 384, 2048, "shared", False, True), (1, 384, 64, "shared", False, True), (3, 40, 256, "token", False, True),
    (2, 96, 512, None, True, True), (1, 64, 256, "shared", False, False)]
for M, E, K, bias_kind, hashed, renorm in cases:
    x = torch.randn(M, K, generator=g)
    w = (torch.randn(E, K, generator=g) / K ** 0.5).bfloat16()
    bias = {"shared": torch.randn(E, generator=g) * 0.1, "token": torch.randn(M, E, generator=g) * 0.1,
            None: None}[bias_kind]
    ids = torch.stack([torch.randperm(E, generator=g)[:6] for _ in range(M)]) if hashed else None
    args = (bias, 6, renorm, 1e-20, 2.5)
    got = triton_route.moe_gate(x, w, *args, ids=ids)
    want = triton_route.moe_route(triton_linear.linear(x, w), *args, ids=ids)
    split = triton_linear.plan(E, K)[2]
    print(M, E, K, split, int(torch.equal(got[0], want[0])), int(torch.equal(got[1], want[1])))
print("counters", int(arrival_counters.counters(torch.device("cpu"), 1).any()))
"""


def test_one_launch_gives_the_three_launches_bits_under_the_interpreter():
    pytest.importorskip("triton")
    lines = [line.split() for line in run_interpreted(SCRIPT).strip().splitlines()]
    assert lines[-1] == ["counters", "0"], lines[-1]  # each row tile's last program re-armed its counter
    cases = lines[:-1]
    assert len(cases) == 5 and {c[3] for c in cases} >= {"1", "8"}, cases  # unsplit and 8-split GEMMs ran
    assert all(c[4:] == ["1", "1"] for c in cases), cases


def test_cpu_dispatch_composes_the_gemm_and_the_route():
    g = torch.Generator().manual_seed(1)
    x, w, bias = torch.randn(2, 64, generator=g), torch.randn(16, 64, generator=g), torch.randn(16, generator=g)
    assert kernels.chosen("moe_gate", x, w, bias, 4, True, 1e-20, 1.5) == "composed"
    got = kernels.moe_gate(x, w, bias, 4, True, 1e-20, 1.5)
    want = reference.moe_route(reference.linear(x, w), bias, 4, True, 1e-20, 1.5)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
