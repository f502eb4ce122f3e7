"""Decode-sized FP8 linears (up to 16 rows) on Hopper as a warp-specialized Gluon kernel on FP8 products
(``gluon_gemv_jit``), registered as the "gluon" backend of ``fp8_linear``: correct (the Triton FP8 steps' bits,
tests/gpu/test_gluon_gemv_gpu.py) and faster alone on big weights (H200, session 18, BENCHMARKS.md: wq_b 17.5
vs 21.1 us, Engram wkv 54.7 vs 69.0). On every SM it was slower in the model (V4.1 B=1 2.477 vs 2.39 ms): one
255-register program an SM held every SM for the call, so the side streams' kernels could not run next to it.
On 7/8 of them (``SM_SHARE``) it pays (session 19, 5 alternating rounds each): B=1 2.338 -> 2.220 ms. Of the
shares 1/2, 5/8, 3/4, 7/8, 15/16 and 1, 7/8 and 15/16 were the fastest (3/4: 2.269, 1: 2.299); B=8 4.929 at 3/4,
4.863 at 7/8, and with the Triton GEMV within the rounds' spread.

Why: the Triton decode GEMV (``fp8_gemm_rows_kernel``) reaches 20-52% of DRAM bandwidth at one row
(Nsight Compute, session 17): its K loop costs 4.3 SASS instructions a weight value with FP8 steps and 6.3
with bf16 steps (address arithmetic, cp.async issue, barriers, scale handling), while holding the copy rate
leaves ~8 at perfect issue and the kernel issues at ~0.45 of it, with 4 programs of 4 warps an SM to hide
the latency. Moving its scale loads did not help (two forms measured and removed in session 17). Here a
loader warp keeps a ring of STAGES TMA copies (64 weight rows x 128 inputs, and the activation tile) in
flight across a persistent program's work items, and one warpgroup takes four FP8 wgmma products a step
straight from shared memory, each promoted with its weight block's and activation row's scales (V4.1
scales both per 32 inputs; at decode the promotion costs ~1 instruction a weight value and TMA no address
arithmetic).

Numerics: each 32-deep FP8 product is promoted in K order with (weight scale x activation scale), as the
Triton kernel's FP8 steps do (``fp8_gemm_rows_kernel(BF16_STEPS=False)``), so with the same K split the two
should give the same bits; the GPU test checks that, and the reference within the FP8 GEMMs' tolerance.
Not used in batch-invariant mode: its K split follows the weight's shape, the SM count and the lanes the
activation rows take (one row: two lanes, more: one), so a token's bits may differ between a step of one
token and a step of several.

Takes: bf16 activations [M <= 16, K] (quantized per 32 by ``act_quant`` first, one launch), E4M3 weights
[N, K] with E8M0 scales per [32, 32] (V4.1's dense linears), K a multiple of 128.

Also here: one token's routed experts (``pair_gemm``, FP8 products as above), and a decode step's wo_a
(``grouped_linear``, ``GLUON_GROUPED``) on the same ring with bf16 products, as the reference's wo_a does
not quantize its activations: ``bf16_gemv_kernel`` converts the weight tile with its block scales to bf16 in
registers (``dequant_bf16``'s values) as wgmma's register operand, in four lanes (a warpgroup, a loader warp and
a ring each) an SM.
"""

from __future__ import annotations

import functools

import torch

from deepinfer_adapters.kernels import invariance, register, triton_support
from deepinfer_adapters.kernels.gluon_moe import gluon_hopper
from deepinfer_adapters.kernels.triton_fp8_gemm import act_quant, split_k, sum_splits
from deepinfer_adapters.kernels.triton_support import interpreting
from deepinfer_adapters.model_impl.quant import is_e4m3_tiles

