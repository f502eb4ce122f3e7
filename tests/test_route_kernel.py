"""The Triton MoE routing kernel (kernels/triton_route.py) under Triton's CPU interpreter, against
``reference.moe_route`` (also in batch-invariant mode): the same expert ids, planted ties to the lower
index; weights as close as two fp32 sums of the k scores in different orders allow; shared, per-token
and no bias; with and without renormalisation; logits at and beyond softplus's threshold and far below
zero. tests/gpu/test_route_gpu.py runs the compiled kernel."""

from __future__ import annotations

import pytest

from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import invariance, reference, triton_route
g = torch.Generator().manual_seed(0)

def close(ref, out, k):  # the two normalisers add k scores in other orders: each sum is within
    # (k - 1) u of the exact one, and the division and scale round twice more (u = 2^-24); below
    # the smallest normal float, a score that underflows in fp32 but not in invariant mode's fp64
    return bool(((ref - out).abs() <= 2 * (k + 1) * 2.0**-24 * ref.abs() + torch.finfo(torch.float32).tiny).all())

def ulps(ref, out):
    return ((ref - out).abs() / (torch.nextafter(ref.abs(), torch.tensor(float("inf"))) - ref.abs())).max().item()

checked, worst = 0, 0.0
configs = ((True, 1e-20, 1.5), (False, 1e-20, 1.5), (True, 0.0, 2.5))  # (renormalize, eps, scale)
for T, E, k in [(2, 384, 6), (2, 256, 6), (1, 1024, 8), (2, 24, 1), (1, 8, 8)]:
    x = torch.randn(T, E, generator=g) * 4
    cols = torch.arange(1, E, 5)  # at, around and beyond the threshold (20); exp underflowing
    x[:, cols] = torch.tensor([20.0, 20.25, 19.75, 30.0, -90.0, -200.0])[torch.arange(len(cols)) % 6]
    x[0, [2, 5, 7]] = 100.0  # a three-way tie at the top: ids 2, 5, 7 in that order
    x[-1, [3, 4]] = -200.0  # a tie at score 0 (no bias): picked lower index first when k reaches them
    shared = torch.randn(E, generator=g) * 0.5
    shared[[2, 5, 7]] = 0.25
    per_token = shared + torch.randn(T, E, generator=g) * 0.1
    per_token[:, [2, 5, 7]] = 0.25
    for bias, (renormalize, eps, scale) in zip((shared, None, per_token), configs):
        w, ids = triton_route.moe_route(x, bias, k, renormalize, eps, scale)
        assert ids[0, : min(k, 3)].tolist() == [2, 5, 7][:k]
        for invariant in (False, True):
            with invariance.batch_invariant(invariant):
                ref_w, ref_ids = reference.moe_route(x, bias, k, renormalize, eps, scale)
            assert torch.equal(ids, ref_ids), (T, E, k, ids, ref_ids)
            assert close(ref_w, w, k), (T, E, k, ulps(ref_w, w))
            worst = max(worst, ulps(ref_w, w) if not invariant else 0.0)
            checked += 1
x = torch.randn(3, 256, generator=g) * 4  # V4's hash layers: ids given, each slot its given expert's score
given = torch.randint(0, 256, (3, 6), generator=g)
w, ids = triton_route.moe_route(x, None, 6, True, 0.0, 1.5, ids=given)
ref_w, ref_ids = reference.moe_route(x, None, 6, True, 0.0, 1.5, ids=given)
assert torch.equal(ids, given) and torch.equal(ref_ids, given) and close(ref_w, w, 6), ulps(ref_w, w)
checked += 1
print("OK", checked, "worst ulps (not invariant)", worst)
"""


def test_route_kernel_matches_the_reference_under_the_interpreter():
    out = run_interpreted(SCRIPT)
    assert "OK 31" in out, out
