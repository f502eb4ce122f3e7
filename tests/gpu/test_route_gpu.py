"""Triton ``moe_route`` (kernels/triton_route.py) on CUDA against ``reference.moe_route``.

Expected: the kernel's scores are libdevice's log1pf(expf(x)) and sqrt.rn, the functions torch's
CUDA softplus and sqrt call, so they should be torch's bit for bit (the REPORT lines say how many
are; asserted: within 1 ulp). Asserted: the expert ids bitwise, planted ties included (lower index
first); weights within 2 (k + 1) u relative, u = 2^-24: the kernel adds the k scores in slot order,
torch's sum in its own order, each within (k - 1) u of the exact sum, and the division and scale
round twice more; each token alone == batched; a CUDA graph replay == eager.
Real shapes: V4.1 384 experts top 6, V4 256 top 6, the draft 128 top 3; up to 4096 tokens.
"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import invariance, reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")

CONFIGS = {"v41": (True, 1e-20, 1.5), "v4": (True, 0.0, 1.5), "plain": (False, 1e-20, 2.5)}  # renormalize, eps, scale


def _weights_close(ref: torch.Tensor, out: torch.Tensor, k: int) -> bool:
    return bool(((ref - out).abs() <= 2 * (k + 1) * 2.0**-24 * ref.abs()).all())


def _ulps(ref: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    ulp = torch.nextafter(ref.abs(), torch.full_like(ref, float("inf"))) - ref.abs()
    return (ref - out).abs() / ulp


def _logits(T: int, E: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, E, device="cuda", generator=g) * 4
    cols = torch.arange(1, E, 5, device="cuda")  # at, around and beyond the threshold (20); exp underflowing
    special = torch.tensor([20.0, 20.25, 19.75, 30.0, -90.0, -200.0], device="cuda")
    x[:, cols] = special[torch.arange(len(cols), device="cuda") % 6]
    x[::4, [2, 5, 7]] = 100.0  # a three-way tie at the top of every 4th row
    return x


def _bias(kind: str, T: int, E: int, seed: int) -> torch.Tensor | None:
    if kind == "none":
        return None
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    bias = torch.randn(E, device="cuda", generator=g) * 0.5
    if kind == "per_token":
        bias = bias + torch.randn(T, E, device="cuda", generator=g) * 0.1
    bias[..., [2, 5, 7]] = 0.25  # keeps the planted ties ties
    return bias


@pytest.mark.parametrize("T,E,k", [(1, 384, 6), (7, 256, 6), (128, 384, 6), (4096, 256, 6), (33, 1024, 8),
                                   (5, 128, 3), (3, 24, 1), (2, 8, 8)])
@pytest.mark.parametrize("bias_kind", ["none", "shared", "per_token"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_route_matches_reference(T, E, k, bias_kind, config):
    renormalize, eps, scale = CONFIGS[config]
    x, bias = _logits(T, E, T + E), _bias(bias_kind, T, E, T + E)
    assert kernels.chosen("moe_route", x, bias, k, renormalize, eps, scale) == "triton"
    w, ids = kernels.moe_route(x, bias, k, renormalize, eps, scale)
    ref_w, ref_ids = reference.moe_route(x, bias, k, renormalize, eps, scale)
    ulps = _ulps(ref_w, w)
    print(f"REPORT moe_route T={T} E={E} k={k} {bias_kind} {config}: ids equal {torch.equal(ids, ref_ids)}, "
          f"weights bit-equal {float((w == ref_w).float().mean()):.6f}, max ulps {float(ulps.max()):.2f}")
    assert ids.dtype == torch.int64 and w.dtype == torch.float32
    assert torch.equal(ids, ref_ids)
    assert ids[::4, : min(k, 3)].eq(torch.tensor([2, 5, 7][:k], device="cuda")).all()
    assert _weights_close(ref_w, w, k)


def test_scores_are_torchs_softplus_sqrt():
    """k = E, no normalisation, scale 1: the weights are the scores, sorted, so every score of a
    sweep from -87 to 40 (softplus above the smallest normal float) is compared with
    F.softplus(x).sqrt() on CUDA."""
    E = 1024
    x = torch.linspace(-87.0, 40.0, 64 * E, device="cuda").view(64, E)
    w, ids = kernels.moe_route(x, None, E, False, 0.0, 1.0)
    ref = torch.nn.functional.softplus(x).sqrt().gather(1, ids)
    equal = float((w == ref).float().mean())
    print(f"REPORT moe_route scores vs torch softplus.sqrt: bit-equal fraction {equal:.6f}, "
          f"max ulps {float(_ulps(ref, w).max()):.2f}")
    assert float(_ulps(ref, w).max()) <= 1


@pytest.mark.parametrize("bias_kind", ["shared", "per_token"])
def test_route_rows_do_not_depend_on_the_batch(bias_kind):
    """Each token alone gives the bits it gets among 300 others: why it runs in batch-invariant mode too."""
    T, E, k = 300, 384, 6
    x, bias = _logits(T, E, 11), _bias(bias_kind, T, E, 11)
    rows = (lambda i, j: bias[i:j]) if bias_kind == "per_token" else (lambda i, j: bias)
    full_w, full_ids = kernels.moe_route(x, bias, k, True, 1e-20, 1.5)
    same = []
    for i, j in ((0, 1), (7, 8), (299, 300), (5, 40)):
        w, ids = kernels.moe_route(x[i:j], rows(i, j), k, True, 1e-20, 1.5)
        same.append(torch.equal(w, full_w[i:j]) and torch.equal(ids, full_ids[i:j]))
    print(f"REPORT moe_route rows alone == batched ({bias_kind}): {same}")
    assert all(same)
    with invariance.batch_invariant(True):
        assert kernels.chosen("moe_route", x, bias, k, True, 1e-20, 1.5) == "triton"


def test_route_hash_ids_and_the_reference_for_temperature():
    """V4's hash layers (ids given) run the kernel: the given ids back, each weight its expert's
    score as the reference computes it; a temperature other than 1 keeps the reference."""
    x = _logits(4, 256, 3)
    ids = torch.randint(0, 256, (4, 6), device="cuda")
    assert kernels.chosen("moe_route", x, None, 6, True, 0.0, 1.5, ids=ids) == "triton"
    w, picked = kernels.moe_route(x, None, 6, True, 0.0, 1.5, ids=ids)
    ref_w, ref_ids = reference.moe_route(x, None, 6, True, 0.0, 1.5, ids=ids)
    assert torch.equal(picked, ids) and torch.equal(ref_ids, ids)
    # atol: a logit below ~-87 has a subnormal softplus, which the kernel flushes to zero (a score
    # of ~1e-20 against 0; seen on the H200 for one of 24 weights): a hash layer picks such experts
    torch.testing.assert_close(w, ref_w, rtol=2 * 7 * 2.0**-24, atol=1e-18)
    assert kernels.chosen("moe_route", x, None, 6, True, 0.0, 1.5, temp=0.5) == "torch"
    assert kernels.chosen("moe_route", x.double(), None, 6, True, 0.0, 1.5) == "torch"


def test_route_graph_replay_equals_eager():
    x, bias = _logits(1, 384, 21), _bias("shared", 1, 384, 21)
    eager = kernels.moe_route(x, bias, 6, True, 1e-20, 1.5)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            kernels.moe_route(x, bias, 6, True, 1e-20, 1.5)  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = kernels.moe_route(x, bias, 6, True, 1e-20, 1.5)
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(captured, eager))
    x.copy_(_logits(1, 384, 22))
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(captured, kernels.moe_route(x, bias, 6, True, 1e-20, 1.5)))
