"""Split-K partials added by the GEMM's own last program (``fp8_triton_jit.add_splits_when_last``, counters
from ``split_counters``) against the second launch it replaces (``sum_splits``, ``split_counters.ENABLED`` off), under Triton's CPU
interpreter, through ``triton_fp8_gemm.gemm`` on the swapped decode kernel (FP8 steps: the interpreter's
bf16 products are not usable): the same bits, two calls in a row (the counters must be left at zero, or the
second call's last program is never found and its output is never written), the counters zero after (every
new buffer NaN, so a partial read before its program wrote it shows), and
the result against the float64 product of the dequantized operands; the same bits also from the rows-first
kernel (``fp8_gemm_kernel``) and the bf16 linear (``triton_linear``). The compiled kernel's fences and
atomics run in tests/gpu/test_fp8_linear_gpu.py."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.kernels import split_counters
from tests.triton_interpreter import run_interpreted

pytest.importorskip("triton")

SCRIPT = r"""
import torch
from deepinfer_adapters.kernels import split_counters
from deepinfer_adapters.kernels import triton_fp8_gemm as tg

_empty = torch.empty
def poisoned_empty(*args, **kwargs):  # every new buffer NaN: a partial read before it is written shows
    t = _empty(*args, **kwargs)
    return t.fill_(float("nan")) if t.is_floating_point() else t
torch.empty = poisoned_empty

g = torch.Generator().manual_seed(0)
M, N, K = 3, 160, 1024  # three N tiles (the last masked), K split in four
a = (torch.randn(M, K, generator=g) * 20).to(torch.float8_e4m3fn)
sa = torch.pow(2.0, torch.randint(-6, 2, (M, K // 32), generator=g).float())
w = (torch.randn(N, K, generator=g) * 20).to(torch.float8_e4m3fn)
sw = torch.randint(118, 124, (N // 32, K // 32), generator=g, dtype=torch.uint8)
cfg = tg.GemmConfig(16, 64, 4, 4, 4, programs=12)
print("split", tg.split_k(3, K, 128, 12)[0])
want = (a.double() * sa.double().repeat_interleave(32, 1)) @ (
    w.double() * torch.pow(2.0, sw.double() - 127).repeat_interleave(32, 0).repeat_interleave(32, 1)).T
outs = {}
for add in (False, True, True):
    split_counters.ENABLED = add
    out = tg.gemm(a, sa, 32, w, sw, (32, 32), torch.bfloat16, config=cfg, swapped=True, bf16_steps=False)
    outs.setdefault(add, []).append(out)
print("same_bits", all(torch.equal(o, outs[False][0]) for o in outs[True]))
print("counters_zero", all(bool((b == 0).all()) for b in split_counters._buffers.values()),
      len(split_counters._buffers))
rel = ((outs[True][1].double() - want).abs().max() / want.abs().max()).item()
print("rel", f"{rel:.3e}")

# the rows-first kernel (fp8_gemm_kernel; three row tiles of 16 over two N tiles of 128) and the bf16 linear
# (triton_linear; the interpreter's bf16 products are off, but the same both ways)
from deepinfer_adapters.kernels import triton_linear
a40, sa40 = (torch.randn(40, K, generator=g) * 20).to(torch.float8_e4m3fn), sa[:1].expand(40, -1).contiguous()
xf = torch.randn(40, K, generator=g)
wb = torch.randn(N, K, generator=g).bfloat16()
calls = {"rows_first": lambda: tg.gemm(a40, sa40, 32, w, sw, (32, 32), torch.bfloat16, swapped=False,
                                       config=tg.GemmConfig(16, 128, 4, 4, 4, programs=12)),
         "linear": lambda: triton_linear.linear(xf, wb, config=triton_linear.LinearConfig(block_n=64, programs=12,
                                                                                           min_steps=2))}
for name, call in calls.items():
    split_counters.ENABLED = False
    second_launch = call()
    split_counters.ENABLED = True
    taken = dict(split_counters._next)
    own = [call(), call()]
    print(name, all(torch.equal(o, second_launch) for o in own) and split_counters._next != taken
          and not second_launch.isnan().any())
"""


def test_last_program_adds_the_splits_with_the_second_launchs_bits():
    lines = dict(line.split(" ", 1) for line in run_interpreted(SCRIPT).strip().splitlines())
    assert int(lines["split"]) == 4
    assert lines["same_bits"] == "True"
    assert lines["counters_zero"] == "True 1"
    assert float(lines["rel"]) < 2**-7
    assert lines["rows_first"] == "True" and lines["linear"] == "True"


def test_counters_hand_out_disjoint_slices_and_wrap():
    dev = torch.device("cpu")
    split_counters._buffers.pop(dev, None)
    split_counters._next.pop(dev, None)
    a = split_counters.take(dev, 100)
    b = split_counters.take(dev, 50)
    assert a.shape == (100,) and b.shape == (50,) and bool((a == 0).all()) and bool((b == 0).all())
    assert b.data_ptr() == a.data_ptr() + 100 * 4  # the next slice, not the same counters
    c = split_counters.take(dev, split_counters.COUNTERS - 120)  # does not fit after 150: starts again at 0
    assert c.data_ptr() == a.data_ptr()
    assert split_counters.take(dev, split_counters.COUNTERS + 1) is None
    split_counters._buffers.pop(dev, None)
    split_counters._next.pop(dev, None)
