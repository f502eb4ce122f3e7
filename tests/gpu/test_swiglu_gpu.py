"""The experts' SwiGLU as one Triton kernel (kernels/triton_moe.py ``swiglu``) on CUDA against
``reference.swiglu`` run by torch on the same GPU, and chosen by the dispatcher. Both compute
silu as x / (1 + expf(-x)) in fp32 with an IEEE division, so the values are expected to agree
bit for bit; the assertion allows one ulp of the output dtype (torch's expf and libdevice's
could differ in principle) and the REPORT line says how many differ."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import invariance, reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 8, 300])
@pytest.mark.parametrize("limit,routed", [(10.0, False), (0.0, True), (7.0, True)])
def test_swiglu_matches_torch(rows, dtype, limit, routed):
    g = torch.Generator(device="cuda").manual_seed(rows)
    h13 = (torch.randn(rows, 2 * 2304, device="cuda", generator=g) * 6).to(dtype)
    gate, up = h13.split(2304, dim=-1)  # a merged w1 + w3 GEMM's output
    route_w = torch.rand(rows, 1, device="cuda", generator=g) if routed else None
    assert kernels.chosen("swiglu", gate, up, limit, route_w) == "triton"
    fast = kernels.swiglu(gate, up, limit, route_w)
    ref = reference.swiglu(gate, up, limit, route_w)
    bits = torch.int16 if dtype == torch.bfloat16 else torch.int32
    ulps = (fast.view(bits).int() - ref.view(bits).int()).abs()
    print(f"REPORT swiglu {dtype} rows={rows} limit={limit}: {int((ulps > 0).sum())} of {ulps.numel()} differ, "
          f"max {int(ulps.max())} ulp")
    assert int(ulps.max()) <= 1
    with invariance.batch_invariant(True):  # one element at a time: the first row alone is the same
        assert torch.equal(kernels.swiglu(gate[:1], up[:1], limit, None if route_w is None else route_w[:1]),
                           kernels.swiglu(gate, up, limit, route_w)[:1])
