"""``sparse_attn_inverse_rope``: the decode split's merge rotating the rope dims back (kernels/triton_sparse_attn.py)
under Triton's CPU interpreter gives the bits of the merge without it followed by the ``apply_rope`` kernel (inverse),
with more heads than a program holds and rope dims narrower than d; and the model's dispatch of the op on the CPU.
The interpreter's bf16 dots do not give the GPU's values, so the whole op is compared with the two-launch path only;
the merge alone is also checked on hand-made partials against the merge formula. Values against the reference and
the bits on the GPU: tests/gpu/test_sparse_attn_gpu.py."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference
from tests.triton_interpreter import run_interpreted

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import triton_norm_rope as tr, triton_sparse_attn as ta
g = torch.Generator().manual_seed(3)
# the merge on hand-made partials: [S, NS, H(, d)]
_, _, merge, _ = ta._kernels()
S, NS, H, d = 2, 3, 20, 128
pm, pl = torch.randn(S, NS, H, generator=g), torch.rand(S, NS, H, generator=g) + 0.5
pacc, sink = torch.randn(S, NS, H, d, generator=g), torch.randn(H, generator=g)
freqs = torch.polar(torch.ones(S, 32), torch.rand(S, 32, generator=g) * 6)
f = torch.view_as_real(freqs).reshape(S, 64).contiguous()
outs = []
for unrope in (False, True):
    out = torch.empty(S, H, d, dtype=torch.bfloat16)
    merge[(S, 2, 2)](pm, pl, pacc, sink, f, out, out.stride(0), out.stride(1), H, d, NS, BLOCK_H=16, D_PAD=64,
                     UNROPE=unrope, num_warps=4)
    outs.append(out)
w = torch.exp(pm - pm.amax(1, keepdim=True))
formula = (w[..., None] * pacc).sum(1) / ((w * pl).sum(1) + torch.exp(sink - pm.amax(1)))[..., None]
print("merge", int(torch.allclose(outs[0].float(), formula, rtol=2 ** -7, atol=1e-6)),
      int(torch.equal(outs[1], tr.apply_rope(outs[0].clone(), freqs, inverse=True, overwrite=True))))
# the whole op against the split attention, then the apply_rope kernel
for S, H, d, K in [(1, 20, 128, 200), (3, 16, 192, 130)]:
    q = torch.randn(S, H, d, generator=g).bfloat16()
    kv = torch.randn(300, d, generator=g).bfloat16()
    idx = torch.randint(0, 300, (S, K), generator=g)
    idx[:, ::7] = -1
    sink = torch.randn(H, generator=g)
    freqs = torch.polar(torch.ones(S, 32), torch.rand(S, 32, generator=g) * 6)
    got = ta.sparse_attn_inverse_rope(q, kv, sink, idx, 0.1, freqs)
    split = ta.sparse_attn(q, kv, sink, idx, 0.1, config=ta.DECODE_SPLIT_CONFIG)
    print("op", S, int(torch.equal(got[..., :d - 64], split[..., :d - 64])),
          int(torch.equal(got, tr.apply_rope(split.clone(), freqs, inverse=True, overwrite=True))))
"""


def test_merge_rotates_the_rope_dims_with_the_two_launches_bits_under_the_interpreter():
    pytest.importorskip("triton")
    assert run_interpreted(SCRIPT).split("\n")[:3] == ["merge 1 1", "op 1 1 1", "op 3 1 1"]


def test_cpu_dispatch_is_the_attention_then_the_inverse_rotation():
    g = torch.Generator().manual_seed(0)
    S, H, d = 2, 4, 64
    q, kv = torch.randn(S, H, d, generator=g).bfloat16(), torch.randn(40, d, generator=g).bfloat16()
    idx = torch.randint(-1, 40, (S, 100), generator=g)
    sink = torch.randn(H, generator=g)
    freqs = torch.polar(torch.ones(S, 8), torch.rand(S, 8, generator=g) * 6)
    assert kernels.chosen("sparse_attn_inverse_rope", q, kv, sink, idx, 0.2, freqs) == "composed"
    got = kernels.sparse_attn_inverse_rope(q, kv, sink, idx, 0.2, freqs, probs_bf16=False)
    assert torch.equal(got, reference.sparse_attn_inverse_rope(q, kv, sink, idx, 0.2, freqs, probs_bf16=False))
    # the rope dims rotated back: rotating them forward again gives the attention's output (to bf16 rounding)
    attn = reference.sparse_attn(q, kv, sink, idx, 0.2, probs_bf16=False)
    assert torch.equal(got[..., :-16], attn[..., :-16])
    again = reference.apply_rope(got.float(), freqs)
    assert torch.allclose(again, attn.float(), rtol=2 ** -7, atol=2 ** -8)
    assert not torch.allclose(got[..., -16:].float(), attn[..., -16:].float(), rtol=2 ** -7, atol=2 ** -8)
