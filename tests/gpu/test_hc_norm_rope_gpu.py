"""Triton HC / RMSNorm / RoPE ops against their torch references, on CUDA (skipped elsewhere).

Kernels: kernels/triton_hc.py (hc_mix_logits, hc_split_sinkhorn, hc_pre, hc_post) and
kernels/triton_norm_rope.py (rms_norm, apply_rope); their docstrings state the numerics.
Real widths: hidden 4096 / 5120, hc 4, 64 heads x 512 with a 64-dim rope, tokens 1, 7,
128, 4096.

Tolerances (u = 2^-24, the fp32 unit roundoff):
- Sums of a few terms (hc_pre, hc_post, the rope rotation): both sides round the same
  products to fp32 and add them, perhaps in another order, so fp32 results differ by
  at most a few u of S = sum |terms| (asserted 4 u S; seen: bit-equal). A bf16
  output rounds those fp32 values once: it equals the reference's or is its
  neighbour (asserted: one bf16 ulp + 8 u S).
- RMSNorm: the sum of squares (positive terms) is added in another tree, a relative
  error of at most ~(log2 N + N / threads) u on each side, halved by the rsqrt,
  plus rsqrt.approx's 2 ulps and one rounding per product: asserted 2^-19 |ref|
  (32 fp32 ulps; seen <= 2) for fp32 outputs, one bf16 ulp for bf16 outputs (seen:
  all but ~1e-5 of the elements bit-equal).
- hc_mix_logits: K = hc * D = 16-20k products per dot. Both sides approximate the
  exact dot with fp32 sums in different orders (the reference: cuBLAS SGEMM; the
  kernel: tensor-core blocks of three exact bf16 products, IEEE sums across blocks),
  so each is compared with the fp64 dot (the reference in batch-invariant mode):
  elementwise within 16 u S, S = sum_k |x_k fn_k| * rsqrt (the error scale of any
  fp32 summation), and in norm no more than 4x the fp32 reference's own error
  (+ 2^-22 of the norm).
- hc_split_sinkhorn: sigmoid, exp and IEEE divisions like torch's; 4-term sums in
  another order; ~20 Sinkhorn passes, which do not amplify ulp differences. Asserted
  against the reference within 2^-20 (pre, comb <= ~1; post <= 2: 2^-19), and no
  further from the fp64 reference than 4x the fp32 reference's distance + 2 ulps.
CUDA graphs: each op is captured once and replayed; the replay must equal the eager
call bit for bit, also after the inputs are overwritten in place.
"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import invariance, reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")

U = 2.0**-24
HC = 4
TOKENS = (1, 7, 128, 4096)
HIDDEN = (4096, 5120)
DTYPES = (torch.bfloat16, torch.float32)
MIX_DIM = (2 + HC) * HC
ITERS, HC_EPS, NORM_EPS = 20, 1e-6, 1e-6


def _hc():
    from deepinfer_adapters.kernels import triton_hc

    return triton_hc


def _nr():
    from deepinfer_adapters.kernels import triton_norm_rope

    return triton_norm_rope


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _stream(T: int, D: int, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    return torch.randn(T, HC, D, device="cuda", generator=g).to(dtype)


def _bf16_ulp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One bf16 ulp at the larger magnitude of a and b (fp64): 2^(e - 8) for |v| = m 2^e, m in [0.5, 1)."""
    _, e = torch.frexp(torch.maximum(a.double().abs(), b.double().abs()))
    return torch.ldexp(torch.ones_like(e, dtype=torch.float64), e - 8)


def _assert_sum_close(out: torch.Tensor, ref: torch.Tensor, S: torch.Tensor, what: str) -> None:
    """out vs ref for a short sum whose terms have absolute sum S (fp64, broadcastable)."""
    assert out.shape == ref.shape and out.dtype == ref.dtype, (what, out.shape, ref.shape, out.dtype, ref.dtype)
    diff = (out.double() - ref.double()).abs()
    if out.dtype == torch.float32:
        bound = 4 * U * S
    else:
        bound = _bf16_ulp(out, ref) + 8 * U * S
    bad = diff > bound
    same = float((diff == 0).double().mean())
    print(f"REPORT {what}: max diff {float(diff.max()):.3g}, bit-equal fraction {same:.6f}")
    assert not bad.any(), f"{what}: {int(bad.sum())} elements off, worst {float((diff - bound).max()):.3g} over"


