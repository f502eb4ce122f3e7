"""``store_rows`` on CUDA: the Triton kernel writes the torch reference's pool bit for bit, at V4.1's decode
shapes, with values rounded to a bf16 pool (nearest even, as torch's cast) and rows not kept left as they are."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")


@pytest.mark.parametrize("B,R,C", [(1, 4104, 512), (8, 8 * 2052, 128), (5, 17, 40)])
@pytest.mark.parametrize("value_dtype,pool_dtype", [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.bfloat16),
                                                    (torch.float32, torch.float32)])
@pytest.mark.parametrize("with_keep", [True, False])
def test_store_rows_matches_reference(B, R, C, value_dtype, pool_dtype, with_keep):
    g = torch.Generator(device="cuda").manual_seed(B + C)
    pool = torch.randn(R, C, device="cuda", generator=g).to(pool_dtype)
    addr = torch.randperm(R, device="cuda", generator=g)[:B]
    value = torch.randn(B, C, device="cuda", generator=g).to(value_dtype)
    keep = (torch.rand(B, device="cuda", generator=g) > 0.4) if with_keep else None
    assert kernels.chosen("store_rows", pool, addr, value, keep) == "triton"
    got, want = pool.clone(), pool.clone()
    kernels.store_rows(got, addr, value, keep)
    reference.store_rows(want, addr, value, keep)
    assert torch.equal(got, want)
