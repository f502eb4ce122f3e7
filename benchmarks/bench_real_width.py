"""A reduced DeepSeek-V4.1-Flash at the real widths on the GPU: decode and prefill, next
to the floor, fast path and pure-torch reference path side by side in one run.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_real_width.py [--out DIR]
(``--tiny --device cpu`` runs the same script at tiny widths on the CPU, as a smoke test.)

Model: the release config (hidden 5120, 64 heads x 512, q_lora 1280, o_lora 1024 x 8
groups, 384 experts top-6 of width 2304 + 1 shared, index 32 heads x 128, vocab 129280,
hc 4) with 7 layers, one per layer role of the release:
  0 window | 1 window + Engram | 2 ratio-2 KV/index source | 3 ratio-2 reuse |
  4 ratio-1 KV/index/candidate source | 5 ratio-1 reuse | 6 ratio-1 reindex (in the pool).
No draft stages, no vision. Engram tables hold 24 x ~16k rows instead of 24 x ~16M
(random ids hit the same 24 rows per token either way; 2 x 98 GB would not fit).
Weights random in the native formats: E4M3 + E8M0 32x32 scales, bf16 elsewhere; experts
drawn as FP4 checkpoint tensors (N(0, 1/fan_in) quantized like the tiny checkpoints) and
converted as a load converts them (native_format: E4M3 with one E8M0 scale per 128 inputs and,
where exact -- always for these draws -- per 128 rows too; ``--expert-block 32``: the checkpoint's
scales per 32) -- ~98 GB, most of it experts (13.6 GB/layer).

Workloads: decode steps at batch 1, 8, 32, 128, every sequence at context 4096 (state
filled with random rows: the cost of a step does not depend on the values);
prefill of one 8192-token sequence. Fast path = default dispatch (Triton fp8_linear,
MoE grouped GEMM, sparse_attn); reference path = every kernel op pinned to its torch
reference, same weights, same inputs. Numerics.reference() (bf16 + every FP8/FP4 step).

Floors (computed by the script from the model's own tensors and printed; written down
in BENCHMARKS.md before tuning):
- decode bytes = every weight a step reads once (FP8 linears + scales, bf16 linears,
  hc mixers counted as fp32, the bf16 head) + experts touched (expected distinct experts
  of B x 6 uniform picks among 384) + per sequence the state rows read (128 window rows
  x 7 layers, 512 selected compressed rows x 5 layers, index keys of 4096/ratio rows x 3
  index layers, all bf16) ; floor = bytes / measured copy bandwidth.
- prefill FLOPs = 2 x tokens x (weights applied per token: attention, shared + 6 experts,
  indexer, compressor, Engram) + sparse attention 4 H K d per query (K = 640, window
  layers 128) + indexer scores 2 x 32 x 128 per (query, visible key); floor = linear
  FLOPs / FP8 rate + the rest / bf16 rate.
Numbers (computed on a meta-device build before any GPU run; ceilings of the first H200 run,
4.22 TB/s copy, 1436 TFLOP/s FP8, 783 TFLOP/s bf16):
  weights 102.3 GB = experts 98.1 (E4M3 + scales) + embed 1.32 + Engram tables 0.20 + rest 2.71
  (head 1.32 of it); decode bytes B=1: 4.24 GB -> 1.01 ms | B=8: 14.4 GB -> 3.4 ms |
  B=32: 41.7 GB -> 10.0 ms | B=128: 88.5 GB -> 21.2 ms;
  prefill 8192: 42.9 TFLOP at FP8 + 7.4 TFLOP at bf16 -> 39.3 ms (208k tokens/s).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch

from benchmarks.critical_path_probes import PROBES
from benchmarks.profiling import profile_step, timeline_step
from benchmarks.timing import paired_rounds
from deepinfer_adapters import kernels
from deepinfer_adapters.kernels import reference, reference_fp8
from deepinfer_adapters.kernels import fp8_blockwise, gluon_gemv, gluon_moe, triton_fp8_gemm, triton_hc, triton_moe
from deepinfer_adapters.kernels import triton_pool, triton_sparse_attn, triton_support
from deepinfer_adapters.kernels import gluon_topk, triton_linear, triton_route, triton_topk
from deepinfer_adapters.config import parse_config
from deepinfer_adapters.model_impl import native_format, overlap
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.engram_hash import EngramHasher
from deepinfer_adapters.model_impl.layers import attention_v41
from deepinfer_adapters.model_impl.layers.experts_fp8 import Fp8Experts
from deepinfer_adapters.model_impl.layers.linear import Linear
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.quant import (expert_matrix, fp4_to_fp8_tiles, quant_fp4_blocks, to_e4m3_tiles,
                                                 to_fp4_tiles, unpack_fp4)
from deepinfer_adapters.presets import engram_table_rows, release_config, tiny_config
from deepinfer_adapters.standalone import cuda_graphs
from deepinfer_adapters.standalone.cuda_graphs import DecodeGraphs

CONTEXT, PREFILL, BATCHES = 4096, 8192, (1, 8, 32, 128)
# every kernel op with a torch reference: the reference path pins them all. Until session 28 a hand-kept list (20 of 33)
# left out the rest (the top-k of batch-invariant numerics, the cache round trips, the window and key ops, and
# session 27's hc_post_pre_norm, whose "ref" runs took its Triton kernel)
OPS = tuple(dict.fromkeys(reference.OPS + reference_fp8.OPS))


def log(*a):
    print(*a, flush=True)


def reduced_config(tiny: bool) -> dict:
    raw = tiny_config("v41") if tiny else release_config("v41")
    raw.pop("vision_config", None)
    text = raw["text_config"]
    text.update(num_hidden_layers=7, compress_ratios=[0, 0, 2, 2, 1, 1, 1, 0, 0, 0],
                kv_source_layer_ids=[2, 4], index_source_layer_ids=[2, 4, 6], candidate_source_layer_id=4,
                engram_layer_ids=[1], dspark_target_layer_ids=[4, 5, 6])
    if not tiny:
        text["engram_vocab_size"] = 16000  # table rows: see the module doc
    text["engram_num_embeddings"] = engram_table_rows(1, text["engram_vocab_size"],
                                                      (text["engram_max_ngram_size"] - 1) * text["engram_n_heads"])
    return raw


def random_hasher(cfg, device):
    g = torch.Generator().manual_seed(1)
    token_map = torch.randint(0, cfg.engram.compressed_vocab_size, (cfg.vocab_size,), generator=g)
    return EngramHasher.from_token_map(cfg.engram, token_map, cfg.engram.compressed_vocab_size).to(device)


@torch.no_grad()
def fill_random(model, cfg, seed=0):
    """Random weights in the native formats, scaled like the tiny checkpoints (N(0, 1/fan_in))."""
    g = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    fp8_fan_in = {}
    for name, mod in model.named_modules():
        if isinstance(mod, Linear) and mod.block is not None:
            fp8_fan_in[name + ".weight"] = mod.in_features
        if isinstance(mod, Fp8Experts):
            fp8_fan_in[name + ".w13"] = expert_matrix(mod.w13)[1]
            fp8_fan_in[name + ".w2"] = expert_matrix(mod.w2)[1]
    for name, mod in model.named_modules():
        if isinstance(mod, Fp8Experts):
            fill_experts(mod, g)
    for name, p in model.named_parameters():
        if ".routed." in name:
            continue
        if p.dtype == torch.float8_e4m3fn:  # codes ~ N(0, 16^2): scale 2^-4 / sqrt(fan_in)
            for chunk in p.data.view(-1, p.shape[-1]).split(4096):
                chunk.copy_((torch.randn(chunk.shape, device=p.device, generator=g, dtype=torch.bfloat16) * 16))
        elif p.dtype == torch.float8_e8m0fnu:
            weight = name.replace(".scale", ".weight").replace("_scale", "")
            byte = 127 - 4 - round(0.5 * math.log2(fp8_fan_in[weight]))
            p.data.view(torch.uint8).fill_(byte)
        elif name.endswith("norm.weight") or name.endswith(("q_weight", "k_weight")):
            p.data.fill_(1.0)
        elif name.endswith("hc_attn.scale") or name.endswith("hc_ffn.scale"):
            p.data.copy_(0.5 + torch.rand(p.shape, device=p.device, generator=g))
        elif name.endswith(("hc_attn.base", "hc_ffn.base", "attn_sink")):
            p.data.copy_(torch.randn(p.shape, device=p.device, generator=g) * 0.5)
        elif name.endswith(("gate.bias",)):
            p.data.copy_(torch.randn(p.shape, device=p.device, generator=g) * 0.1)
        else:
            std = 1.0 if (p.dim() == 1 or name.endswith("embed.weight")) else 1 / math.sqrt(p.shape[-1])
            if name == "head.weight":
                std = 3 / math.sqrt(p.shape[-1])
            p.data.copy_((torch.randn(p.shape, device=p.device, generator=g, dtype=torch.float32) * std).to(p.dtype))


def fill_experts(experts, g, chunk=8):
    """FP4 checkpoint tensors ~ N(0, 1/fan_in), converted to the layer's storage as
    native_format converts them (its block: (1, 32) as stored, or (1, 128) re-encoded; or
    kept packed): the same values for the same generator state, whatever the storage."""
    for weight, scale in ((experts.w13, experts.w13_scale), (experts.w2, experts.w2_scale)):
        E, (N, K) = weight.shape[0], expert_matrix(weight)
        for e0 in range(0, E, chunk):
            e1 = min(E, e0 + chunk)
            dense = torch.randn((e1 - e0) * N, K, device=weight.device, generator=g) / math.sqrt(K)
            packed, fp4_scale = quant_fp4_blocks(dense)
            if experts.packed_fp4:
                codes, s = to_fp4_tiles(packed.view(e1 - e0, N, -1)).view(packed.shape), fp4_scale
            elif experts.block[1] == 32:
                codes, s = unpack_fp4(packed).to(torch.float8_e4m3fn), fp4_scale
            else:
                converted = fp4_to_fp8_tiles(packed, fp4_scale, experts.block[1])
                if converted is None:
                    raise RuntimeError(f"random FP4 experts not convertible to {experts.block} blocks")
                codes, s = converted
            codes = codes.view(e1 - e0, N, -1)
            weight[e0:e1].copy_(to_e4m3_tiles(codes) if experts.e4m3_tiles else codes)
            scale[e0:e1].copy_(s.view(e1 - e0, N, -1))


def build_model(cfg, num: Numerics, device, expert_block: int) -> tuple[DeepseekV41ForCausalLM, int]:
    """The reduced model in the native formats with random weights (``fill_random``), and its experts' scale block
    (per 32 where the widths are no multiples of ``expert_block``; 0: packed FP4)."""
    block = expert_block
    if block and (cfg.hidden_size % block or cfg.moe_intermediate_size % block):
        log(f"expert widths {cfg.hidden_size}, {cfg.moe_intermediate_size} not multiples of {block}: "
            f"experts keep the checkpoint's scales per 32")
        block = 32
    model = native_format.build(DeepseekV41ForCausalLM, cfg, num, device=device,
                                hasher=random_hasher(cfg, device), with_draft=False, expert_blocks=block)
    fill_random(model, cfg)
    return model, block


def fill_state(state, cfg, generator):
    for (key, name), t in state._tensors.items():
        if t.dtype.is_floating_point:
            t.copy_(torch.randn(t.shape, device=t.device, generator=generator).to(t.dtype) * 0.5)
        else:  # Engram token history: compressed ids
            t.copy_(torch.randint(0, cfg.engram.compressed_vocab_size, t.shape, device=t.device, generator=generator))


def param_bytes(model) -> dict[str, float]:
    """Bytes by group, hc mixers counted at fp32 (the dense model keeps them fp64 for the CPU)."""
    out = {"experts": 0.0, "embed": 0.0, "engram_table": 0.0, "rest": 0.0}
    for name, p in model.named_parameters():
        b = p.numel() * (4 if p.dtype == torch.float64 else p.element_size())
        group = ("experts" if ".routed." in name else "embed" if name == "embed.weight"
                 else "engram_table" if name.endswith("engram.embed.weight") else "rest")
        out[group] += b
    return out


def decode_floor_bytes(model, cfg, B) -> float:
    pb = param_bytes(model)
    E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    touched = E * (1 - (1 - k / E) ** B)  # expected distinct experts of B tokens x k uniform picks
    per_layer_experts = pb["experts"] / len(model.layers)
    d, dk = cfg.head_dim, cfg.index_head_dim
    layers = cfg.main_layers
    per_seq = 0.0
    for layer in layers:
        per_seq += cfg.sliding_window * d * 2
        if layer.compress_ratio:
            per_seq += cfg.index_topk * d * 2
            if layer.has_indexer_query:
                per_seq += CONTEXT // layer.compress_ratio * dk * 2
    engram_rows = 24 * cfg.engram.head_dim * 2 * len(cfg.engram.layer_ids)
    return (pb["rest"] + touched * per_layer_experts / E * len(layers)
            + B * (per_seq + engram_rows + cfg.hidden_size * 2))


def prefill_floor_flops(model, cfg, S) -> tuple[float, float]:
    """(FLOPs at the FP8 rate, FLOPs at the bf16 rate) of one S-token prefill."""
    fp8 = bf16 = 0.0
    for name, mod in model.named_modules():
        if isinstance(mod, Linear) and not name.startswith("head"):
            flops = 2 * S * mod.in_features * mod.out_features
            if "compressor" in name or "wk" in name.split(".")[-1]:  # one row per ratio tokens, bf16
                bf16 += flops
            elif mod.block is not None:
                fp8 += flops
            else:
                bf16 += flops
        if isinstance(mod, Fp8Experts):
            per_token = 2 * (math.prod(expert_matrix(mod.w13)) + math.prod(expert_matrix(mod.w2)))
            fp8 += S * cfg.num_experts_per_tok * per_token
    H, d = cfg.num_attention_heads, cfg.head_dim
    for layer in cfg.main_layers:
        K = cfg.sliding_window + (cfg.index_topk if layer.compress_ratio else 0)
        bf16 += 4 * H * K * d * S
        if layer.has_indexer_query:  # scores against every visible key
            bf16 += 2 * cfg.index_n_heads * cfg.index_head_dim * (S * S / 2) / layer.compress_ratio
    bf16 += 2 * cfg.hidden_size * cfg.vocab_size  # the last token's logits
    return fp8, bf16


def ceilings_or_none(device):
    if device != "cuda":
        return {"copy_bw": float("nan"), "bf16_flops": float("nan"), "fp8_flops": float("nan")}
    from benchmarks.timing import ceilings

    return ceilings()


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, reps, warm=1):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times), times


def pin_reference(on: bool):
    for op in OPS:
        kernels.use_backend(op, "torch" if on else None)


def flag(module, name: str, other) -> tuple[Callable[[], None], Callable[[], None]]:
    """An A/B switch: ``module.name`` set to ``other`` for the A/B's other run, then back to its value at import."""
    default = getattr(module, name)
    return lambda: setattr(module, name, other), lambda: setattr(module, name, default)