# ------------------------------------------------------------------------ dispatch ----
def test_dispatch_picks_triton_on_cuda_and_keeps_invariance():
    """Triton on CUDA, batch-invariant mode included: the others compute each token alone, and
    hc_mix_logits fixes its tiles and K split by K there (test_batch_invariance_gpu.py)."""
    g = _gen(0)
    x = _stream(3, 256, torch.bfloat16, g)
    pre = torch.rand(3, HC, device="cuda", generator=g)
    comb = torch.rand(3, HC, HC, device="cuda", generator=g)
    fn = torch.randn(MIX_DIM, HC * 256, device="cuda", generator=g)
    mixes = torch.randn(3, MIX_DIM, device="cuda", generator=g)
    scale, base = torch.rand(3, device="cuda", generator=g), torch.randn(MIX_DIM, device="cuda", generator=g)
    q = torch.randn(3, 64, 512, device="cuda", generator=g).to(torch.bfloat16)
    freqs = torch.polar(torch.ones(3, 32, device="cuda"), torch.randn(3, 32, device="cuda", generator=g))
    calls = {
        "hc_mix_logits": (x, fn, NORM_EPS),
        "hc_split_sinkhorn": (mixes, scale, base, HC, ITERS, HC_EPS),
        "hc_pre": (x, pre),
        "hc_post": (x[:, 0], x, pre, comb),
        "rms_norm": (q, None, NORM_EPS),
        "apply_rope": (q, freqs),
    }
    for op, args in calls.items():
        assert kernels.chosen(op, *args) == "triton", op
        with invariance.batch_invariant(True):
            assert kernels.chosen(op, *args) == "triton", op
        cpu = tuple(a.cpu() if isinstance(a, torch.Tensor) else a for a in args)
        assert kernels.chosen(op, *cpu) == "torch", op


# ------------------------------------------------------------------- hc_mix_logits ----
def _mix_check(x: torch.Tensor, fn: torch.Tensor, what: str) -> None:
    out = _hc().hc_mix_logits(x, fn, NORM_EPS)
    ref = reference.hc_mix_logits(x, fn, NORM_EPS)
    with invariance.batch_invariant(True):
        exact = reference.hc_mix_logits(x, fn, NORM_EPS).double()  # fp64 dots, rounded once
    assert out.shape == ref.shape and out.dtype == ref.dtype == torch.float32
    flat = x.flatten(-2).double()
    rs = torch.rsqrt(flat.square().mean(-1, keepdim=True) + NORM_EPS)
    S = (flat.abs() @ fn.float().double().abs().T) * rs
    err, err_ref = (out.double() - exact).abs(), (ref.double() - exact).abs()
    print(f"REPORT mix_logits {what}: max err/(u S) kernel {float((err / S).max()) / U:.2f}, "
          f"reference {float((err_ref / S).max()) / U:.2f}; norm err kernel {float(err.norm()):.3g} "
          f"reference {float(err_ref.norm()):.3g}")
    assert (err <= 16 * U * S + 4 * U * exact.abs()).all(), what
    assert float(err.norm()) <= 4 * float(err_ref.norm()) + 2.0**-22 * float(exact.norm()), what


@pytest.mark.parametrize("T", TOKENS)
@pytest.mark.parametrize("D", HIDDEN)
@pytest.mark.parametrize("dtype", DTYPES)
def test_hc_mix_logits(T, D, dtype):
    g = _gen(T + D)
    x = _stream(T, D, dtype, g)
    fn = torch.randn(MIX_DIM, HC * D, device="cuda", generator=g) / (HC * D) ** 0.5
    _mix_check(x, fn, f"T={T} D={D} {dtype}")


