"""``hc_post_pre_norm``'s Triton kernel (kernels/triton_hc_post_norm.py) on CUDA (skipped elsewhere): the same bits
as the two Triton kernels it replaces -- ``triton_hc.hc_post``, then ``triton_norm_rope.hc_pre_norm`` of its output
-- which tests/gpu/test_hc_norm_rope_gpu.py checks against the torch references. Narrow (few tokens) and wide
slices, V4.1 / V4 widths and one not a multiple of the slice, weightless, a strided residual, a token alone against
the batch, a CUDA graph's replay, two streams at once (each with its arrival counters), the counters re-armed."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")

HC, EPS = 4, 1e-6


def _inputs(T: int, D: int, dtype: torch.dtype, seed: int, weighted: bool = True):
    g = torch.Generator(device="cuda").manual_seed(seed)
    y = (torch.randn(T, D, device="cuda", generator=g) * 2).to(dtype)
    residual = torch.randn(T, HC, D, device="cuda", generator=g).to(dtype)
    post = 2 * torch.sigmoid(torch.randn(T, HC, device="cuda", generator=g))
    comb = torch.softmax(torch.randn(T, HC, HC, device="cuda", generator=g), -1)
    pre = torch.sigmoid(torch.randn(T, HC, device="cuda", generator=g)) + 1e-6
    weight = (0.5 + torch.rand(D, device="cuda", generator=g)) if weighted else None
    return y, residual, post, comb, pre, weight


def _two_kernels(y, residual, post, comb, pre, weight):
    from deepinfer_adapters.kernels import triton_hc, triton_norm_rope

    x = triton_hc.hc_post(y, residual, post, comb)
    return x, triton_norm_rope.hc_pre_norm(x, pre, weight, EPS)


def _fused(*args):
    from deepinfer_adapters.kernels import triton_hc_post_norm

    return triton_hc_post_norm.hc_post_pre_norm(*args, EPS)


def _assert_same(got, want, what: str) -> None:
    for name, a, b in zip(("streams", "normed"), got, want):
        assert a.shape == b.shape and a.dtype == b.dtype, (what, name)
        same = float((a == b).double().mean())
        print(f"REPORT hc_post_pre_norm {what} {name}: bit-equal fraction {same:.6f}")
        assert torch.equal(a, b), f"{what}: {name} not bit-equal to the two kernels ({same:.6f} equal)"


@pytest.mark.parametrize("T", (1, 7, 64, 65, 255, 513))
@pytest.mark.parametrize("D", (5120, 4096, 7168, 320))
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float32))
def test_same_bits_as_the_two_kernels(T, D, dtype):
    args = _inputs(T, D, dtype, T * 31 + D)
    assert kernels.chosen("hc_post_pre_norm", *args, EPS) == "triton"
    fused = _fused(*args)
    _assert_same(fused, _two_kernels(*args), f"T={T} D={D} {dtype}")
    if T > 1:  # a token alone == batched
        alone = _fused(*(a[1:2] if a is not None and a.dim() > 1 else a for a in args))
        assert torch.equal(alone[0], fused[0][1:2]) and torch.equal(alone[1], fused[1][1:2])


def test_weightless_and_strided():
    y, residual, post, comb, pre, _ = _inputs(3, 5120, torch.bfloat16, 5, weighted=False)
    _assert_same(_fused(y, residual, post, comb, pre, None), _two_kernels(y, residual, post, comb, pre, None),
                 "weightless")
    wide = torch.randn(3, HC, 2 * 5120, device="cuda").to(torch.bfloat16)
    wide[..., ::2] = residual  # every other value: a strided residual (copied once)
    args = (y, wide[..., ::2], post, comb, pre, 0.5 + torch.rand(5120, device="cuda"))
    _assert_same(_fused(*args), _two_kernels(*args), "strided residual")


def test_two_streams_at_once_and_the_counters_rearmed():
    from deepinfer_adapters.kernels import arrival_counters

    calls = [_inputs(T, 5120, torch.bfloat16, 20 + T) for T in (1, 8)]
    for args in calls:  # compiled, counters made for the default stream
        _fused(*args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    results = []
    for _ in range(3):
        with torch.cuda.stream(side):
            results.append(_fused(*calls[0]))
        results.append(_fused(*calls[1]))
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    want = [_two_kernels(*args) for args in calls]
    for i, got in enumerate(results):
        _assert_same(got, want[i % 2], f"two streams, call {i}")
    for stream in (torch.cuda.current_stream(), side):
        with torch.cuda.stream(stream):
            assert not arrival_counters.counters(torch.device("cuda", torch.cuda.current_device()), 1).any()


def test_graph_replay_follows_the_inputs():
    args = _inputs(1, 5120, torch.bfloat16, 11)
    _fused(*args)  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _fused(*args)
    fresh = _inputs(1, 5120, torch.bfloat16, 12)
    for dst, src in zip(args, fresh):
        dst.copy_(src)
    graph.replay()
    _assert_same(captured, _two_kernels(*fresh), "graph replay")
