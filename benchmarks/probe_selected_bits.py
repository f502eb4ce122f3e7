"""Where the in-place attention over a compressed layer's picked rows (``triton_sparse_attn.SELECTED_IN_PLACE``)
and the copy's (``selected_keys``, then the split decode) part bits (session 37, part s37c: a bf16 ULP in some outputs, from a load of each tensor and a select; the same
at 1 and 2 pipeline stages): the same inputs through the copy, the in-place read and the unsplit kernel, and again
with every key present (no masked key). Prints one REPORT line per comparison."""

from __future__ import annotations

import torch

from deepinfer_adapters.kernels import triton_keys
from deepinfer_adapters.kernels import triton_sparse_attn as tri


def inputs(all_present: bool, B: int = 1, W: int = 128, k: int = 512, rows_a_block: int = 64,
           capacity: int = 2048, H: int = 64, d: int = 512) -> tuple:
    g = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(B, H, d, device="cuda", generator=g).bfloat16()
    window = torch.randn(B, W, d, device="cuda", generator=g).bfloat16()
    valid = torch.rand(B, W, device="cuda", generator=g) > (-1 if all_present else 0.1)
    blocks = -(-capacity // rows_a_block)
    pool = torch.randn(B * blocks * rows_a_block, d, device="cuda", generator=g).bfloat16()
    table = torch.randperm(B * blocks, device="cuda", generator=g).view(B, blocks)
    top = capacity if all_present else capacity + 3
    picked = torch.randint(0 if all_present else -1, top, (B, k), device="cuda", generator=g)
    visible = torch.full((B,), capacity, device="cuda") if all_present else \
        torch.randint(capacity // 2, capacity + 1, (B,), device="cuda", generator=g)
    sink = torch.randn(H, device="cuda", generator=g)
    return q, (window, valid, pool, picked, visible, table, rows_a_block, capacity), sink, d**-0.5


def main() -> None:
    for all_present in (False, True):
        q, rows, sink, scale = inputs(all_present)
        keys, index = triton_keys.selected_keys(*rows)
        kv = keys.flatten(0, 1)
        copy2 = tri.sparse_attn(q, kv, sink, index, scale, config=tri.DECODE_SPLIT_CONFIG)
        whole = tri.sparse_attn(q, kv, sink, index, scale, config=tri.Config(block_h=16, num_warps=4, num_stages=2))
        in_place = tri.sparse_attn(q, rows[0].flatten(0, 1), sink, rows[3], scale, config=tri.DECODE_SPLIT_CONFIG,
                                   selected=rows)
        for name, got in (("in place", in_place), ("unsplit", whole)):
            diff = (got.float() - copy2.float()).abs()
            print(f"REPORT all_present={all_present} {name} vs the copy: equal {torch.equal(got, copy2)}, "
                  f"{int((diff > 0).sum())} of {diff.numel()} differ, max {float(diff.max()):.3g}")


if __name__ == "__main__":
    main()