@pytest.mark.parametrize("T", (1, 128))
def test_hc_mix_logits_head_fp64_weights(T):
    """The HC head's [hc, hc*D] weights; the dense model keeps them fp64 (rounded to fp32 by both)."""
    g = _gen(T)
    x = _stream(T, 4096, torch.bfloat16, g)
    fn = torch.randn(HC, HC * 4096, device="cuda", generator=g, dtype=torch.float64) / 128
    _mix_check(x, fn, f"head T={T}")


def test_hc_mix_logits_single_k_range(monkeypatch):
    """Enough token tiles to fill the GPU: one program per tile over all of K, no merge kernel."""
    hc_mod = _hc()
    monkeypatch.setattr(hc_mod, "sm_count", lambda device: 1)
    assert hc_mod.mix_config(128, HC * 4096, True, 1).splits == 1
    g = _gen(5)
    x = _stream(128, 4096, torch.bfloat16, g)
    fn = torch.randn(MIX_DIM, HC * 4096, device="cuda", generator=g) / 128
    _mix_check(x, fn, "single K range")


@pytest.mark.parametrize("T,fn_dtype", [(128, torch.float32), (4096, torch.float32), (300, torch.float64)])
def test_hc_mix_logits_loaded_pieces_are_the_inline_split(monkeypatch, T, fn_dtype):
    """PRESPLIT_FN: the weight's bf16 pieces from memory (torch's round to nearest) give the bits of the
    kernel's own split (Triton's cast rounds to nearest too)."""
    hc_mod = _hc()
    g = _gen(T + 1)
    x = _stream(T, 5120, torch.bfloat16, g)
    fn = (torch.randn(MIX_DIM, HC * 5120, device="cuda", generator=g) / (HC * 5120) ** 0.5).to(fn_dtype)
    monkeypatch.setattr(hc_mod, "PRESPLIT_FN", False)
    inline = hc_mod.hc_mix_logits(x, fn, NORM_EPS)
    monkeypatch.setattr(hc_mod, "PRESPLIT_FN", True)
    assert torch.equal(hc_mod.hc_mix_logits(x, fn, NORM_EPS), inline)
    _mix_check(x, fn, f"pieces T={T} {fn_dtype}")


