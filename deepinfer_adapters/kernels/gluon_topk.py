"""``topk_lowest_index`` and ``topk_torch_order`` as a Gluon kernel on CUDA (registered as "gluon", above the
Triton kernel): the same picks, values and order as ``triton_topk`` (whose module doc states the two tie rules and
the algorithm), with the layouts and the cross-warp traffic written out (``gluon_topk_jit``).

Why: at decode the top-k sits on the compressed layers' keys chain, which ends their attention (session 34's B=1
timeline: it ends 7.2 us after the index scores at rows of 1026 scores, 12.2-12.4 us at 4104). Offline SASS of the
Triton kernel for a bf16 row of 4104 scores (a 8192 block, 16 warps): 3128 instructions a thread, 52 barriers, 80
lane shuffles in its scan and the stores' layout conversion through shared memory. This kernel: 2008, 33 and 5
(``benchmarks/topk_sass.py``). Not runnable by Triton's interpreter: the CPU tests run the Triton kernel; the GPU
tests check this one against the reference and torch.topk.
"""

from __future__ import annotations

import functools
import importlib

import torch

from deepinfer_adapters.kernels.triton_topk import register_both, rows_topk
from deepinfer_adapters.kernels.triton_support import FLOAT_DTYPES, interpreting, triton_available

GLUON_TOPK = True
MAX_ROW = 16384  # the row in the registers of one program
MAX_WARPS = 16
ROW_PER_THREAD = 8  # scores a thread holds where the row allows (the warps follow, up to MAX_WARPS)
# the row in two parts where that leaves a thread fewer scores (``shape``): a row just past a power of two (4104
# scores) takes 8 + 1 scores a thread on 16 warps instead of a padded block's 16. Offline SASS (benchmarks/
# topk_sass.py, bf16): 4104 scores 2008 -> 1376 instructions a thread, 1026 scores 1072 -> 840. H200 alone
# (bench_topk.py, session 36, part s36b): 4104 scores 9.6 -> 7.5 us, 1026 4.8 -> 4.1; the same picks. V4.1 at real
# widths, 7 alternating rounds on a noisy machine: B=1 paired -22 us with it (5 of 7), B=8 +3 (2 of 7)
SPLIT_ROW = True


@functools.cache
def _capable(device_index: int) -> bool:
    """An sm_80+ GPU (REDUX) and a Triton with Gluon."""
    if not triton_available() or torch.cuda.get_device_capability(device_index) < (8, 0):
        return False
    try:
        importlib.import_module("deepinfer_adapters.kernels.gluon_topk_jit")
    except Exception:  # a Triton without Gluon
        return False
    return True


def shape(m: int) -> tuple[int, int, int]:
    """(warps, scores a thread in the row's first part, in its second; all powers of two, the second 0 where there
    is none) for a row of ``m`` scores. The warps follow the row's power-of-two block. With ``SPLIT_ROW`` the first
    part is half the block and the second covers the rest (``topk_gluon_kernel``) where that leaves a thread fewer
    scores, so a row just past a power of two does not take twice the lanes (4104 scores: 8 + 1 a thread on 16
    warps, not 16); without, the block is one part."""
    block = max(32, 1 << max(0, m - 1).bit_length())
    warps = max(1, min(MAX_WARPS, block // (32 * ROW_PER_THREAD)))
    per = block // (32 * warps)
    if SPLIT_ROW and per > 1:
        rest = -(-(m - block // 2) // (32 * warps))  # the second part's scores a thread, rounded up
        tail = 1 << (rest - 1).bit_length() if rest > 0 else 0
        if tail < per // 2:
            return warps, per // 2, tail
    return warps, per, 0


def topk(scores: torch.Tensor, k: int, torch_order: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``triton_topk.topk``'s picks and values (the two tie rules), from the Gluon kernel."""
    from deepinfer_adapters.kernels.gluon_gemv import pdl_options
    from deepinfer_adapters.kernels.gluon_topk_jit import topk_gluon_kernel

    m = scores.shape[-1]
    warps, per, tail = shape(m)

    def launch(rows: torch.Tensor, idx: torch.Tensor, val: torch.Tensor) -> None:
        topk_gluon_kernel[(rows.shape[0],)](rows, idx, val, m, k, rows.stride(0), idx.stride(0), val.stride(0),
                                            W=warps, PER=per, TAIL=tail, TORCH_ORDER=torch_order,
                                            KEY_BITS=16 if scores.dtype == torch.bfloat16 else 32, num_warps=warps,
                                            **pdl_options(next_launch=False))

    return rows_topk(scores, k, launch)


def supports(scores: torch.Tensor, k: int) -> bool:
    return (GLUON_TOPK and scores.is_cuda and not interpreting() and scores.dtype in FLOAT_DTYPES
            and scores.dim() >= 1 and 0 <= k <= scores.shape[-1] <= MAX_ROW
            and _capable(scores.device.index if scores.device.index is not None else torch.cuda.current_device()))


register_both("gluon", topk, supports, priority=20)
