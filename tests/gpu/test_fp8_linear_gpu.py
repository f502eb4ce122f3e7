"""Triton ``fp8_linear`` / ``fp8_grouped_linear`` against the torch references, on CUDA.

Tolerance. The activation codes and scales must equal the reference's bit for bit
(same quantization rule; tested directly). Both sides then sum exact products of the
same values in fp32 -- the reference in one bf16 GEMM, the kernel per 32-wide K step
on FP8 tensor cores, promoted to an fp32 accumulator after each step -- and round once
to bf16. So an output element rounds to the same bf16 value or to its neighbour
(rtol 2^-7), except that a sum cancelling to near 0 carries the fp32 error of the big
terms (atol 2^-10 max|ref|). Over a tensor ||out - ref|| / ||ref|| stays under one bf16
ulp: asserted <= 2e-3 (seen: see the REPORT lines).
"""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference_fp8
from deepinfer_adapters.model_impl.quant import fp8_roundtrip, quant_fp8_blocks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")

NORM_RTOL = 2e-3


def _tri():
    from deepinfer_adapters.kernels import triton_fp8_gemm

    return triton_fp8_gemm


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def _weight(N, K, block, seed, f32_scale=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(N, K, device="cuda", generator=g) / K**0.5
    w = w * torch.logspace(-2, 1, K, device="cuda")[torch.randperm(K, device="cuda", generator=g)]  # uneven blocks
    w8, scale = quant_fp8_blocks(w, block)
    return w8, scale.float() if f32_scale else scale


def _x(M, K, seed):
    g = torch.Generator(device="cuda").manual_seed(seed + 1000)
    x = torch.randn(M, K, device="cuda", generator=g) * torch.logspace(-3, 2, K, device="cuda")
    return x.bfloat16()


def _check(out, ref, label):
    rel = _rel(out, ref)
    print(f"REPORT {label}: rel={rel:.2e} maxabs={float((out.float() - ref.float()).abs().max()):.2e}")
    assert torch.isfinite(out).all()
    assert rel <= NORM_RTOL, label
    torch.testing.assert_close(out.float(), ref.float(), rtol=2.0**-7, atol=2.0**-10 * float(ref.float().abs().max()))


@pytest.mark.parametrize("block", [32, 128])
def test_act_quant_matches_reference_bitwise(block):
    tri = _tri()
    x = _x(37, 1024, 0)
    x[3, :block] = 0  # an all-zero block: the amax floor
    q, s = tri.act_quant(x, block)
    deq = (q.float().unflatten(-1, (-1, block)) * s[..., None]).flatten(-2).to(x.dtype)
    assert torch.equal(deq, fp8_roundtrip(x, block))
    rt, _ = tri.act_quant(x, block, dequant_to=torch.bfloat16)
    assert torch.equal(rt, fp8_roundtrip(x, block))


SHAPES = [(1280, 5120), (512, 5120), (4096, 1280), (5120, 2304), (96, 160)]


def _compare_linear(M, N, K, block, act_block, seeds, what, *, f32_scale=False, fn=None):
    """``fn`` (default: the dispatched fp8_linear) against the torch reference on a random
    weight (seed ``seeds[0]``) and activation (seed ``seeds[1]``)."""
    w8, scale = _weight(N, K, block, seed=seeds[0], f32_scale=f32_scale)
    x = _x(M, K, seeds[1])
    ref = reference_fp8.fp8_linear(x, w8, scale, block, act_block)
    _check((fn or kernels.fp8_linear)(x, w8, scale, block, act_block), ref, what)


@pytest.mark.parametrize("M", [1, 7, 33, 130, 1100])
@pytest.mark.parametrize("N,K", SHAPES)
def test_fp8_linear_v41_blocks(M, N, K):
    _compare_linear(M, N, K, (32, 32), 32, (N + K, M), f"fp8_linear M={M} N={N} K={K} (32,32)")


@pytest.mark.parametrize("path", ["triton", "bf16_cublas"])
@pytest.mark.parametrize("M", [3, 2048])
def test_fp8_linear_paths(M, path):
    _compare_linear(M, 1280, 5120, (32, 32), 32, (1, 2), f"fp8_linear path={path} M={M}",
                    fn=lambda *a: _tri().fp8_linear(*a, path=path))


@pytest.mark.parametrize("M", [2, 300])
def test_fp8_linear_v4_blocks_and_f32_scales(M):
    _compare_linear(M, 1024, 4096, (128, 128), 128, (3, 4), f"fp8_linear M={M} (128,128) f32 scales", f32_scale=True)


@pytest.mark.parametrize("M", [1, 64, 700])
def test_fp8_linear_expert_blocks(M):
    """(1, 32) weight scales (FP4 experts converted to FP8)."""
    _compare_linear(M, 2304, 5120, (1, 32), 32, (5, 6), f"fp8_linear M={M} (1,32)")


@pytest.mark.parametrize("M", [1, 40, 1500])
def test_weight_only_fp8_linear(M):
    """act_block 0: bf16 activations against the dequantized weight (bf16 products)."""
    _compare_linear(M, 1024, 4096, (32, 32), 0, (7, 8), f"fp8_linear act_block=0 M={M}")


@pytest.mark.parametrize("grouped_cublas", [True, False], ids=["cublas_from_large_m", "triton_only"])
@pytest.mark.parametrize("T,Din", [(1, 4096), (9, 4096), (600, 4096), (1100, 4096), (5, 96)])
def test_fp8_grouped_linear(T, Din, grouped_cublas, monkeypatch):
    """One launch for all groups: 128-deep products where Din allows (the weight's 32 else);
    from LARGE_M rows the prefill tile, or (``GROUPED_CUBLAS``, the default) one batched cuBLAS GEMM."""
    from deepinfer_adapters.kernels import triton_fp8_gemm

    monkeypatch.setattr(triton_fp8_gemm, "GROUPED_CUBLAS", grouped_cublas)
    G, R = 8, 1024
    w8, scale = _weight(G * R, Din, (32, 32), seed=9)
    x = _x(T, G * Din, 10).view(T, G, Din)
    ref = reference_fp8.fp8_grouped_linear(x, w8, scale, (32, 32))
    _check(kernels.fp8_grouped_linear(x, w8, scale, (32, 32)), ref, f"fp8_grouped_linear T={T} Din={Din}")
    if T > 1:  # each token's rows alone: the same values to the bf16 rounding
        _check(kernels.fp8_grouped_linear(x[1:2], w8, scale, (32, 32)), ref[1:2], f"fp8_grouped_linear row 1 T={T}")


@pytest.mark.parametrize("M,N,K", [(1, 1280, 5120), (5, 512, 5120), (16, 5120, 2304), (2, 5120, 8192)])
def test_activation_quantized_in_the_gemm_is_bitwise_act_quant(M, N, K):
    """Decode rows: the GEMM quantizes its activation tiles itself (one launch less); the
    codes, scales and so every output bit are those of act_quant + GEMM."""
    tri = _tri()
    w8, scale = _weight(N, K, (32, 32), seed=M)
    x = _x(M, K, M + 1)
    q, s = tri.act_quant(x, 32)
    separate = tri.gemm(q, s, 32, w8, scale, (32, 32), torch.bfloat16)
    fused = tri.gemm(x, None, 32, w8, scale, (32, 32), torch.bfloat16, quantize_a=True)
    print(f"REPORT quantize_a M={M} N={N} K={K}: equal={torch.equal(fused, separate)}")
    assert torch.equal(fused, separate)


@pytest.mark.parametrize("M", [1, 5, 16])
@pytest.mark.parametrize("N,K,block", [(1280, 5120, (32, 32)), (32768, 1280, (32, 32)), (5120, 8192, (32, 32)),
                                       (1024, 4096, (128, 128))])
def test_swapped_decode_kernel(M, N, K, block):
    """Decode rows (<= SWAPPED_ROWS) run fp8_gemm_rows_kernel (W A^T, FP8 wgmma with the weight as
    the 64-row operand): against the reference, and next to the rows-first kernel."""
    tri = _tri()
    act = block[1]
    w8, scale = _weight(N, K, block, seed=N + M)
    x = _x(M, K, M + 7)
    ref = reference_fp8.fp8_linear(x, w8, scale, block, act)
    swapped = tri.fp8_linear(x, w8, scale, block, act, swapped=True, bf16_steps=False)
    rows_first = tri.fp8_linear(x, w8, scale, block, act, swapped=False)
    # the default for decode rows: bf16 steps where the weight has few row tiles (K split), else FP8 steps
    few_tiles = -(-N // tri.BF16_STEPS_CONFIG.block_n) < tri.BF16_STEPS_CONFIG.programs // 4
    default = (tri.fp8_linear(x, w8, scale, block, act, swapped=True, bf16_steps=True, config=tri.BF16_STEPS_CONFIG)
               if few_tiles else swapped)
    assert torch.equal(tri.fp8_linear(x, w8, scale, block, act), default)
    print(f"REPORT swapped vs rows-first M={M} N={N} K={K}: rel={_rel(swapped, rows_first):.2e}")
    _check(swapped, ref, f"fp8_linear swapped M={M} N={N} K={K} {block}")
    _check(rows_first, ref, f"fp8_linear rows-first M={M} N={N} K={K} {block}")
    # bf16 products 128 deep: quantized in the kernel or stored codes and scales, the same operand
    # values, so the same bits
    steps = tri.fp8_linear(x, w8, scale, block, act, swapped=True, bf16_steps=True)
    q, s = tri.act_quant(x, act)
    assert torch.equal(tri.gemm(q, s, act, w8, scale, block, torch.bfloat16, swapped=True, bf16_steps=True), steps)
    _check(steps, ref, f"fp8_linear swapped bf16 steps M={M} N={N} K={K} {block}")


def test_dispatch_picks_triton_on_cuda():
    w8, scale = _weight(64, 128, (32, 32), seed=11)
    x = _x(4, 128, 12)
    assert _tri().supports_linear(x, w8, scale, (32, 32), 32)
    assert not _tri().supports_linear(x.float(), w8, scale, (32, 32), 32)  # float32 numerics: the reference


@pytest.mark.parametrize("scale_kind", ["e8m0", "fp32"])
@pytest.mark.parametrize("N,K,block", [(1536, 5120, (32, 32)), (4100, 1000, (128, 128)), (300, 4096, (1, 32))])
def test_dequant_bf16_kernel_gives_the_torch_bits(N, K, block, scale_kind):
    """The prefill's weight dequantization (one Triton pass on CUDA) against the torch formula on the CPU:
    the same bits, with E8M0 scales (exact products) and fp32 ones (rounded once to bf16)."""
    from deepinfer_adapters.kernels import triton_fp8_gemm as tg

    g = torch.Generator(device="cuda").manual_seed(N + K)
    w = (torch.randn(N, K, device="cuda", generator=g) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    shape = (-(-N // block[0]), -(-K // block[1]))
    if scale_kind == "e8m0":
        scale = (torch.randint(-12, 4, shape, device="cuda", generator=g) + 127).to(torch.uint8)
    else:
        scale = torch.rand(shape, device="cuda", generator=g) * 1e-2
    got = tg.dequant_bf16(w, scale, block)  # on CUDA: the Triton pass
    want = tg.dequant_bf16(w.cpu(), scale.cpu(), block)
    assert got.is_cuda and torch.equal(got.cpu(), want)