def torch_backend(op: str, name: str = "torch") -> tuple[Callable[[], None], Callable[[], None]]:
    """An A/B switch: ``op`` pinned to backend ``name`` (its torch reference) for the A/B's other run, then chosen
    as usual again."""
    return lambda: kernels.use_backend(op, name), lambda: kernels.use_backend(op, None)


# decode switches an A/B run (--ab) turns off and back on: the side stream (model_impl/overlap.py),
# the routed experts' bf16 decode path (triton_moe.DECODE_PATH) and packed E2M1 experts' fp8 decode
# path (triton_moe.FP4_DECODE_PATH; with --expert-block 0), programmatic dependent launch (triton_support.PDL)
GROUPED_DEFAULTS = (gluon_gemv.GROUPED_LANES, gluon_gemv.GROUPED_STAGES)
AB_SWITCHES = {
    "overlap": flag(overlap, "ENABLED", False),
    # the compressed layers' shared index tensors built by their first reader, not ahead (overlap.DECODE_PRELUDE)
    "prelude": flag(overlap, "DECODE_PRELUDE", False),
    # the side parts' owners joining them again when they end, not only where something failed (overlap.REJOIN_JOINED)
    "rejoin": flag(overlap, "REJOIN_JOINED", True),
    # an index layer's keys parts joined before its index scores / between them and the top-k, not after the top-k
    # (overlap.KEYS_PARTS_JOINED)
    **{f"parts_{where}": flag(overlap, "KEYS_PARTS_JOINED", where) for where in ("before_scores", "before_topk")},
    # only attention's keys next to its queries (overlap.DECODE_KEYS)
    "decode_keys": flag(overlap, "DECODE_KEYS", False),
    # the shared expert joined after the gate, not at the routed experts' combine (overlap.SHARED_THROUGH_EXPERTS)
    "shared_through": flag(overlap, "SHARED_THROUGH_EXPERTS", False),
    "moe_bf16": flag(triton_moe, "DECODE_PATH", "fp8"),
    "fp4_fp8": flag(triton_moe, "FP4_DECODE_PATH", "bf16"),
    # hc_mixes: the partials' merge and the Sinkhorn passes in two launches (triton_hc.MERGE_SINKHORN)
    "merge_sinkhorn": flag(triton_hc, "MERGE_SINKHORN", False),
    # the A/B's other run turns PDL off (on by default since session 23: triton_support.PDL), the Gluon GEMVs' too
    "pdl": flag(triton_support, "PDL", False),
    # only the Gluon GEMVs launched without PDL (gluon_gemv.GLUON_PDL)
    "gluon_pdl": flag(gluon_gemv, "GLUON_PDL", False),
    # ... under it, the kernel after a GEMV launched from another point of the GEMV than gluon_gemv.NEXT_LAUNCH
    **{f"gluon_next_{point}": flag(gluon_gemv, "NEXT_LAUNCH", point) for point in gluon_gemv.NEXT_LAUNCH_POINTS},
    # decode GEMVs with few weight row tiles: FP8 steps instead of bf16 steps (triton_fp8_gemm.BF16_STEPS)
    "bf16_steps": flag(triton_fp8_gemm, "BF16_STEPS", False),
    # one-token MoE routing's per-token sort: torch's sort + gather instead of one Triton launch
    "pair_sort": flag(triton_moe, "PAIR_SORT_KERNEL", False),
    # V4's compressor decode step: the torch version (~20 launches) instead of one Triton kernel
    "compressor_gather": torch_backend("compressor_v4_gather"),
    # packed E2M1 experts span by span instead of per 128-input block (triton_fp8_gemm.FP4_BLOCK_ACCUMULATE;
    # with --expert-block 0, or at V4 widths: bench_v4_width --ab-off)
    "fp4_block_acc": flag(triton_fp8_gemm, "FP4_BLOCK_ACCUMULATE", False),
    # prefill: the MoE's bf16-path GEMMs on the Triton kernel instead of the Gluon one (kernels/gluon_moe.py)
    "gluon_moe": flag(gluon_moe, "GLUON_MOE", False),
    # prefill: the MoE's GEMMs on the Gluon kernel's bf16 products instead of its FP8 products (gluon_moe.FP8_PRODUCTS)
    "gluon_moe_fp8": flag(gluon_moe, "FP8_PRODUCTS", False),
    # prefill: the FP8 MoE kernel's per-column promotion (two multiplies a value) for experts with one scale per
    # 128 x 128 tile too, instead of the tile's scale (gluon_moe.FP8_UNIFORM_TILES)
    "moe_tile_scales": flag(gluon_moe, "FP8_UNIFORM_TILES", False),
    # decode: side parts on streams of the step's own CUDA priority at every batch, instead of a higher one at one
    # token (overlap.URGENT_SIDE_TOKENS); and urgent up to 4 tokens ("no_" run), against up to 1
    "side_urgent": flag(overlap, "URGENT_SIDE_TOKENS", 0),
    "side_urgent_4": flag(overlap, "URGENT_SIDE_TOKENS", 4),
    # decode: the shared expert's side stream, or the hyper-connection mixes', not urgent
    "shared_urgent": flag(overlap, "SHARED_URGENT", False),
    "mixes_urgent": flag(overlap, "MIXES_URGENT", False),
    # prefill: the dense linears' bf16 GEMMs (LARGE_M_PATH) instead of cuBLAS's block-scaled FP8 one
    # (fp8_blockwise.DENSE_FP8)
    "dense_fp8": flag(fp8_blockwise, "DENSE_FP8", False),
    # prefill: wo_a's grouped GEMM on the Triton kernel instead of cuBLAS (triton_fp8_gemm.GROUPED_CUBLAS)
    "grouped_cublas": flag(triton_fp8_gemm, "GROUPED_CUBLAS", False),
    # prefill: hc_mix_logits splits its weight in every program instead of loading cached pieces
    "mix_pieces": flag(triton_hc, "PRESPLIT_FN", False),
    # prefill and decode: the indexer scores every key and masks after (attention_v41.CAUSAL_INDEX_SCORES)
    "causal_index": flag(attention_v41, "CAUSAL_INDEX_SCORES", False),
    # the Gluon decode GEMV off: the Triton FP8 GEMV (gluon_gemv.GLUON_GEMV)
    "gluon_gemv": flag(gluon_gemv, "GLUON_GEMV", False),
    # the Gluon GEMV's persistent grid on another share of the SMs than gluon_gemv.SM_SHARE (the rest stay free for
    # the side streams' kernels)
    **{f"gluon_share{round(share * 100)}": flag(gluon_gemv, "SM_SHARE", share)
       for share in (0.5, 0.625, 0.75, 0.875, 0.94, 1.0)},
    # one token's routed experts on the MoE's Triton bf16 path, not on the Gluon GEMV (gluon_gemv.GLUON_PAIRS; its grid
    # on gluon_gemv.PAIR_SM_SHARE of the SMs)
    "gluon_pairs": flag(gluon_gemv, "GLUON_PAIRS", False),
    # the indexer's head weights computed after its queries on their stream, not in AttentionV41.decode_early
    # (overlap.INDEX_WEIGHTS_EARLY)
    "index_weights_early": flag(overlap, "INDEX_WEIGHTS_EARLY", False),
    # a compressed layer's decode keys and index in torch (a gather, two cats, a where) instead of one Triton launch
    # (kernels/triton_keys.py)
    "selected_keys": torch_backend("selected_keys"),
    # a decode step's window (the new KV row stored, the window's keys gathered) as torch's index_copy_ and
    # index_select instead of one Triton launch (kernels/triton_window.py)
    "window_kernel": torch_backend("window_store_gather"),
    # ... and the step's window ring rows (WindowSlots) as torch's integer ops (~7 launches) instead of one
    "window_slots": torch_backend("window_slots"),
    # a source's compressed rows stored in torch (a gather, a where, an index_put) instead of one Triton launch
    # (kernels/triton_store.py)
    "store_rows": torch_backend("store_rows"),
    # a decode step's wo_a on the Triton grouped kernel instead of the Gluon GEMV's ring with bf16 products
    # (gluon_gemv.GLUON_GROUPED)
    "gluon_grouped": flag(gluon_gemv, "GLUON_GROUPED", False),
    # the MoE route in one warp at every batch (session 38: 4 warps at every batch, B=8 -16 us, B=1 -2 to -7 us)
    "route_1warp": flag(triton_route, "FOUR_WARPS_FROM_TOKENS", 0),
    # the Gluon decode GEMV (dense and one token's experts) with one warpgroup an SM for every product, not two
    # lanes (each with its loader and ring) where a product has one activation row (gluon_gemv.TWO_LANE_ROWS)
    "gemv_lanes": flag(gluon_gemv, "TWO_LANE_ROWS", 0),
    # ... two lanes for every product (up to 16 activation rows)
    "gemv_lanes_all": flag(gluon_gemv, "TWO_LANE_ROWS", 16),
    # the FP8 Gluon GEMV's ring of another depth than gluon_gemv.STAGES (one lane) or TWO_LANE_STAGES (slots a lane)
    **{f"gemv_stages{v}": flag(gluon_gemv, "STAGES", v) for v in (4, 6, 10)},
    **{f"gemv_two_lane_stages{v}": flag(gluon_gemv, "TWO_LANE_STAGES", v) for v in (6, 8)},
    # wo_a's ring (bf16_gemv_kernel: GROUPED_STAGES slots of 12 KB a lane, GROUPED_LANES lanes) of another depth, and
    # one token's experts (pair_gemm) on another share of the SMs than gluon_gemv.PAIR_SM_SHARE
    **{f"grouped_stages{v}": flag(gluon_gemv, "GROUPED_STAGES", v) for v in (2, 4)},
    **{f"pair_share{round(v * 100)}": flag(gluon_gemv, "PAIR_SM_SHARE", v) for v in (0.75, 0.875, 1.0)},
    # a dense Gluon GEMV on SM_SHARE of the SMs even where every SM would cut its busiest lane by 15% (off), or on
    # every SM only from a cut of 25% (gluon_gemv.WHOLE_GPU_GAIN)
    "whole_gpu": flag(gluon_gemv, "WHOLE_GPU_GAIN", 1.0),
    "whole_gpu25": flag(gluon_gemv, "WHOLE_GPU_GAIN", 0.25),
    # split-K sparse attention's merge on programs of all 512 output dims, not 64 (triton_sparse_attn.MERGE_BLOCK_D)
    "attn_merge_d": flag(triton_sparse_attn, "MERGE_BLOCK_D", 0),
    # a decode query's split attention in programs of 32 heads (half the row gathers; 8 warps: in 4, ptxas spills at
    # 255 registers, offline sm_90, session 26) or of two 64-index blocks (half the partials), not 16 heads x one
    # block in 4 warps (195 registers; triton_sparse_attn.DECODE_SPLIT_CONFIG); other splits: other bits
    "attn_split_h32": flag(triton_sparse_attn, "DECODE_SPLIT_CONFIG",
                           triton_sparse_attn.Config(block_h=32, num_warps=8, num_stages=2, split_blocks=1)),
    "attn_split_blocks2": flag(triton_sparse_attn, "DECODE_SPLIT_CONFIG",
                               triton_sparse_attn.Config(block_h=16, num_warps=4, num_stages=2, split_blocks=2)),
    # wo_a's ring GEMV in two lanes an SM of 4 slots each (session 25's) instead of gluon_gemv.GROUPED_LANES of
    # GROUPED_STAGES
    "grouped_lanes2": (lambda: (setattr(gluon_gemv, "GROUPED_LANES", 2), setattr(gluon_gemv, "GROUPED_STAGES", 4)),
                       lambda: (setattr(gluon_gemv, "GROUPED_LANES", GROUPED_DEFAULTS[0]),
                                setattr(gluon_gemv, "GROUPED_STAGES", GROUPED_DEFAULTS[1]))),
    # a sublayer's hc_post and the next sublayer's pre-norm as two launches (their own backends), not one
    # (kernels/triton_hc_post_norm.py; the same bits)
    "hc_post_norm": torch_backend("hc_post_pre_norm", "composed"),
    # the A/B's other run: bf16 results of bf16 inputs (the ratio-1 compressor, the indexer's weights_proj / wk) on
    # cuBLAS's bf16 GEMM (the fp64 reference in batch-invariant mode), the default before session 28, not the Triton
    # linear (triton_linear.BF16_RESULTS)
    "bf16_linear_triton": flag(triton_linear, "BF16_RESULTS", False),
    # timing only, wrong values: one kind of work removed from the step (critical_path_probes.py)
    **PROBES,
    # one token's experts: w13's K-split partials added by a split-sum launch, not by swiglu_quant
    # (triton_moe.SWIGLU_ADDS_SPLITS)
    "swiglu_adds_splits": flag(triton_moe, "SWIGLU_ADDS_SPLITS", False),
    # ... its programs taking another number of blocks than triton_moe.SPLIT_SUM_GROUPS
    **{f"swiglu_split_groups{v}": flag(triton_moe, "SPLIT_SUM_GROUPS", v) for v in (2, 8)},
    # ... and its activation quantized by act_quant after the pair sort, not in the sort's launch
    # (triton_moe.SORT_QUANTIZES)
    "sort_quantizes": flag(triton_moe, "SORT_QUANTIZES", False),
    # the Gluon GEMVs' K split (gluon_gemv.balanced_work) costing a work item's fixed part or a split sum otherwise
    # (other splits: other bits)
    **{f"gemv_item_steps{v:g}": flag(gluon_gemv, "ITEM_STEPS", v) for v in (0.0, 0.5, 2.0, 4.0)},
    **{f"gemv_split_steps{v:g}": flag(gluon_gemv, "SPLIT_STEPS", v) for v in (1.0, 2.0, 6.0, 10.0)},
    # a V4.1 ratio-2 compressor's decode step (ring writes and reads, the pooling) as torch's row copies around the
    # pooling kernel instead of one launch (triton_pool.RING_POOL)
    "ring_pool": flag(triton_pool, "RING_POOL", False),
    # the index top-k's programs with 64 scores a thread (fewer warps), not 16 (triton_topk.ROW_PER_THREAD): slower
    # (session 21)
    "topk_per_thread": flag(triton_topk, "ROW_PER_THREAD", 64),
    # a decode step's attention projection issued after the mixes fork, not before with the pre-norm
    # (overlap.PROJECT_BEFORE_MIXES)
    "project_first": flag(overlap, "PROJECT_BEFORE_MIXES", False),
    # a V4.1 KV source's publishing started inside the keys' part after the query norm, not before the projection
    # (overlap.PUBLISH_EARLY)
    "publish_early": flag(overlap, "PUBLISH_EARLY", False),
    # a compressed layer's window ring and compressed KV rows in the keys' stream, not on streams of their own
    # (overlap.KEYS_PARTS_ASIDE)
    "keys_parts": flag(overlap, "KEYS_PARTS_ASIDE", False),
    # a V4.1 decode step's engram ids before the embedding, not on a stream of their own (overlap.ENGRAM_IDS_ASIDE)
    "engram_ids_aside": flag(overlap, "ENGRAM_IDS_ASIDE", False),
    # the V4.1 indexer's query side on a stream of its own at every batch size, one-token steps too (by default
    # from 2 tokens: overlap.INDEX_QUERIES_ASIDE_FROM)
    "index_queries": flag(overlap, "INDEX_QUERIES_ASIDE_FROM", 1),
    # the A/B's other run has the HC merge add 256 K splits a load instead of 64 (triton_hc.MERGE_CHUNK): a decode
    # step's 160 splits in one round of loads, not three dependent ones (other bits, the same for every T)
    "merge_chunk": flag(triton_hc, "MERGE_CHUNK", 256),
    # a sublayer's pre-norm issued after its mixes' side stream forks, not before (overlap.NORM_BEFORE_MIXES)
    "norm_first": flag(overlap, "NORM_BEFORE_MIXES", False),
    # decode attention: FlashMLA (one program a query) instead of the split decode config
    # (triton_sparse_attn.DECODE_SPLIT_QUERIES)
    "decode_split_attn": flag(triton_sparse_attn, "DECODE_SPLIT_QUERIES", 0),
    # the split attention's merge reading its partials in a loop over the runtime count, not unrolled
    # (triton_sparse_attn.MERGE_LOADS)
    "merge_loop": flag(triton_sparse_attn, "MERGE_LOADS", "loop"),
    # the reference numerics' top-k: torch.topk + an index sort + a gather instead of one Triton kernel
    "topk_torch_order": torch_backend("topk_torch_order"),
    # the top-k's Triton kernel instead of the Gluon one (gluon_topk.GLUON_TOPK)
    "gluon_topk": flag(gluon_topk, "GLUON_TOPK", False),
    # a decode step's output rotated back in split-K's merge (triton_sparse_attn.MERGE_INVERSE_ROPE; the "no_" run
    # is the one with the RoPE kernel after the merge)
    "merge_rope": flag(triton_sparse_attn, "MERGE_INVERSE_ROPE", False),
    # the Gluon top-k with the row as one padded block (gluon_topk.SPLIT_ROW off; on by default since session 36: the
    # "no_" run is the one without the split)
    "topk_one_part": flag(gluon_topk, "SPLIT_ROW", False),
    # decode graphs captured on their warm-up's stream (cuda_graphs.CAPTURE_ON_WARMUP_STREAM; off by default until
    # measured: the "no_" run is the one with it)
    "warmup_stream": flag(cuda_graphs, "CAPTURE_ON_WARMUP_STREAM", True),
}