def test_hc_mix_logits_captured_before_its_pieces_exist(monkeypatch):
    """A CUDA graph never reads cached pieces, it splits in the kernel (captured ops do not run, so a cache
    filled during capture would hold unwritten memory; and a graph reading pieces cached before the capture
    would miss later in-place writes to the weight: test_cuda_graph_capture[128] refills fn after
    capturing); replays and eager calls agree."""
    hc_mod = _hc()
    g = _gen(11)
    x = _stream(256, 5120, torch.bfloat16, g)
    fn = torch.randn(MIX_DIM, HC * 5120, device="cuda", generator=g) / (HC * 5120) ** 0.5
    assert hc_mod.PRESPLIT_FN and x.shape[0] > hc_mod.PRESPLIT_MIN_TOKENS
    monkeypatch.setattr(hc_mod, "PRESPLIT_FN", False)
    hc_mod.hc_mix_logits(x.clone(), fn.clone(), NORM_EPS)  # compiles the in-kernel split before the capture
    monkeypatch.setattr(hc_mod, "PRESPLIT_FN", True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            captured = hc_mod.hc_mix_logits(x, fn, NORM_EPS)
    torch.cuda.current_stream().wait_stream(side)
    assert id(fn) not in hc_mod._PIECES
    graph.replay()
    eager = hc_mod.hc_mix_logits(x, fn, NORM_EPS)  # caches the pieces
    assert id(fn) in hc_mod._PIECES
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


# --------------------------------------------------------------- hc_split_sinkhorn ----
@pytest.mark.parametrize("T", TOKENS)
def test_hc_split_sinkhorn(T):
    g = _gen(T)
    mixes = torch.randn(T, MIX_DIM, device="cuda", generator=g) * 3
    scale = 0.5 + torch.rand(3, device="cuda", generator=g)
    base = torch.randn(MIX_DIM, device="cuda", generator=g) * 0.5
    args = (mixes, scale, base, HC, ITERS, HC_EPS)
    out = _hc().hc_split_sinkhorn(*args)
    ref = reference.hc_split_sinkhorn(*args)
    with invariance.batch_invariant(True):
        exact = reference.hc_split_sinkhorn(*args)
    for name, o, r, e, atol in zip(("pre", "post", "comb"), out, ref, exact, (2.0**-20, 2.0**-19, 2.0**-20)):
        assert o.shape == r.shape and o.dtype == r.dtype == torch.float32, name
        d, d_ref, d_exact = (float((a - b).abs().max()) for a, b in ((o, r), (r, e), (o, e)))
        print(f"REPORT sinkhorn T={T} {name}: |kernel-ref| {d:.3g}, |kernel-fp64| {d_exact:.3g}, |ref-fp64| {d_ref:.3g}")
        assert d <= atol, name
        assert d_exact <= 4 * d_ref + 2 * atol / 8, name


# ------------------------------------------------------------------------ hc_mixes ----
@pytest.mark.parametrize("invariant", [False, True])
@pytest.mark.parametrize("T", (1, 7, 64, 128))
@pytest.mark.parametrize("dtype", DTYPES)
def test_hc_mixes_is_mix_logits_then_sinkhorn(T, dtype, invariant):
    """One launch less where K is split (the merge and the Sinkhorn passes in one program per
    token): the bits of hc_mix_logits then hc_split_sinkhorn (both Triton), eager and replayed."""
    hc_mod = _hc()
    g = _gen(T + 11)
    x = _stream(T, 5120, dtype, g)
    fn = torch.randn(MIX_DIM, HC * 5120, device="cuda", generator=g) / (HC * 5120) ** 0.5
    scale = 0.5 + torch.rand(3, device="cuda", generator=g)
    base = torch.randn(MIX_DIM, device="cuda", generator=g) * 0.5
    with invariance.batch_invariant(invariant):
        assert kernels.chosen("hc_mixes", x, fn, NORM_EPS, scale, base, HC, ITERS, HC_EPS) == "triton"
        got = kernels.hc_mixes(x, fn, NORM_EPS, scale, base, HC, ITERS, HC_EPS)
        two = hc_mod.hc_split_sinkhorn(hc_mod.hc_mix_logits(x, fn, NORM_EPS), scale, base, HC, ITERS, HC_EPS)
        for name, a, b in zip(("pre", "post", "comb"), got, two):
            assert a.shape == b.shape and torch.equal(a, b), name
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = hc_mod.hc_mixes(x, fn, NORM_EPS, scale, base, HC, ITERS, HC_EPS)
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(a, b) for a, b in zip(captured, two))


# --------------------------------------------------------------------- hc_pre/post ----
@pytest.mark.parametrize("T", TOKENS)
@pytest.mark.parametrize("D", HIDDEN)
@pytest.mark.parametrize("dtype", DTYPES)
def test_hc_pre(T, D, dtype):
    g = _gen(T + D)
    x = _stream(T, D, dtype, g)
    pre = torch.sigmoid(torch.randn(T, HC, device="cuda", generator=g)) + HC_EPS
    out = _hc().hc_pre(x, pre)
    S = (pre.double().unsqueeze(-1) * x.double().abs()).sum(-2)
    _assert_sum_close(out, reference.hc_pre(x, pre), S, f"hc_pre T={T} D={D} {dtype}")