GLUON_GEMV = True
# one token's routed experts on the same kernel (``pair_gemm``, taken by ``triton_moe.moe_experts``): the MoE's fp8
# path's arithmetic (FP8 products promoted per 32) instead of its bf16 decode path. Correct (GPU tests: the MoE
# tolerance, rel 0.7-3.6e-3) but neutral in the model (H200, session 19, V4.1 B=1 2.212 vs 2.208 ms, 5 alternating
# rounds): w13 40-46 us against the Triton bf16 path's 46-51 (floor 35), w2 28.6-31 against 26-31 (floor 18: 480
# items on 115 programs, some take 5), while the shared expert's w2 GEMV, itself persistent on the side stream, ran
# on the 17 SMs left (~13 -> ~39 us; joining the shared expert after the gate instead: 2.289 ms). On 15/16 of the SMs
# (``PAIR_SM_SHARE``) it paid in both of session 20's runs (5 alternating rounds each): 2.195 vs 2.213 and 2.147 vs
# 2.162 ms. On
GLUON_PAIRS = True
# the share of the SMs ``pair_gemm``'s persistent grid takes. w2's 480 items take 5 rounds on 7/8 of the SMs (115
# programs) and 4 on 15/16 (123). H200, session 20, 5 alternating rounds each: pairs on 7/8 2.325 vs 2.317 ms off,
# on 15/16 2.195 vs 2.213 off; one program an item (the GPU interleaving it with the shared expert's GEMV) 2.381 vs
# 2.319 (removed)
PAIR_SM_SHARE = 0.94
# a decode step's wo_a (``fp8_grouped_linear``: bf16 activations, no quantization) on the same persistent ring with
# bf16 products (``grouped_linear``): the Triton grouped kernel takes 20 us at V4.1's widths (33.5 MB, floor 8 us).
# One warpgroup converting the weights to bf16 took 25 us, bound by the conversion (issue slots ~24% busy, ~6
# cycles a warp between instructions; Nsight Compute, session 21); two (``GROUPED_LANES``), each with its loader
# warp and ring, on every SM: 17.9 us. In the model (H200, session 21, 5 alternating rounds): B=1 2.056 vs 2.079 ms,
# B=8 4.761 vs 4.775. Moving the conversion off the conversion pipe (byte shuffles and bf16 products) was slower
# (20.3 vs 19.3 us): the instruction count stayed. Its scale words copied into the ring by the loaders (session 24):
# alone 15.7 -> 15.2 us at M = 1, 16.8 -> 16.1 at M = 8
GLUON_GROUPED = True
# 1, 2 or 4 warpgroups an SM (``bf16_gemv_kernel``'s LANES), each with its loader warp and ring of GROUPED_STAGES
# slots (12 KB each). Four lanes of 3 slots against two of 4 (H200, session 26): alone at M = 1 13.5 vs 13.9 us (four
# of 4: 14.3; floor 8.1), in the model B=1 1.674 vs 1.686 ms (5 rounds) and 1.691 vs 1.713 (7 rounds), B=8 equal
# (4.322 / 4.322, 4.333 / 4.325). Two lanes of 6 slots: 18.3 us (session 21)
GROUPED_LANES = 4
GROUPED_STAGES = 3
GROUPED_SM_SHARE = 1.0  # 7/8: 19.1 us (items left over for some lanes)
ROWS = 64  # weight rows a program (the FP8 wgmma's M)
TOKENS = 16  # activation rows a product (the narrow operand; fewer come as TMA's zero rows)
STAGES = 8  # ring slots (10 KB each) of a program with one lane: 8 keep ~80 KB of an SM's weights in flight
# ... ring slots a lane where two lanes share an SM: 2 x 4 x 10 KB, the same 80 KB an SM. H200, session 24 (7
# alternating rounds, the lanes rule and the ring scales on): B=1 1.729 ms against 1.758 with 8 a lane (7 of 7
# rounds); 6 a lane 1.855 against 1.780 / 1.878 (the machine drifting), B=8 with 6 in one lane 4.461 against 4.433 /
# 4.440. Alone, a CSA layer's dense GEMVs at M = 1 in two lanes: 63.1 us with 6, 65.5 with 8 (the model gains more:
# less shared memory, more room for the side streams' kernels next to a GEMV). Again at 4 (s24d, 5 rounds): B=1
# 1.783 / 1.825 against 1.841 with 8 (4 of 5)
TWO_LANE_STAGES = 4
# A launch's K split and programs (``balanced_work``): the split whose busiest lane costs least, on the fewest
# programs that keep it. By a count of steps at B=1 (230 lanes) it shortens the busiest lane of wo_b 37 -> 30
# step-costs (8 splits for 4) against the rule before (split while fewer than 264 row tiles, on SM_SHARE of the SMs),
# the shared expert's w13 25 -> 18, wo_a 27 -> 20, wq_a+wkv 13 -> 9. H200, session 24, 7 alternating rounds against
# that rule: B=1 1.860 vs 1.891 / 1.893 ms, B=8 4.406 vs 4.437 / 4.442 (scales loaded by the warpgroup); with the
# scales in the ring B=1 1.882 vs 1.890 / 1.906, B=8 4.513 vs 4.573 / 4.545 (7 of 7 rounds)
ITEM_STEPS = 1.0  # a work item's fixed cost in 128-input steps (its first scales, its store)
SPLIT_STEPS = 3.0  # the split sum's launch in steps (~2 us against ~0.6 a busy lane's step)
PROGRAMS_PER_SM = 1  # the kernel takes ~255 registers a thread for its 256 (ptxas): one program fits an SM
# two warpgroups an SM for the FP8 products (two lanes, each with its loader warp and ring of TWO_LANE_STAGES slots, as
# wo_a's kernel) where a product has at most this many activation rows: a one-token step's dense linears and every pair,
# else one. H200, session 22, 5 alternating rounds: two lanes everywhere B=1 2.018 vs 2.069 ms one lane, B=8 4.611 vs
# 4.574 (alone, M=8 wo_b 24.3 vs 25.7 us, the smaller linears even); this rule against one lane everywhere, B=1 2.024 vs
# 2.058 and 1.999 vs 2.023 (two runs). The small weights (< 32 MB) stay here too, though alone the Triton FP8 GEMV takes
# them 1.5-2 us faster: on it, B=1 2.230 vs 2.177 ms (the Gluon grid leaves SMs to the side streams)
TWO_LANE_ROWS = 1
# the share of the SMs the persistent grid takes: below 1, SMs stay free for the side streams' kernels
SM_SHARE = 0.875
# ... unless the whole GPU's programs cut the busiest lane's cost (``lane_cost``) by at least this fraction (1: never):
# at B=1 wq_b's 512 tiles take 3 items on some of 115 programs' 230 lanes (cost 33), 2 on 128 programs (22), and the
# shared expert's w2 13 -> 10; at B=8 wq_b 55 -> 44; the others gain <= 13% and keep their SMs for the side streams.
# H200, session 26, 7 alternating rounds: at 15% B=8 4.421 ms against 4.451 off (6 of 7 rounds), B=1 1.857 / 1.853;
# at 25% (wq_b at B=1 alone) B=1 1.773 / 1.767, B=8 (nothing taken) 4.406 / 4.423 -- wq_b 3 -> 2 items a lane does
# not shorten the B=1 step: the keys' side streams next to it lose the SMs it takes
WHOLE_GPU_GAIN = 0.15
# programmatic dependent launch for these GEMVs too, where the Triton kernels use it (triton_support.PDL): launched
# while the kernel before (mostly act_quant) runs, each partition waits for it before reading its output or writing.
# H200, session 23, alternating rounds: with the next kernel launched from the GEMV's start, B=1 1.930 ms against
# 1.962 launched without it (5 of 5 rounds), B=8 4.531 against 4.474 (6 of 7); the loader's first STAGES weight
# copies issued before its wait were neutral (B=1 1.814 / 1.822, B=8 4.665 / 4.678; removed)
GLUON_PDL = True
# where the kernel after a GEMV may launch under PDL: "start" (as the Triton kernels), "last_copy" (each loader
# after its last copy: the next kernel's programs do not sit for the whole GEMV on the SMs the side streams use) or
# "end" (no early launch). H200, session 23, 7 alternating rounds against "start": "last_copy" B=1 1.936 / 1.961 ms,
# B=8 4.466 / 4.564 (7 of 7 rounds each); "end" B=1 1.826 / 1.821, B=8 4.576 / 4.632
NEXT_LAUNCH = "last_copy"
NEXT_LAUNCH_POINTS = ("start", "last_copy", "end")  # the kernels' NEXT_LAUNCH constexpr: 0, 1, 2


