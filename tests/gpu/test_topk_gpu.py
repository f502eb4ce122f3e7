"""The CUDA top-k kernels (Gluon, the default, and Triton): ``topk_lowest_index`` against the reference sort,
``topk_torch_order`` against torch.topk itself."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import gluon_topk, reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")
BACKENDS = ["gluon", "gluon_split", "triton"]


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    """Each kernel pinned in turn (the Gluon one is what a CUDA GPU picks by itself), "gluon_split": the Gluon
    kernel with the row in two parts (``gluon_topk.SPLIT_ROW``)."""
    s = torch.zeros(4, 1000, device="cuda")
    assert kernels.chosen("topk_lowest_index", s, 8) == kernels.chosen("topk_torch_order", s, 8) == "gluon"
    name, _, split = request.param.partition("_")
    monkeypatch.setattr(gluon_topk, "SPLIT_ROW", bool(split))
    for op in ("topk_lowest_index", "topk_torch_order"):
        kernels.use_backend(op, name)
    yield name
    for op in ("topk_lowest_index", "topk_torch_order"):
        kernels.use_backend(op, None)


@pytest.mark.parametrize("n,m,k", [(1, 2048, 512), (8, 4096, 512), (300, 1000, 64), (3, 16384, 2048), (5, 7, 7),
                                   (1, 1026, 512), (2, 4104, 512), (4, 33, 5), (3, 65, 20), (2, 1300, 300)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_topk_matches_reference(n, m, k, dtype, backend):
    g = torch.Generator(device="cuda").manual_seed(n + m)
    s = torch.randn(n, m, device="cuda", generator=g).to(dtype)
    s[:, ::9] = float("-inf")
    s[:, 1::13] = 0.25
    assert kernels.chosen("topk_lowest_index", s, k) == backend
    idx, val = kernels.topk_lowest_index(s, k)
    ref_idx, ref_val = reference.topk_lowest_index(s, k)
    assert torch.equal(idx, ref_idx) and torch.equal(val, ref_val)


def _tie_heavy(n: int, m: int, dtype: torch.dtype, nan: bool) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(n * 7 + m)
    s = torch.randn(n, m, device="cuda", generator=g).to(dtype)
    s[:, ::9] = float("-inf")
    s[:, 1::13] = 0.25
    s[:, 2::17] = 0.0
    s[:, 3::17] = -0.0
    s[: n // 2, m // 2:] = float("-inf")  # rows with fewer finite scores than k: ties at -inf decide
    if nan:
        s[:, 4::29] = float("nan")
    return s


def _bits(v: torch.Tensor) -> torch.Tensor:
    return v.view(torch.int16 if v.element_size() == 2 else torch.int32)


# decode (a few rows: torch's single-block top-k) and prefill (8192 rows: its multi-block one) shapes
@pytest.mark.parametrize("n,m,k", [(1, 1024, 512), (8, 1024, 512), (32, 1024, 512), (8, 64, 16), (128, 4096, 512),
                                   (8192, 2048, 512), (4096, 1024, 512), (3, 16384, 2048), (5, 7, 7), (1, 4104, 512),
                                   (4, 1026, 512), (2, 16383, 2048)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("nan", [False, True])
def test_topk_torch_order_takes_torch_topks_set(n, m, k, dtype, nan, backend):
    s = _tie_heavy(n, m, dtype, nan)
    assert kernels.chosen("topk_torch_order", s, k) == backend
    idx, val = kernels.topk_torch_order(s, k)
    want = torch.sort(s.topk(k, dim=-1, sorted=False).indices, dim=-1).values
    assert torch.equal(idx, want)
    assert torch.equal(_bits(val), _bits(s.gather(-1, want)))