@pytest.mark.parametrize("T", TOKENS)
@pytest.mark.parametrize("D", HIDDEN)
@pytest.mark.parametrize("dtype", DTYPES)
def test_hc_post(T, D, dtype):
    g = _gen(T + D)
    residual = _stream(T, D, dtype, g)
    y = torch.randn(T, D, device="cuda", generator=g).to(dtype)
    post = 2 * torch.sigmoid(torch.randn(T, HC, device="cuda", generator=g))
    comb = torch.softmax(torch.randn(T, HC, HC, device="cuda", generator=g), -1)
    out = _hc().hc_post(y, residual, post, comb)
    S = (post.double().unsqueeze(-1) * y.double().abs().unsqueeze(-2)
         + (comb.double().unsqueeze(-1) * residual.double().abs().unsqueeze(-2)).sum(-3))
    _assert_sum_close(out, reference.hc_post(y, residual, post, comb), S, f"hc_post T={T} D={D} {dtype}")


def test_hc_pre_post_strided_inputs():
    """Views as the model produces them: pre/post/comb sliced out of wider tensors."""
    g = _gen(11)
    T, D = 7, 4096
    x = _stream(T, D, torch.bfloat16, g)
    wide = torch.rand(T, MIX_DIM + 8, device="cuda", generator=g)
    pre, post = wide[:, :HC], wide[:, HC : 2 * HC] * 2
    comb = wide[:, 2 * HC : 2 * HC + HC * HC].unflatten(-1, (HC, HC))
    y = torch.randn(T, 2 * D, device="cuda", generator=g).to(torch.bfloat16)[:, ::2]
    S = (pre.double().unsqueeze(-1) * x.double().abs()).sum(-2)
    _assert_sum_close(_hc().hc_pre(x, pre), reference.hc_pre(x, pre), S, "hc_pre strided")
    S = (post.double().unsqueeze(-1) * y.double().abs().unsqueeze(-2)
         + (comb.double().unsqueeze(-1) * x.double().abs().unsqueeze(-2)).sum(-3))
    _assert_sum_close(_hc().hc_post(y, x, post, comb), reference.hc_post(y, x, post, comb), S, "hc_post strided")