def fits(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], act_block: int,
         **_) -> bool:
    if not (GLUON_GEMV and x.is_cuda and not interpreting() and not invariance.enabled()):
        return False
    K = x.shape[-1]
    rows = x.numel() // max(1, K)
    if not (x.dtype == torch.bfloat16 and 0 < rows <= TOKENS and act_block == 32 and tuple(block) == (32, 32)):
        return False
    if not (weight.dtype == torch.float8_e4m3fn and weight.dim() == 2 and weight.shape[1] == K and K % 128 == 0
            and weight.stride(1) == 1 and weight.stride(0) % 16 == 0 and weight.data_ptr() % 16 == 0):
        return False
    scale_rows = -(-weight.shape[0] // 32)
    if scale.dtype not in (torch.uint8, torch.float8_e8m0fnu) or tuple(scale.shape) != (scale_rows, K // 32) \
            or scale.stride(-1) != 1 or scale.stride(0) % 4 or scale.data_ptr() % 4:
        return False
    return gluon_hopper(x.device)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int],
               act_block: int, **_) -> torch.Tensor:
    """See ``reference_fp8.fp8_linear`` (bf16 [.., K] -> [.., N] bf16); ``fits`` says where it applies."""
    lead, K = x.shape[:-1], x.shape[-1]
    q, s = act_quant(x.reshape(-1, K), act_block)
    return gemv(q, s, weight, scale, x.dtype).view(*lead, weight.shape[0])


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def gemv(q: torch.Tensor, q_scale: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
         out_dtype: torch.dtype) -> torch.Tensor:
    """out [M, N] = (q x its per-32 scales) (weight x its [32, 32] E8M0 scales)^T: q [M <= 16, K] E4M3,
    q_scale [M, K / 32] fp32; K split by ``balanced_work`` (by N, K and the lanes M takes), the partials added in
    split order (``sum_splits``). One persistent program an SM takes the (tile, split) items in turn."""
    N, K = weight.shape
    words = scale.view(torch.uint8).view(torch.int32)  # a scale row's four blocks of a 128-input step
    n_tiles = -(-N // ROWS)
    return _launch(weight, q, q_scale, words, q.shape[0], N, K, n_tiles, n_tiles, out_dtype, w_bn=32, w_bk=32)


def lanes(rows: int) -> int:
    """Warpgroups an SM (``fp8_gemv_kernel``'s LANES) for products of ``rows`` activation rows."""
    return 2 if rows <= TWO_LANE_ROWS else 1


def _work(n_tiles: int, K: int, lanes_per_program: int, device: torch.device,
          share: float | None = None) -> tuple[int, int, int]:
    """(K splits, K per split, programs) of a launch over ``n_tiles`` 64-row tiles (``balanced_work``) on
    ``share`` of the SMs; without one, on ``SM_SHARE`` or every SM where that pays (``WHOLE_GPU_GAIN``)."""
    sms = _sm_count(device)
    most = max(1, int(sms * (SM_SHARE if share is None else share))) * PROGRAMS_PER_SM
    work = balanced_work(n_tiles, K, most, lanes_per_program, ITEM_STEPS, SPLIT_STEPS)
    if share is None and WHOLE_GPU_GAIN < 1 and most < sms * PROGRAMS_PER_SM:
        whole = balanced_work(n_tiles, K, sms * PROGRAMS_PER_SM, lanes_per_program, ITEM_STEPS, SPLIT_STEPS)
        if _cost(n_tiles, whole, lanes_per_program) <= (1 - WHOLE_GPU_GAIN) * _cost(n_tiles, work, lanes_per_program):
            return whole
    return work


def _cost(n_tiles: int, work: tuple[int, int, int], lanes_per_program: int) -> float:
    split, k_per_split, programs = work
    return lane_cost(n_tiles, split, k_per_split, programs * lanes_per_program, ITEM_STEPS, SPLIT_STEPS)


def lane_cost(n_tiles: int, split: int, k_per_split: int, lane_count: int, item_steps: float,
              split_steps: float) -> float:
    """The busiest of ``lane_count`` lanes' cost in 128-input steps: its items (``n_tiles`` x ``split``, shared
    out evenly) times (their steps + ``item_steps``), plus ``split_steps`` for the split sum where K is split."""
    per_lane = -(-n_tiles * split // lane_count)
    return per_lane * (k_per_split // 128 + item_steps) + (split_steps if split > 1 else 0)


@functools.lru_cache(maxsize=None)
def balanced_work(n_tiles: int, K: int, most_programs: int, lanes_per_program: int, item_steps: float,
                  split_steps: float) -> tuple[int, int, int]:
    """The K split whose busiest lane costs least -- its items times (their 128-input
    steps + ``item_steps``), plus ``split_steps`` for the split sum where K is split -- over ``most_programs``
    programs of ``lanes_per_program`` lanes; then the fewest programs that keep the busiest lane's item count
    (the SMs left run the side streams' kernels). Returns (K splits, K per split, programs)."""
    lane_count = most_programs * lanes_per_program
    best = None
    for splits in range(1, -(-K // 128) + 1):  # split_k's rounding: the K per split a multiple of 128
        split, k_per_split = split_k(n_tiles, K, 128, n_tiles * splits if splits > 1 else 0)
        cost = lane_cost(n_tiles, split, k_per_split, lane_count, item_steps, split_steps)
        if best is None or cost < best[0]:
            best = (cost, split, k_per_split)
    _, split, k_per_split = best
    per_lane = -(-n_tiles * split // lane_count)
    return split, k_per_split, -(-n_tiles * split // (per_lane * lanes_per_program))


def _output(split: int, rows: int, N: int, device: torch.device, out_dtype: torch.dtype) -> torch.Tensor:
    """The fp32 partials [split, rows, N] where K is split (``sum_splits`` adds them), else [rows, N] in
    ``out_dtype``."""
    return torch.empty((split, rows, N) if split > 1 else (rows, N), device=device,
                       dtype=torch.float32 if split > 1 else out_dtype)


def pdl_options(next_launch: bool = True) -> dict:
    """A Gluon launch's PDL constexpr (and a GEMV's NEXT_LAUNCH, with ``next_launch``), and Triton's launch_pdl
    option where PDL is on."""
    on = GLUON_PDL and triton_support.PDL and triton_support.pdl_capable()
    point = {"NEXT_LAUNCH": NEXT_LAUNCH_POINTS.index(NEXT_LAUNCH)} if next_launch else {}
    return {"PDL": on, **point, **({"launch_pdl": True} if on else {})}


def _tma(t: torch.Tensor, box_rows: int):
    """A TMA descriptor over the rows of a 2-D ``t`` (E4M3 or bf16), boxes of ``box_rows`` x 128 values."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dtype = gl.float8e4nv if t.dtype == torch.float8_e4m3fn else gl.bfloat16
    return TensorDescriptor(t, list(t.shape), list(t.stride()), [box_rows, 128],
                            gl.NVMMASharedLayout.get_default_for([box_rows, 128], dtype))


def _launch(w_rows: torch.Tensor, q: torch.Tensor, q_scale: torch.Tensor, ws: torch.Tensor, out_rows: int, N: int,
            K: int, n_tiles: int, tiles_per_pair: int, out_dtype: torch.dtype, *, w_bn: int, w_bk: int,
            pairs: tuple[torch.Tensor, torch.Tensor] | None = None, nt_kt: tuple[int, int] = (1, 1),
            share: float | None = None, partials: bool = False) -> torch.Tensor:
    """Split K, allocate the output, build the TMA descriptors (weight boxes of ROWS x 128 from ``w_rows``,
    activation boxes of TOKENS x 128) and launch ``fp8_gemv_kernel``; ``pairs``: (experts, activation rows).
    ``partials``: where K is split, the fp32 partials [split, rows, N] as the kernel left them (the caller's
    next kernel adds them in split order, as ``sum_splits``), not their sum."""
    from deepinfer_adapters.kernels.gluon_gemv_jit import fp8_gemv_kernel

    rows = 1 if pairs is not None else q.shape[0]  # activation rows a product: a pair takes one
    n_lanes = lanes(rows)
    split, k_per_split, programs = _work(n_tiles, K, n_lanes, q.device, share)
    out = _output(split, out_rows, N, q.device, out_dtype)
    n_items = n_tiles * split
    q = q if q.is_contiguous() else q.contiguous()
    w_desc, a_desc = _tma(w_rows, ROWS), _tma(q, TOKENS)
    experts, a_rows = pairs if pairs is not None else (ws, ws)  # unused pointers without pairs
    fp8_gemv_kernel[(programs,)](
        w_desc, a_desc, ws, q_scale, out, experts, a_rows, N, rows, K, k_per_split, split, n_items, tiles_per_pair,
        *nt_kt, ws.stride(0), q_scale.stride(0), out.stride(-2), out.stride(0) if split > 1 else 0,
        STAGES=TWO_LANE_STAGES if n_lanes == 2 else STAGES,
        W_BN=w_bn, W_BK=w_bk, PAIRS=pairs is not None, LANES=n_lanes, num_warps=4,
        **pdl_options())
    return out if split == 1 or partials else sum_splits(out, out_dtype)


def pairs_fit(x: torch.Tensor, weights: tuple[torch.Tensor, ...], scales: tuple[torch.Tensor, ...],
              block: tuple[int, int], act_block: int) -> bool:
    """Whether ``pair_gemm`` takes one token's experts: E4M3 in 128 x 128 tiles (quant.to_e4m3_tiles) with
    E8M0 scales per (1, 32) or (1, 128), activations quantized per 32, on an sm_90 GPU, outside batch-invariant
    mode (whose MoE takes the bf16 path for every call)."""
    if not (GLUON_PAIRS and x.is_cuda and x.dtype == torch.bfloat16 and not interpreting() and not invariance.enabled()
            and x.shape[0] == 1):
        return False
    if act_block != 32 or tuple(block) not in ((1, 32), (1, 128)):
        return False
    for w, s in zip(weights, scales):
        if not (w.dtype == torch.float8_e4m3fn and is_e4m3_tiles(w) and w.is_contiguous()
                and s.dtype in (torch.uint8, torch.float8_e8m0fnu) and s.is_contiguous()
                and tuple(s.shape) == (w.shape[0], w.shape[1] * 128, w.shape[2] * 128 // block[1])):
            return False
    return gluon_hopper(x.device)


def pair_gemm(q: torch.Tensor, q_scale: torch.Tensor, a_rows: torch.Tensor, experts: torch.Tensor,
              weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], out_dtype: torch.dtype, *,
              partials: bool = False) -> torch.Tensor:
    """out [P, N]: row r = (q[a_rows[r]] x its per-32 scales) (expert experts[r]'s weight x its (1, 32) or
    (1, 128) E8M0 scales)^T, for P pairs of one token (``triton_moe.pair_route``' rows); weight E4M3 in
    quant.to_e4m3_tiles' [E, N / 128, K / 128, 128, 128]. The persistent kernel's items are (pair, 64-row
    tile, K split). ``partials``: as ``_launch``'s (then out may be fp32 [split, P, N])."""
    E, NT, KT = weight.shape[:3]
    N, K, P = NT * 128, KT * 128, experts.numel()
    per_row = scale.view(torch.uint8).reshape(E * N, -1)  # an expert's scale rows after the one before's
    ws = per_row.view(torch.int32) if block[1] == 32 else per_row  # one word (four blocks) or one byte a step
    tiles_per_pair = -(-N // ROWS)
    # the weight as rows of 128 inputs, tile after tile: a step's box starts at its 128 x 128 tile's row
    return _launch(weight.view(-1, 128), q, q_scale, ws, P, N, K, P * tiles_per_pair, tiles_per_pair, out_dtype,
                   w_bn=1, w_bk=block[1], pairs=(experts, a_rows), nt_kt=(NT, KT), share=PAIR_SM_SHARE,
                   partials=partials)


def grouped_fits(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], **_) -> bool:
    """Whether ``grouped_linear`` takes a decode step's wo_a (where ``GLUON_GROUPED``): bf16 x [T <= 16, G, K],
    E4M3 weight [G R, K] with E8M0 scales per [32, 32], R a multiple of 64 and K of 128, on an sm_90 GPU,
    outside batch-invariant mode."""
    if not (GLUON_GROUPED and x.is_cuda and not interpreting() and not invariance.enabled()):
        return False
    if not (x.dim() == 3 and x.dtype == torch.bfloat16 and 0 < x.shape[0] <= TOKENS and tuple(block) == (32, 32)):
        return False
    T, G, K = x.shape
    if not (weight.dtype == torch.float8_e4m3fn and weight.dim() == 2 and weight.shape[1] == K and K % 128 == 0
            and weight.shape[0] % (G * ROWS) == 0 and weight.is_contiguous() and weight.data_ptr() % 16 == 0):
        return False
    scale_shape = (weight.shape[0] // 32, K // 32)
    if scale.dtype not in (torch.uint8, torch.float8_e8m0fnu) or tuple(scale.shape) != scale_shape \
            or not scale.is_contiguous():
        return False
    return gluon_hopper(x.device)


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int],
                   **_) -> torch.Tensor:
    """See ``reference_fp8.fp8_grouped_linear`` ([T, G, K] -> [T, G, R]): the decode GEMV's persistent ring
    with bf16 products (``bf16_gemv_kernel``: the weight converted to bf16 with its block scales in registers,
    the activations as they are), each group's rows reading their group's inputs; ``grouped_fits`` says where."""
    from deepinfer_adapters.kernels.gluon_gemv_jit import bf16_gemv_kernel

    if GROUPED_LANES not in (1, 2, 4):
        raise ValueError(f"gluon_gemv.GROUPED_LANES must be 1, 2 or 4 (bf16_gemv_kernel's lanes), not {GROUPED_LANES}")
    T, G, K = x.shape
    N = weight.shape[0]
    n_tiles = N // ROWS
    split, k_per_split, programs = _work(n_tiles, K, GROUPED_LANES, x.device, GROUPED_SM_SHARE)
    out = _output(split, T, N, x.device, x.dtype)
    n_items = n_tiles * split
    w_desc, a_desc = _tma(weight, ROWS), _tma(x.contiguous().view(T, G * K), TOKENS)
    words = scale.view(torch.uint8).view(torch.int32)  # a scale row's four blocks of a 128-input step
    bf16_gemv_kernel[(programs,)](
        w_desc, a_desc, words, out, N, T, K, k_per_split, split, n_items, words.stride(0), out.stride(-2),
        out.stride(0) if split > 1 else 0, STAGES=GROUPED_STAGES, W_BN=32, GROUP_ROWS=N // G, LANES=GROUPED_LANES,
        num_warps=4, **pdl_options())
    return (out if split == 1 else sum_splits(out, x.dtype)).view(T, G, N // G)


register("fp8_linear", "gluon", fp8_linear, supports=fits, priority=20)  # above the Triton kernels (10)
register("fp8_grouped_linear", "gluon", grouped_linear, supports=grouped_fits, priority=20)