def ab_spec(text: str) -> tuple[str, list[int]]:
    name, _, batches = text.partition(":")
    if name not in AB_SWITCHES or not batches:
        raise argparse.ArgumentTypeError(f"--ab takes SWITCH:B[,B...] with SWITCH one of {sorted(AB_SWITCHES)}")
    return name, [int(b) for b in batches.split(",")]


@torch.no_grad()
def run(args):
    device = args.device
    raw = reduced_config(args.tiny)
    cfg = parse_config(raw)
    num = Numerics.reference().invariant() if args.batch_invariant else Numerics.reference()
    t0 = time.perf_counter()
    model, block = build_model(cfg, num, device, args.expert_block)
    sync(device)
    log(f"built {len(model.layers)} layers in {time.perf_counter() - t0:.1f} s; experts "
        f"{f'in (1, {block}) blocks' if block else 'packed FP4'}; "
        f"roles: {[(l.index, l.attn.value, l.compress_ratio, l.engram) for l in cfg.main_layers]}")
    pb = param_bytes(model)
    log(f"parameter GB: {json.dumps({k: round(v / 1e9, 2) for k, v in pb.items()})}")
    c = ceilings_or_none(device)
    log(f"ceilings: copy {c['copy_bw'] / 1e12:.2f} TB/s, bf16 {c['bf16_flops'] / 1e12:.0f} TFLOP/s, "
        f"fp8 {c['fp8_flops'] / 1e12:.0f} TFLOP/s")
    context = args.context
    rows = []
    for B in args.batches:
        state = model.new_state(B + 1, context + 8)  # slot B: the graphs' padding rows
        # each batch's cache from its own seed: the batches a run takes before it do not change it, so runs
        # with other --batches time and compare the same inputs (session 8: with one generator for every
        # batch, rel(graph, forward) at B=32 differed between runs with and without B=1)
        fill_state(state, cfg, torch.Generator(device=device).manual_seed(1000 + B))
        ids = torch.randint(3, cfg.vocab_size, (B,), generator=torch.Generator().manual_seed(B)).tolist()
        batch = lambda: ForwardBatch.build([(s, context, [ids[s]]) for s in range(B)], device=device)
        floor = decode_floor_bytes(model, cfg, B) / c["copy_bw"]
        row = {"case": f"decode B={B}", "B": B, "context": context, "floor_bytes": decode_floor_bytes(model, cfg, B),
               "floor_ms": floor * 1e3}
        saved = {k: t.clone() for k, t in state._tensors.items()}  # a step moves the Engram history

        def restore():
            for k, t in saved.items():
                state._tensors[k].copy_(t)

        def logits_from_saved():
            restore()
            return model(batch(), state).logits

        fast, _ = timed(lambda: model(batch(), state), device, reps=args.reps)
        logits_fast = logits_from_saved()
        row["forward_ms"] = fast * 1e3
        # the batched decode step (model.decode), eager and replayed from a CUDA graph
        dev_ids = torch.tensor(ids, device=device)
        dev_pos = torch.full((B,), context, dtype=torch.long, device=device)
        dev_slots = torch.arange(B, device=device)
        graphs = DecodeGraphs(model, state, pad_slot=B, max_batch=B, max_len=context + 8, device=device,
                              capture=device == "cuda")
        eager = DecodeGraphs(model, state, pad_slot=B, max_batch=B, max_len=context + 8, device=device,
                             capture=False)
        row["eager_decode_ms"] = timed(lambda: eager.run(dev_ids, dev_pos, dev_slots, context + 1), device,
                                       reps=args.reps)[0] * 1e3
        t0 = time.perf_counter()
        graphs.capture_all(context + 1)
        row["capture_s"] = time.perf_counter() - t0
        graph_ms = timed(lambda: graphs.run(dev_ids, dev_pos, dev_slots, context + 1), device,
                         reps=args.reps * 4)[0] * 1e3
        row["graph_ms"] = graph_ms
        for name in (n for n, bs in args.ab.items() if B in bs):  # the same step with a switch off
            off, on = AB_SWITCHES[name]
            off()
            try:
                plain = DecodeGraphs(model, state, pad_slot=B, max_batch=B, max_len=context + 8, device=device)
                plain.capture_all(context + 1)
            finally:
                on()
            # both graphs replayed in turn, ab_rounds times each (a replay's kernels are fixed at capture): a
            # drift of the GPU's speed during the run falls on both sides alike
            rounds = {"off": [], "on": []}
            for _ in range(args.ab_rounds):
                for side, g in (("off", plain), ("on", graphs)):
                    rounds[side].append(timed(lambda g=g: g.run(dev_ids, dev_pos, dev_slots, context + 1),
                                              device, reps=args.ab_reps or args.reps * 4)[0] * 1e3)
            row[f"graph_ms_no_{name}"] = statistics.median(rounds["off"])
            row[f"graph_ms_{name}_again"] = statistics.median(rounds["on"])
            row[f"graph_ms_{name}_rounds"] = rounds
            paired_ms, on_faster = paired_rounds(rounds["off"], rounds["on"])
            row[f"graph_us_{name}_paired"] = paired_ms * 1e3
            restore()
            logits_off = plain.run(dev_ids, dev_pos, dev_slots, context + 1).clone()
            del plain
            restore()
            logits_on = graphs.run(dev_ids, dev_pos, dev_slots, context + 1)
            row[f"logits_equal_no_{name}"] = bool(torch.equal(logits_on, logits_off))
            log(f"A/B {name} B={B}: on {graph_ms:.3f} ms, off {row[f'graph_ms_no_{name}']:.3f}, "
                f"on again {row[f'graph_ms_{name}_again']:.3f} (medians of {args.ab_rounds} alternating rounds: off "
                + " ".join(f"{t:.3f}" for t in rounds["off"]) + " | on " + " ".join(f"{t:.3f}" for t in rounds["on"])
                + f"; paired on - off {paired_ms * 1e3:+.1f} us, on faster in {on_faster} of {args.ab_rounds})"
                + f"; logits bit-identical: {row[f'logits_equal_no_{name}']}")
        restore()
        logits_graph = graphs.run(dev_ids, dev_pos, dev_slots, context + 1).clone()
        row["logits_rel_graph_vs_forward"] = float((logits_graph - logits_fast).norm() / logits_fast.norm())
        row["fast_ms"] = min(fast * 1e3, graph_ms)
        if B in args.timeline and device == "cuda":  # the graph replay itself: idle gaps and side-stream overlap
            try:
                pdl = "on: a kernel's time includes its wait for the one before, gaps become overlaps" \
                    if triton_support.PDL else "off"
                row["timeline"] = timeline_step(lambda: graphs.run(dev_ids, dev_pos, dev_slots, context + 1),
                                                args.out, f"graph_b{B}", note=f"programmatic dependent launch {pdl}")
            except Exception as e:  # a diagnosis, not a result
                log(f"timeline failed: {type(e).__name__}: {e}")
        if B in args.profile:  # the eager batched decode: the kernels a graph replays
            try:
                profile_step(lambda: eager.run(dev_ids, dev_pos, dev_slots, context + 1), args.out, f"decode_b{B}")
            except Exception as e:  # the profile is a diagnosis, not a result
                log(f"profile failed: {type(e).__name__}: {e}")
        del graphs, eager
        if B in args.ref_batches:
            pin_reference(True)
            try:
                slow, _ = timed(lambda: model(batch(), state), device, reps=max(1, args.reps // 3), warm=1)
                logits_ref = logits_from_saved()
            finally:
                pin_reference(False)
            row["ref_ms"] = slow * 1e3
            row["logits_rel_fast_vs_ref"] = float((logits_fast - logits_ref).norm() / logits_ref.norm())
            row["argmax_agree"] = float((logits_fast.argmax(-1) == logits_ref.argmax(-1)).float().mean())
            if B <= 8:  # yardstick: the reference itself with fp32 instead of bf16 attention probabilities
                pin_reference(True)
                model.numerics = dataclasses.replace(num, attn_probs_bf16=False)
                try:
                    logits_alt = logits_from_saved()
                finally:
                    model.numerics = num
                    pin_reference(False)
                row["noise_floor_rel"] = float((logits_alt - logits_ref).norm() / logits_ref.norm())
        log(f"decode {json.dumps(row)}")
        rows.append(row)
        del state, saved
        if device == "cuda":
            torch.cuda.empty_cache()
    S = args.prefill
    if not S:
        return cfg, c, pb, rows
    fp8_f, bf16_f = prefill_floor_flops(model, cfg, S)
    state = model.new_state(1, S + 8)
    ids = torch.randint(3, cfg.vocab_size, (S,), generator=torch.Generator().manual_seed(7)).tolist()
    batch = lambda: ForwardBatch.build([(0, 0, ids)], device=device)
    floor = fp8_f / c["fp8_flops"] + bf16_f / c["bf16_flops"]
    row = {"case": f"prefill S={S}", "S": S, "flops_fp8": fp8_f, "flops_bf16": bf16_f, "floor_ms": floor * 1e3}
    default_path, default_moe = triton_fp8_gemm.LARGE_M_PATH, triton_moe.LARGE_PATH
    first_logits = None
    variants = [(path, moe, off) for path in args.large_m_paths  # how fp8_linear runs prefill-sized row counts
                for moe in args.moe_paths  # and the MoE experts
                for off in (None, *args.prefill_ab)]  # each also with these switches off (AB_SWITCHES), one at a time
    for path, moe, off in variants:
        triton_fp8_gemm.LARGE_M_PATH, triton_moe.LARGE_PATH = path, moe
        name = f"{path}_moe_{moe}" + (f"_no_{off}" if off else "")
        if off:
            AB_SWITCHES[off][0]()
        try:
            t, _ = timed(lambda: model(batch(), state), device, reps=args.prefill_reps)
            logits = model(batch(), state).logits.float()
        finally:
            if off:
                AB_SWITCHES[off][1]()
        row[f"fast_ms_{name}"] = t * 1e3
        if first_logits is None:
            first_logits = logits
        else:  # each variant's logits against the first's (the same exact products, other sums)
            row[f"logits_rel_{name}"] = float((logits - first_logits).norm() / first_logits.norm())
    del first_logits
    triton_fp8_gemm.LARGE_M_PATH, triton_moe.LARGE_PATH = default_path, default_moe
    base_logits = model(batch(), state).logits.float()
    for spec in args.prefill_backends:  # opt-in backends, e.g. "sparse_attn=flashmla,index_scores=triton"
        pins = dict(p.split("=", 1) for p in spec.split(","))
        try:
            for op, name in pins.items():
                kernels.use_backend(op, name)
            t, _ = timed(lambda: model(batch(), state), device, reps=args.prefill_reps)
            logits = model(batch(), state).logits.float()
            row[f"fast_ms_{spec}"] = t * 1e3
            row[f"logits_rel_{spec}"] = float((logits - base_logits).norm() / base_logits.norm())
        except Exception as e:  # a backend under trial must not cost the rest of the run
            log(f"prefill with {spec} failed: {type(e).__name__}: {e}")
        finally:
            for op in pins:
                kernels.use_backend(op, None)
    fast = min(v for k, v in row.items() if k.startswith("fast_ms_")) / 1e3
    row["fast_ms"] = fast * 1e3
    row["fast_tok_s"] = S / fast
    if args.profile_prefill:
        try:
            profile_step(lambda: model(batch(), state), args.out, f"prefill_{S}")
        except Exception as e:
            log(f"profile failed: {type(e).__name__}: {e}")
    if args.prefill_ref:
        pin_reference(True)
        try:
            slow, _ = timed(lambda: model(batch(), state), device, reps=1, warm=0)
        finally:
            pin_reference(False)
        row["ref_ms"] = slow * 1e3
        row["ref_tok_s"] = S / slow
    log(f"prefill {json.dumps(row)}")
    rows.append(row)
    return cfg, c, pb, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny widths (CPU smoke test)")
    ap.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    ap.add_argument("--ref-batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--context", type=int, default=CONTEXT)
    ap.add_argument("--prefill", type=int, default=PREFILL)
    ap.add_argument("--expert-block", type=int, choices=[0, 32, 128], default=native_format.EXPERT_BLOCK,
                    help="inputs per scale of the routed experts (128: re-encoded as a load does; 32: as stored; "
                         "0: packed FP4 as stored, weights='fp4')")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prefill-reps", type=int, default=3)
    ap.add_argument("--no-prefill-ref", dest="prefill_ref", action="store_false")
    ap.add_argument("--prefill-ab", nargs="*", default=[], choices=sorted(AB_SWITCHES), metavar="SWITCH",
                    help=f"the prefill also with each SWITCH off, one at a time: {sorted(AB_SWITCHES)}")
    ap.add_argument("--large-m-paths", nargs="+", default=["triton", "bf16_cublas"])
    ap.add_argument("--moe-paths", nargs="+", default=["fp8", "bf16"])
    ap.add_argument("--batch-invariant", action="store_true",
                    help="the engine's default numerics (Numerics.reference().invariant())")
    ap.add_argument("--prefill-backends", nargs="*", default=[],
                    help="extra prefill runs with backends pinned, each 'op=name[,op=name]'")
    ap.add_argument("--ab", type=ab_spec, nargs="*", default=[], metavar="SWITCH:B,B",
                    help=f"graph decode also with SWITCH off at these batch sizes; switches: {sorted(AB_SWITCHES)}")
    ap.add_argument("--base", nargs="*", default=[], choices=sorted(AB_SWITCHES), metavar="SWITCH",
                    help="run everything with these switches turned as an A/B's other run turns them (the A/Bs "
                         "then measure against that)")
    ap.add_argument("--ab-rounds", type=int, default=5,
                    help="an A/B replays the switch-off and the default graphs in turn this many times each")
    ap.add_argument("--ab-reps", type=int, default=40,
                    help="graph replays a side a round of an A/B (their median is the round's time; 0: 4 x --reps, "
                         "8 in gpu_session.sh's parts up to session 28)")
    ap.add_argument("--profile-prefill", action="store_true", help="torch.profiler over one prefill")
    ap.add_argument("--timeline", type=int, nargs="*", default=[], metavar="B",
                    help="torch.profiler over one graph replay at these batch sizes: idle gaps, overlap (CUDA)")
    ap.add_argument("--profile", type=int, nargs="*", default=None, metavar="B",
                    help="torch.profiler over one decode step at these batch sizes (bare flag: B=1)")
    args = ap.parse_args()
    args.profile = [1] if args.profile == [] else args.profile or []
    args.ab = dict(args.ab)
    for name in args.base:
        AB_SWITCHES[name][0]()
    info = {"command": " ".join(sys.argv), "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if args.device == "cuda":
        import triton

        info.update(device=torch.cuda.get_device_name(0), triton=triton.__version__)
    log(f"INFO {json.dumps(info)}")
    cfg, c, pb, rows = run(args)
    with open(os.path.join(args.out, "bench_real_width.json"), "w") as fh:
        json.dump({"info": info, "ceilings": c, "param_bytes": pb, "rows": rows}, fh, indent=1)
    log("\nSUMMARY (median ms; ratio = measured / floor; ref = every op pinned to its torch reference)")
    log("decode: forward = general forward, eager = model.decode, graph = model.decode from a CUDA graph; "
        "fast = the best of them")
    log(f"{'case':16s} {'floor ms':>9s} {'forward':>9s} {'eager':>9s} {'graph':>9s} {'fast ms':>9s} {'x floor':>8s} "
        f"{'tok/s':>10s} {'ref ms':>10s} {'ref/fast':>8s} {'rel(fast,ref)':>13s} {'rel(graph,fwd)':>14s} "
        f"{'noise floor':>11s}")
    nan = float("nan")
    for r in rows:
        toks = r.get("B", r.get("S"))
        ref = r.get("ref_ms", nan)
        log(f"{r['case']:16s} {r['floor_ms']:9.3f} {r.get('forward_ms', nan):9.2f} "
            f"{r.get('eager_decode_ms', nan):9.2f} "
            f"{r.get('graph_ms', nan):9.2f} {r['fast_ms']:9.2f} {r['fast_ms'] / r['floor_ms']:8.1f} "
            f"{toks / r['fast_ms'] * 1e3:10.0f} {ref:10.1f} {ref / r['fast_ms']:8.1f} "
            f"{r.get('logits_rel_fast_vs_ref', nan):13.2e} {r.get('logits_rel_graph_vs_forward', nan):14.2e} "
            f"{r.get('noise_floor_rel', nan):11.2e}")


if __name__ == "__main__":
    main()
