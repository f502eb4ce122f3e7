"""benchmarks/critical_path_probes.py on the CPU: each probe's stand-in returns what the op it replaces returns
(shapes and dtypes, checked against the torch reference on small inputs), so a probe run on the GPU machine does
not fail on a signature; and registering the probes changes no op's automatic choice (a probe runs only where
pinned by its A/B switch)."""

from __future__ import annotations

import torch

from benchmarks import critical_path_probes as probes
from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference, reference_fp8


def _like(got, want):
    """Same structure, shapes and dtypes (values are not the point: a probe's are unwritten)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype, (got, want)
        return
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _like(g, w)


def test_stand_ins_return_what_the_ops_return():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 40, generator=g).bfloat16()
    _like(probes._unnormed(x, torch.ones(40), 1e-6), reference.rms_norm(x, torch.ones(40), 1e-6))
    streams, pre = torch.randn(3, 4, 40, generator=g).bfloat16(), torch.rand(3, 4, generator=g)
    _like(probes._unmixed_norm(streams, pre, None, 1e-6), reference.hc_pre_norm(streams, pre, None, 1e-6))
    post, comb = torch.rand(3, 4, generator=g), torch.rand(3, 4, 4, generator=g)
    _like(probes._unmixed(x, streams, post, comb), reference.hc_post(x, streams, post, comb))
    q, keys, w = torch.randn(2, 4, 16, generator=g), torch.randn(9, 16, generator=g), torch.randn(2, 4, generator=g)
    _like(probes._unscored(q, keys, w), reference.index_scores(q, keys, w))
    rows, kv = torch.randn(12, 16, generator=g), torch.randn(2, 16, generator=g)
    write, read = torch.tensor([3, 9]), torch.tensor([1, 2, 3, 7, 8, 9])
    _like(probes._unwindowed(rows, write, read, kv), reference.window_store_gather(rows.clone(), write, read, kv))
    window, valid = torch.randn(2, 3, 16, generator=g), torch.ones(2, 3, dtype=torch.bool)
    pool, picked = torch.randn(10, 16, generator=g), torch.tensor([[1, 4], [2, 3]])
    rows = (picked, torch.tensor([5, 5]), torch.tensor([[0], [1]]), 5, 5)  # every pick seen, a slot one block
    got = probes._fixed_keys(window, valid, pool, *rows)
    want = reference.selected_keys(window, valid, pool, *rows)
    _like(got, want)
    assert torch.equal(got[1], want[1])  # every key valid here: the fixed index is the real one
    logits = torch.randn(2, 16, generator=g)
    _like(probes._fixed_route(logits, None, 3, True, 1e-20, 1.5),
          reference.moe_route(logits, None, 3, True, 1e-20, 1.5))
    scores = torch.randn(2, 1, 20, generator=g)
    _like(probes._fixed_topk(scores, 5), reference.topk_torch_order(scores, 5))
    aq, kvs, sink = torch.randn(2, 4, 16, generator=g), torch.randn(6, 16, generator=g), torch.zeros(4)
    _like(probes._unattended(aq, kvs, sink, torch.tensor([[0, 1], [2, -1]]), 0.25),
          reference.sparse_attn(aq, kvs, sink, torch.tensor([[0, 1], [2, -1]]), 0.25))


def test_fp8_stand_ins_return_what_the_kernels_return():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 256, generator=g).bfloat16()
    q, s = probes._unquantized(x, 32)
    assert q.shape == x.shape and q.dtype == torch.float8_e4m3fn and s.shape == (2, 8) and s.dtype == torch.float32
    parts = torch.randn(3, 2, 64, generator=g)
    assert probes._unsummed(parts, torch.bfloat16).shape == (2, 64)
    weight = torch.zeros(64, 256, dtype=torch.float8_e4m3fn)
    assert probes._skipped_gemv(None)(q, s, weight, None, torch.bfloat16).shape == (2, 64)
    grouped = torch.zeros(2 * 64, 128, dtype=torch.float8_e4m3fn)
    xg = torch.randn(3, 2, 128, generator=g).bfloat16()
    _like(probes._unprojected(xg, grouped, torch.ones(4, 4), (32, 32)),
          reference_fp8.fp8_grouped_linear(xg, grouped, torch.ones(4, 4), (32, 32)))
    tiles = torch.zeros(4, 3, 2, 128, 128, dtype=torch.float8_e4m3fn)  # 4 experts of 384 x 256
    assert probes._skipped_pairs(q, s, torch.zeros(6), torch.zeros(6), tiles, None, (1, 32), torch.bfloat16).shape \
        == (6, 384)
    h8, hs = probes._unactivated(torch.randn(6, 2 * 384), torch.rand(6), 10.0, 32)
    assert h8.shape == (6, 384) and h8.dtype == torch.float8_e4m3fn and hs.shape == (6, 12)


def test_session_27_stand_ins_return_what_the_ops_return():
    g = torch.Generator().manual_seed(2)
    streams, kv = torch.randn(2, 4, 32, generator=g), torch.randn(2, 5 * 32, generator=g)
    qw, kw = torch.rand(4, 32, generator=g), torch.rand(4, 32, generator=g)
    _like(probes._unchanged(streams, kv, qw, kw, 1e-6), reference.engram_gate(streams, kv, qw, kw, 1e-6))
    x = torch.randn(3, 64, generator=g).bfloat16()
    _like(probes._unchanged(x, 32), reference_fp8.fp8_roundtrip(x, 32))
    kv, score = torch.randn(2, 16, generator=g), torch.randn(2, 16, generator=g)
    ring, sring = torch.randn(6, 16, generator=g), torch.randn(6, 16, generator=g)
    at, group = torch.tensor([1, 4]), torch.tensor([[0, 1], [4, 5]])
    _like(probes._unpooled(kv, score, ring, sring, at, group, torch.bfloat16),
          reference.ring_pool(kv, score, ring.clone(), sring.clone(), at, group, torch.bfloat16))


def test_bf16_linear_probe_takes_only_bf16_results_while_on():
    x, w = torch.randn(2, 40).bfloat16(), torch.randn(8, 40).bfloat16()
    on, off = probes.PROBES["probe_bf16_linears"]
    try:
        on()
        assert kernels.chosen("linear", x, w, out_dtype=torch.bfloat16) == "probe_bf16"
        assert kernels.chosen("linear", x, w) != "probe_bf16"  # an fp32 result (the gate, the head) keeps its own
    finally:
        off()
    assert kernels.chosen("linear", x, w, out_dtype=torch.bfloat16) != "probe_bf16"


def test_probes_change_no_automatic_choice():
    x = torch.randn(3, 40)
    for op in ("rms_norm", "hc_post", "sparse_attn", "moe_route", "linear", "engram_gate", "fp8_roundtrip",
               "ring_pool"):
        assert any(name.startswith("probe") for name in kernels.backends(op))
    assert kernels.chosen("rms_norm", x, torch.ones(40), 1e-6) == "torch"
    assert kernels.chosen("linear", x, torch.randn(8, 40).bfloat16()) == "torch"
    for switch in probes.PROBES:
        assert switch.startswith("probe_")


def test_the_head_probe_takes_only_the_heads_linear_and_only_while_on():
    x = torch.randn(2, 8)
    head, other = torch.zeros(probes.HEAD_ROWS, 8, dtype=torch.bfloat16), torch.zeros(16, 8, dtype=torch.bfloat16)
    on, off = probes.PROBES["probe_head"]
    assert kernels.chosen("linear", x, head) != "probe_head"
    on()
    try:
        assert kernels.chosen("linear", x, head) == "probe_head"
        assert kernels.chosen("linear", x, other) == "torch"
        _like(kernels.linear(x, head), reference.linear(x, head))
    finally:
        off()
    assert kernels.chosen("linear", x, head) != "probe_head"