# ------------------------------------------------------------------------ rms_norm ----
def _assert_norm_close(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert out.shape == ref.shape and out.dtype == ref.dtype, what
    diff = (out.double() - ref.double()).abs()
    bound = 2.0**-19 * ref.double().abs() if out.dtype == torch.float32 else _bf16_ulp(out, ref)
    print(f"REPORT {what}: max rel {float((diff / ref.double().abs().clamp_min(1e-30)).max()):.3g}, "
          f"bit-equal fraction {float((diff == 0).double().mean()):.6f}")
    assert (diff <= bound + 1e-30).all(), what


@pytest.mark.parametrize("T", TOKENS)
@pytest.mark.parametrize("width", (7168, 5120, 4096, 1536, 512))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weighted", (True, False))
def test_rms_norm(T, width, dtype, weighted):
    g = _gen(T + width)
    x = (torch.randn(T, width, device="cuda", generator=g) * 3).to(dtype)
    w = (0.5 + torch.rand(width, device="cuda", generator=g)) if weighted else None
    _assert_norm_close(_nr().rms_norm(x, w, NORM_EPS), reference.rms_norm(x, w, NORM_EPS),
                       f"rms_norm T={T} N={width} {dtype} weighted={weighted}")


@pytest.mark.parametrize("T", TOKENS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_hc_pre_norm(T, dtype):
    """One kernel for rms_norm(hc_pre(x, pre)): within the norm's bound of the reference, and
    against the two Triton kernels it replaces (the same arithmetic: reported bit for bit)."""
    g = _gen(T + 5)
    x = _stream(T, 5120, dtype, g)
    pre = torch.sigmoid(torch.randn(T, HC, device="cuda", generator=g)) + HC_EPS
    w = 0.5 + torch.rand(5120, device="cuda", generator=g)
    assert kernels.chosen("hc_pre_norm", x, pre, w, NORM_EPS) == "triton"
    fused = _nr().hc_pre_norm(x, pre, w, NORM_EPS)
    two = _nr().rms_norm(_hc().hc_pre(x, pre), w, NORM_EPS)
    print(f"REPORT hc_pre_norm T={T} {dtype}: bit-equal to hc_pre + rms_norm (Triton) {torch.equal(fused, two)}")
    _assert_norm_close(fused, reference.hc_pre_norm(x, pre, w, NORM_EPS), f"hc_pre_norm T={T} {dtype}")
    if T > 1:  # a token alone == batched
        assert torch.equal(_nr().hc_pre_norm(x[1:2], pre[1:2], w, NORM_EPS), fused[1:2])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_heads_strided_bf16_weight(dtype):
    """Per-head weightless norm of q [T, 64, 512], a strided row view, a bf16 weight."""
    g = _gen(3)
    q = torch.randn(128, 64, 512, device="cuda", generator=g).to(dtype)
    _assert_norm_close(_nr().rms_norm(q, None, NORM_EPS), reference.rms_norm(q, None, NORM_EPS), "per-head")
    x = _stream(7, 4096, dtype, g)[:, 1]  # rows 4 * 4096 apart
    w = (0.5 + torch.rand(4096, device="cuda", generator=g)).to(torch.bfloat16)
    _assert_norm_close(_nr().rms_norm(x, w, NORM_EPS), reference.rms_norm(x, w, NORM_EPS), "strided rows")


# ---------------------------------------------------------------------- apply_rope ----
def _freqs(S: int, half: int, g: torch.Generator) -> torch.Tensor:
    angles = torch.rand(S, half, device="cuda", generator=g, dtype=torch.float64) * 1000
    return torch.polar(torch.ones_like(angles), angles).to(torch.complex64)


@pytest.mark.parametrize("S", TOKENS)
@pytest.mark.parametrize("shape", ((64, 512), (512,), (64,), (64, 128)))  # q / window kv / rope-only / indexer q
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inverse", (False, True))
def test_apply_rope(S, shape, dtype, inverse):
    g = _gen(S + len(shape))
    rd = 64
    x = torch.randn(S, *shape, device="cuda", generator=g).to(dtype)
    freqs = _freqs(S, rd // 2, g)
    out = _nr().apply_rope(x, freqs, inverse)
    ref = reference.apply_rope(x, freqs, inverse)
    assert torch.equal(out[..., :-rd], ref[..., :-rd])  # the copied part
    pairs = x[..., -rd:].double().abs().unflatten(-1, (-1, 2)).sum(-1)  # |xr| + |xi| >= sum |terms|
    S_ = pairs.repeat_interleave(2, -1)
    _assert_sum_close(out[..., -rd:], ref[..., -rd:], S_, f"rope S={S} {shape} {dtype} inverse={inverse}")


@pytest.mark.parametrize("S", TOKENS)
@pytest.mark.parametrize("inverse", (False, True))
def test_apply_rope_overwrite_is_in_place_with_the_same_bits(S, inverse):
    """overwrite=True (q after wq_b, the attention output before wo_a): x itself comes back, rotated in place,
    the same bits as out of place; the first dims are never rewritten."""
    g = _gen(S + 11)
    x = torch.randn(S, 64, 512, device="cuda", generator=g).bfloat16()
    freqs = _freqs(S, 32, g)
    want = _nr().apply_rope(x, freqs, inverse)
    y = x.clone()
    got = _nr().apply_rope(y, freqs, inverse, overwrite=True)
    assert got.data_ptr() == y.data_ptr() and torch.equal(got, want)


# ---------------------------------------------------------------------- CUDA graphs ----
def _graph_matches_eager(fn, inputs: list[torch.Tensor], refill) -> None:
    """Capture fn(*inputs) once; replay must equal the eager result, also after refill(inputs)."""
    eager = fn(*inputs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(*inputs)  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fn(*inputs)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(_flat(captured), _flat(eager)):
        assert torch.equal(a, b)
    refill(inputs)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(_flat(captured), _flat(fn(*inputs))):
        assert torch.equal(a, b)


def _flat(out) -> tuple[torch.Tensor, ...]:
    return tuple(out) if isinstance(out, tuple) else (out,)


def _refill(seed: int):
    def refill(inputs):
        g = _gen(seed)
        for t in inputs:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                t.copy_((torch.rand(t.shape, device="cuda", generator=g) + 0.25).to(t.dtype))
    return refill


@pytest.mark.parametrize("T", (1, 7, 128))
def test_cuda_graph_capture(T):
    g = _gen(T)
    D = 5120
    hc, nr = _hc(), _nr()
    x = _stream(T, D, torch.bfloat16, g)
    fn = torch.randn(MIX_DIM, HC * D, device="cuda", generator=g) / (HC * D) ** 0.5
    mixes = torch.randn(T, MIX_DIM, device="cuda", generator=g)
    scale = 0.5 + torch.rand(3, device="cuda", generator=g)
    base = torch.randn(MIX_DIM, device="cuda", generator=g)
    pre = torch.rand(T, HC, device="cuda", generator=g)
    comb = torch.rand(T, HC, HC, device="cuda", generator=g)
    y = torch.randn(T, D, device="cuda", generator=g).to(torch.bfloat16)
    w = 0.5 + torch.rand(D, device="cuda", generator=g)
    q = torch.randn(T, 64, 512, device="cuda", generator=g).to(torch.bfloat16)
    freqs = _freqs(T, 32, g)
    cases = {
        "hc_mix_logits": (lambda a, b: hc.hc_mix_logits(a, b, NORM_EPS), [x, fn]),
        "hc_split_sinkhorn": (lambda m, s, b: hc.hc_split_sinkhorn(m, s, b, HC, ITERS, HC_EPS), [mixes, scale, base]),
        "hc_pre": (hc.hc_pre, [x, pre]),
        "hc_post": (hc.hc_post, [y, x, pre, comb]),
        "rms_norm": (lambda a, b: nr.rms_norm(a, b, NORM_EPS), [y, w]),
        "rms_norm_weightless": (lambda a: nr.rms_norm(a, None, NORM_EPS), [q]),
        "apply_rope": (nr.apply_rope, [q, freqs]),
        "apply_rope_inverse": (lambda a, f: nr.apply_rope(a, f, True), [q, freqs]),
    }
    for i, (name, (f, inputs)) in enumerate(cases.items()):
        refill = _refill(100 + i) if name not in ("apply_rope", "apply_rope_inverse") else _refill_rope(100 + i)
        _graph_matches_eager(f, inputs, refill)


def _refill_rope(seed: int):
    def refill(inputs):
        g = _gen(seed)
        q, freqs = inputs
        q.copy_(torch.randn(q.shape, device="cuda", generator=g).to(q.dtype))
        freqs.copy_(_freqs(freqs.shape[0], freqs.shape[1], g))
    return refill


@pytest.mark.parametrize("T", (1, 32, 4096))
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_in_dtype(T, dtype):
    """V4's per-head query norm (every step rounded to the dtype, as torch's ops in it): within
    two ulps of the dtype of torch's result (the sum of squares in another order can move the
    rounded mean by one ulp), mostly bit-equal (reported); a head alone == batched."""
    g = _gen(T + 11)
    q = (torch.randn(T, 64, 512, device="cuda", generator=g) * 2).to(dtype)
    assert kernels.chosen("rms_norm_in_dtype", q, NORM_EPS) == "triton"
    got, want = _nr().rms_norm_in_dtype(q, NORM_EPS), reference.rms_norm_in_dtype(q, NORM_EPS)
    diff = (got.double() - want.double()).abs()
    bound = 2.0**-19 * want.double().abs() if dtype == torch.float32 else 2 * _bf16_ulp(got, want)
    print(f"REPORT rms_norm_in_dtype T={T} {dtype}: bit-equal fraction {float((diff == 0).double().mean()):.6f}")
    assert got.shape == want.shape and got.dtype == dtype and bool((diff <= bound + 1e-30).all())
    assert torch.equal(_nr().rms_norm_in_dtype(q[:1, 3:4], NORM_EPS), got[:1, 3:4])
