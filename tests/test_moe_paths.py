"""Which path ``triton_moe.moe_experts`` takes where none is given (pure Python: no kernel runs)."""

from __future__ import annotations


def test_prefill_path_by_activation_scales_and_storage():
    """Prefill-sized MoE calls: V4's activation scales per 128 with (1, 128) E4M3 experts take FP8
    products ("fp8") from 128 rows an expert; V4.1's per 32, (1, 32) experts and packed FP4 the bf16 path; batch-invariant
    mode always the bf16 path (one path for every call, decode and prefill alike)."""
    import torch

    from deepinfer_adapters.kernels import invariance, triton_moe

    w2 = torch.zeros(2, 64, 128, dtype=torch.float8_e4m3fn)
    x = torch.zeros(1, 128)
    pick = lambda block, act, fp4=False, rows=192: triton_moe._default_path(  # noqa: E731
        x, w2, None, block, act, True, fp4, 32, rows)
    assert pick((1, 128), 128) == "fp8"
    assert pick((1, 128), 128, rows=96) == "bf16"  # few rows an expert: the bf16 path's 128-row tiles win
    assert pick((1, 128), 32) == "bf16"
    assert pick((1, 32), 128) == "bf16"
    assert pick((1, 32), 128, fp4=True) == "bf16"
    with invariance.batch_invariant(True):
        assert pick((1, 128), 32) == pick((1, 128), 128) == "bf16"
    triton_moe.LARGE_PATH = "bf16"  # one path for every prefill call, as the benchmarks pin it
    try:
        assert pick((1, 128), 128) == "bf16"
    finally:
        triton_moe.LARGE_PATH = "auto"
