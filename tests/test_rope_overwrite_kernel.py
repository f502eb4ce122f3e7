"""``apply_rope(..., overwrite=True)``: the Triton kernel under the CPU interpreter rotates x's last dims in place
(the first dims untouched, never rewritten) with the out-of-place kernel's bits (also where the two take other
row tiles), for both directions and for a strided view; where x's last dim is strided (copied to be read) it falls back to out of place, x unchanged. The reference does
the same in place (the CPU model runs it: every model test covers the callers)."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.kernels import reference
from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_norm_rope as tr

g = torch.Generator().manual_seed(2)
S, H, dim, rd = 5, 3, 48, 16
freqs = torch.polar(torch.ones(S, rd // 2), torch.rand(S, rd // 2, generator=g) * 6)
tr.ROPE_TILE = 64  # in place a program takes 64 // 16 = 4 rows, out of place 64 // 64 = 1: other tiles, same bits
for inverse in (False, True):
    x = torch.randn(S, H, dim, generator=g)
    want = tr.apply_rope(x, freqs, inverse)
    y = x.clone()
    got = tr.apply_rope(y, freqs, inverse, overwrite=True)
    print(int(inverse), int(got.data_ptr() == y.data_ptr()), int(torch.equal(got, want)),
          int(torch.equal(y[..., :dim - rd], x[..., :dim - rd])))
xs = torch.randn(H, S, dim, generator=g).transpose(0, 1)  # [S, H, dim], heads outermost: strided, in place
want = tr.apply_rope(xs.clone(), freqs)
got = tr.apply_rope(xs, freqs, False, overwrite=True)
print("strided", int(got.data_ptr() == xs.data_ptr()), int(torch.equal(got, want)))
xt = torch.randn(S, dim, H, generator=g).transpose(1, 2)  # [S, H, dim] with the last dim strided: copied
before = xt.clone()
got = tr.apply_rope(xt, freqs, False, overwrite=True)
print("copied", int(got.data_ptr() != xt.data_ptr()), int(torch.equal(xt, before)),
      int(torch.equal(got, tr.apply_rope(before, freqs))))
"""


def test_rope_overwrite_in_place_with_the_same_bits_under_the_interpreter():
    lines = run_interpreted(SCRIPT).strip().splitlines()
    assert lines[:2] == ["0 1 1 1", "1 1 1 1"]
    assert lines[2:] == ["strided 1 1", "copied 1 1 1"]


def test_reference_rope_overwrite_is_in_place_and_equal():
    g = torch.Generator().manual_seed(0)
    freqs = torch.polar(torch.ones(4, 8), torch.rand(4, 8, generator=g))
    x = torch.randn(4, 2, 40, generator=g, dtype=torch.float64)
    want = reference.apply_rope(x, freqs, inverse=True)
    got = reference.apply_rope(x, freqs, inverse=True, overwrite=True)
    assert got is x and torch.equal(got, want)
