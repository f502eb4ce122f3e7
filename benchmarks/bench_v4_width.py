"""A reduced DeepSeek-V4-Flash at the real widths, ours next to transformers' own
DeepseekV4ForCausalLM on the same GPU: same weights, same prompts, each its own decode loop.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/bench_v4_width.py [--out DIR]
(``--tiny --device cpu`` runs the same script at tiny widths on the CPU, as a smoke test.)

Model: the V4-Flash release config (hidden 4096, 64 heads x 512, q_lora 1024, o_lora 1024
x 8 groups, 256 experts top-6 of width 2048 + 1 shared, index 64 heads x 128 top-512,
vocab 129280, hc 4) cut to 4 layers, as the peer anchor in gpu.md:
  0 sliding | 1 sliding | 2 CSA (ratio 4, indexer) | 3 HCA (ratio 128);
hash MoE on layers 0-2 (num_hash_layers 3, as released), score MoE on 3; no MTP.
Ours: native format (model_impl/native_format.py): E4M3 linears with E8M0 128x128
scales, routed experts E4M3 with 1x128 E8M0 scales (FP4 converted as a load converts it), bf16
elsewhere, ~27 GB, random (benchmarks/bench_real_width.py fill_random, plus random
hash routes). transformers: the same weights dequantized exactly to bf16 (~51 GiB),
copied from ours by model_impl/hf_v4.py ``hf_model_from_ours``; eager attention (V4
ships nothing else), transformers' default experts implementation (grouped_mm).

Workloads, per batch B in 1, 8, 32, 64, every sequence a random 512-token prompt:
- transformers: its own ``generate`` (greedy, its DynamicCache). Decode ms/step =
  (time(generate N tokens) - time(generate 1 token)) / (N - 1), as the anchor in gpu.md;
  prefill tokens/s = B x 512 / time(generate 1 token).
- ours, ``forward``: the same prompts in one ForwardBatch (prefill), then N - 1 decode
  steps, each a one-token-per-sequence ForwardBatch, greedy; ms/step = their mean.
- ours, graphed: the same decode steps through ``model.decode`` replayed from CUDA
  graphs (standalone/cuda_graphs.py DecodeGraphs), when this checkout has both.
The first decode step of ours is fed the token transformers picked, so both compute
logits of the same sequence: the relative difference of those logits (and of the
prefill's last-row logits) is reported. For scale (random-weight models amplify bf16
rounding), at ``--noise-batch`` both are also compared with the exact math: ours in
float32 without round trips (equal to transformers in float32 at tiny widths).

Floors (computed from the models' own tensors):
- decode bytes = every non-expert weight once (FP8 + scales or bf16; hc mixers as fp32)
  + the experts B x 6 uniform picks touch (expected distinct of 256) + per sequence the
  state rows a step must read (128 window rows x 4 layers; CSA: the top-512 compressed
  rows and every index key; HCA: every compressed row; bf16); / measured copy bandwidth.
  transformers' floor counts its own bf16 bytes the same way.
- prefill FLOPs = 2 x tokens x weights applied per token (attention, compressors, shared
  + 6 experts, gate) + sparse attention 4 H K d per query (K: window + selected rows) +
  indexer scores 2 x 64 x 128 per (query, visible key) + the head on the last row;
  ours: FP8 linears at the FP8 rate, the rest at bf16; transformers: all at bf16.
Numbers (first H200 run, ceilings 4.15 TB/s copy, 1423 TFLOP/s FP8, 792 TFLOP/s bf16):
  weights ours 29.3 GB (experts 26.6, embed 1.06, rest 1.65 with the 1.06 head), transformers
  54.8 GB (experts 51.5); decode floor (ours) B=1: 0.55 ms | 8: 1.50 | 32: 3.81 | 64: 5.41;
  transformers' bf16 floor B=1: 0.81 ms; prefill floor (ours) ~575k tokens/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks.* from anywhere

from benchmarks.bench_real_width import AB_SWITCHES, ceilings_or_none, fill_random, log, param_bytes, sync  # noqa: E402
from benchmarks.profiling import profile_step  # noqa: E402
from deepinfer_adapters import kernels  # noqa: E402
from deepinfer_adapters.config import parse_config  # noqa: E402
from deepinfer_adapters.model_impl import native_format  # noqa: E402
from deepinfer_adapters.model_impl.batch import ForwardBatch  # noqa: E402
from deepinfer_adapters.model_impl.deepseek_v4 import DeepseekV4ForCausalLM  # noqa: E402
from deepinfer_adapters.model_impl.hf_v4 import hf_model_from_ours  # noqa: E402
from deepinfer_adapters.model_impl.layers.experts_fp8 import Fp8Experts  # noqa: E402
from deepinfer_adapters.model_impl.layers.linear import Linear  # noqa: E402
from deepinfer_adapters.model_impl.numerics import Numerics  # noqa: E402
from deepinfer_adapters.presets import release_config, tiny_config  # noqa: E402

LAYERS = [0, 0, 4, 128]  # sliding, sliding, CSA, HCA
BATCHES, PROMPT, NEW = (1, 8, 32, 64), 512, 33
TINY = {"batches": (1, 4), "prompt": 160, "new": 5}  # the prompt crosses the window and one ratio-128 block


# ------------------------------------------------------------------------ models ----
def reduced_config(tiny: bool) -> dict:
    """config.json of the reduced model. The trailing 0 is the MTP layer: our parser wants
    every V4 config to declare its draft layer; ``our_config`` drops it, transformers ignores it."""
    raw = tiny_config("v4") if tiny else release_config("v4")
    raw.update(num_hidden_layers=len(LAYERS), compress_ratios=LAYERS + [0], num_hash_layers=3,
               num_nextn_predict_layers=1)
    return raw


def our_config(raw: dict):
    cfg = parse_config(raw)
    n = cfg.num_hidden_layers
    return dataclasses.replace(cfg, layers=cfg.main_layers, draft=None, num_nextn_predict_layers=0,
                               compress_ratios=cfg.compress_ratios[:n])


@torch.no_grad()
def fill_hash_routes(model, cfg, seed=3):
    """tid2eid is a buffer (fill_random fills parameters): k distinct random experts per token."""
    for layer, block in zip(cfg.main_layers, model.layers):
        gate = block.ffn.gate
        if gate.hash:
            g = torch.Generator(device=gate.tid2eid.device).manual_seed(seed + layer.index)
            scores = torch.rand(cfg.vocab_size, layer.n_routed_experts, generator=g, device=gate.tid2eid.device)
            gate.tid2eid.copy_(scores.topk(gate.topk, dim=-1).indices)


def build_ours(raw: dict, device: str, numerics: Numerics, expert_block: int = native_format.EXPERT_BLOCK):
    cfg = our_config(raw)
    model = native_format.build(DeepseekV4ForCausalLM, cfg, numerics, device=device, expert_blocks=expert_block)
    fill_random(model, cfg)
    fill_hash_routes(model, cfg)
    return model, cfg


def hf_param_bytes(hf) -> dict[str, float]:
    """transformers' bytes in param_bytes' groups."""
    out = {"experts": 0.0, "embed": 0.0, "engram_table": 0.0, "rest": 0.0}
    for name, p in hf.named_parameters():
        group = "experts" if ".mlp.experts." in name else "embed" if "embed_tokens" in name else "rest"
        out[group] += p.numel() * p.element_size()
    return out


# ------------------------------------------------------------------------ floors ----
def decode_floor_bytes(groups: dict[str, float], cfg, B: int, context: int) -> float:
    E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    touched = E * (1 - (1 - k / E) ** B)  # expected distinct experts of B tokens x k uniform picks
    per_expert = groups["experts"] / (E * len(cfg.main_layers))
    d = cfg.head_dim
    per_seq = cfg.hidden_size * 2  # the embedding row
    for layer in cfg.main_layers:
        per_seq += cfg.sliding_window * d * 2
        if layer.compress_ratio == 4:
            per_seq += min(cfg.index_topk, context // 4) * d * 2 + context // 4 * cfg.index_head_dim * 2
        elif layer.compress_ratio:
            per_seq += context // layer.compress_ratio * d * 2
    return groups["rest"] + touched * per_expert * len(cfg.main_layers) + B * per_seq


def prefill_flops(model, cfg, B: int, S: int) -> tuple[float, float]:
    """(FLOPs ours runs at the FP8 rate, FLOPs at the bf16 rate) of B prompts of S tokens."""
    fp8 = bf16 = 0.0
    for name, mod in model.named_modules():
        if isinstance(mod, Linear) and name != "head":
            flops = 2 * mod.in_features * mod.out_features
            if mod.block is not None:
                fp8 += flops
            else:
                bf16 += flops
        elif isinstance(mod, Fp8Experts):
            fp8 += cfg.num_experts_per_tok * 2 * (mod.w13[0].numel() + mod.w2[0].numel())
    bf16 += len(cfg.main_layers) * 2 * cfg.hidden_size * cfg.n_routed_experts  # gates
    fp8, bf16 = fp8 * S, bf16 * S
    H, d, W = cfg.num_attention_heads, cfg.head_dim, cfg.sliding_window
    for layer in cfg.main_layers:
        for p in range(S):
            keys = min(p + 1, W)
            if layer.compress_ratio == 4:
                keys += min(cfg.index_topk, (p + 1) // 4)
                bf16 += 2 * cfg.index_n_heads * cfg.index_head_dim * ((p + 1) // 4)
            elif layer.compress_ratio:
                keys += (p + 1) // layer.compress_ratio
            bf16 += 4 * H * keys * d
    bf16 += 2 * cfg.hidden_size * cfg.vocab_size  # the last row's logits
    return fp8 * B, bf16 * B


# --------------------------------------------------------------------- measuring ----
def elapsed(fn, device) -> float:
    sync(device)
    t = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t, out


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


def agree(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.cpu().argmax(-1) == b.cpu().argmax(-1)).float().mean())


@torch.no_grad()
def measure_peer(hf, prompts, batches, new, device, reps):
    """transformers' generate per batch: timings, and the logits ours is checked against."""
    rows, refs = {}, {}
    for B in batches:
        ids = prompts[:B]

        def generate(n, **kw):
            return hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                               use_cache=True, **kw)

        out = generate(2, output_logits=True, return_dict_in_generate=True)  # also the warm-up
        P = ids.shape[1]
        refs[B] = {"prefill": out.logits[0].float().cpu(), "decode": out.logits[1].float().cpu(),
                   "token": out.sequences[:, P].clone()}
        t1 = min(elapsed(lambda: generate(1), device)[0] for _ in range(reps))
        tn, seqs = min((elapsed(lambda: generate(new), device) for _ in range(reps)), key=lambda r: r[0])
        if seqs.shape[1] != P + new:
            raise RuntimeError(f"transformers generated {seqs.shape[1] - P} tokens, not {new}")
        rows[B] = {"hf_gen1_s": t1, f"hf_gen{new}_s": tn, "hf_ms": (tn - t1) / (new - 1) * 1e3,
                   "hf_prefill_tok_s": B * P / t1}
        log(f"transformers B={B}: generate(1) {t1 * 1e3:.1f} ms, generate({new}) {tn * 1e3:.1f} ms -> "
            f"{rows[B]['hf_ms']:.2f} ms/step")
    return rows, refs


def decode_batch(tokens: torch.Tensor, pos: int) -> ForwardBatch:
    B = tokens.shape[0]
    return ForwardBatch(input_ids=tokens, positions=torch.full((B,), pos, dtype=torch.long, device=tokens.device),
                        cu_seqlens=list(range(B + 1)), start_pos=[pos] * B, slots=list(range(B)))


def prefill_batch(ids: torch.Tensor) -> ForwardBatch:
    return ForwardBatch.build([(s, 0, ids[s].tolist()) for s in range(ids.shape[0])], device=ids.device)


def decode_loop(step, first: torch.Tensor, P: int, n: int):
    """n greedy steps from token ``first`` at position P; returns the first step's logits
    (a copy: a graph replays into the same output tensor every step)."""
    tokens, first_logits = first, None
    for i in range(n):
        logits = step(tokens, P + i)
        first_logits = logits.clone() if first_logits is None else first_logits
        tokens = logits.argmax(-1)
    return first_logits


def graphed_decoder(model, state, B: int, max_len: int, device: str, capture: bool = True):
    """(step(tokens, pos) -> logits, None) through DecodeGraphs, or (None, why not).
    capture=False: the same steps run eagerly (the kernels a replay runs, for the profiler)."""
    if not hasattr(model, "decode"):
        return None, f"{type(model).__name__} has no decode()"
    try:
        from deepinfer_adapters.standalone.cuda_graphs import DecodeGraphs
    except ImportError as e:
        return None, f"no deepinfer_adapters.standalone.cuda_graphs.DecodeGraphs ({e})"
    graphs = DecodeGraphs(model, state, pad_slot=B, max_batch=B, max_len=max_len, device=device,
                          capture=capture and device == "cuda")
    if graphs.capture:
        graphs.capture_all(max_len)
    slots = torch.arange(B, device=device)

    def step(tokens, pos):
        return graphs.run(tokens, torch.full((B,), pos, dtype=torch.long, device=device), slots, pos + 1)

    return step, None


@torch.no_grad()
def prefill_moe_paths(model, new_state, ids, paths, logits, device) -> dict:
    """The same prefill with the MoE's prefill path pinned (``triton_moe.LARGE_PATH``), side by side with
    the default's: best of 3 each (after one warm call), each on a fresh state, and the logits against
    the default's."""
    from deepinfer_adapters.kernels import triton_moe

    row, default = {}, triton_moe.LARGE_PATH
    for path in [default, *paths]:
        triton_moe.LARGE_PATH = path
        try:
            runs = []
            for _ in range(4):
                state = new_state()
                runs.append(elapsed(lambda: model(prefill_batch(ids), state).logits, device))
            times, out = zip(*runs[1:])
        finally:
            triton_moe.LARGE_PATH = default
        row[f"prefill_s_moe_{path}"] = min(times)
        row[f"rel_prefill_moe_{path}_vs_default"] = rel(out[-1], logits)
    return row


def measure_ours(model, cfg, prompts, batches, new, device, refs, noise_batch, profile=(), out_dir=".", ab=None,
                 moe_paths=()):
    rows = {}
    for B in batches:
        ids = prompts[:B]
        P = ids.shape[1]
        ref = refs[B]
        first = ref["token"].to(device)
        row = rows[B] = {}
        forward_step = lambda tokens, pos: model(decode_batch(tokens, pos), state).logits  # noqa: E731
        # warm-up (Triton compiles and picks tiles per row count), on a state thrown away
        state = model.new_state(B + 1, P + new + 8)
        model(prefill_batch(ids), state)
        decode_loop(forward_step, first, P, 2)
        state = model.new_state(B + 1, P + new + 8)  # slot B: the graphs' padding slot
        t, out = elapsed(lambda: model(prefill_batch(ids), state).logits, device)
        row.update(ours_prefill_s=t, ours_prefill_tok_s=B * P / t,
                   rel_prefill=rel(out, ref["prefill"]), agree_prefill=agree(out, ref["prefill"]))
        if moe_paths:
            row.update(prefill_moe_paths(model, lambda: model.new_state(B + 1, P + new + 8), ids, moe_paths, out,
                                         device))
        saved = {k: v.clone() for k, v in state._tensors.items()}
        t, logits = elapsed(lambda: decode_loop(forward_step, first, P, new - 1), device)
        row.update(ours_ms=t / (new - 1) * 1e3, rel_decode=rel(logits, ref["decode"]),
                   agree_decode=agree(logits, ref["decode"]))
        for k, v in saved.items():
            state._tensors[k].copy_(v)
        try:
            step, why = graphed_decoder(model, state, B, P + new + 8, device)
        except Exception as e:  # the graphed path is being built: report, keep the rest
            step, why = None, f"{type(e).__name__}: {e}"
            traceback.print_exc()
        if step is None:
            row["graphed"] = f"not available: {why}"
        else:
            t, g_logits = elapsed(lambda: decode_loop(step, first, P, new - 1), device)
            row.update(graphed="ok", graphed_ms=t / (new - 1) * 1e3, rel_graphed_vs_forward=rel(g_logits, logits),
                       rel_graphed=rel(g_logits, ref["decode"]))
            if ab:  # the same graphed decode with one op pinned or one switch off, side by side
                row.update(graphed_pinned(model, state, saved, ab, B, P, new, first, g_logits, device))
        if B in profile:  # the eager model.decode step: the kernels a graph replays
            try:
                for k, v in saved.items():
                    state._tensors[k].copy_(v)
                eager, _ = graphed_decoder(model, state, B, P + new + 8, device, capture=False)
                profile_step(lambda: eager(first, P), out_dir, f"decode_b{B}")
            except Exception as e:  # a diagnosis, not a result
                log(f"profile failed: {type(e).__name__}: {e}")
        if B == noise_batch:
            row.update(noise_yardstick(model, ids, first, ref, out, logits))
        log(f"ours B={B}: {json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})}")
        del state, saved
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def graphed_pinned(model, state, saved, ab, B, P, new, first, unpinned_logits, device) -> dict:
    label, change, undo = ab
    for k, v in saved.items():
        state._tensors[k].copy_(v)
    change()
    try:
        step, why = graphed_decoder(model, state, B, P + new + 8, device)
        if step is None:
            return {"pinned": f"not available: {why}"}
        t, logits = elapsed(lambda: decode_loop(step, first, P, new - 1), device)
    finally:
        undo()
    return {"pinned": label, "graphed_ms_pinned": t / (new - 1) * 1e3,
            "rel_pinned_vs_graphed": rel(logits, unpinned_logits)}


def noise_yardstick(model, ids, first, ref, prefill, decode) -> dict:
    """How far each bf16 model lands from the exact math: ours in float32 without round trips
    (what transformers computes in exact arithmetic; equal to transformers' fp32 model within
    2e-4 at tiny widths, tests/test_hf_v4_from_ours.py), on the same prompts and first token.
    Also ours in bf16 with transformers' rounding points (no FP8 activation / KV round trips)."""
    num, got = model.numerics, {}
    for name, numerics in (("f32", Numerics.float32()), ("plain", dataclasses.replace(num, act_quant=False,
                                                                                       kv_quant=False))):
        model.numerics = numerics
        try:
            state = model.new_state(ids.shape[0], ids.shape[1] + 8)
            got[name] = (model(prefill_batch(ids), state).logits,
                         model(decode_batch(first, ids.shape[1]), state).logits)
        finally:
            model.numerics = num
    (true_pre, true_dec), (plain_pre, plain_dec) = got["f32"], got["plain"]
    out = {}
    for step, truth, hf, ours, plain in (("prefill", true_pre, ref["prefill"], prefill, plain_pre),
                                         ("decode", true_dec, ref["decode"], decode, plain_dec)):
        for who, logits in (("hf", hf), ("ours", ours), ("plain", plain)):
            out[f"f32_rel_{step}_{who}"] = rel(logits, truth)
            out[f"f32_agree_{step}_{who}"] = agree(logits, truth)
    return out


# --------------------------------------------------------------------------- run ----
def run(args) -> dict:
    device = args.device
    raw = reduced_config(args.tiny)
    num = Numerics.reference()
    t0 = time.perf_counter()
    model, cfg = build_ours(raw, device, num, args.expert_block)
    sync(device)
    log(f"ours: built {len(model.layers)} layers in {time.perf_counter() - t0:.1f} s; roles "
        f"{[(l.index, l.attn.value, l.compress_ratio, l.routing.value) for l in cfg.main_layers]}")
    ours_bytes = param_bytes(model)
    c = ceilings_or_none(device)
    log(f"ceilings: copy {c['copy_bw'] / 1e12:.2f} TB/s, bf16 {c['bf16_flops'] / 1e12:.0f} TFLOP/s, "
        f"fp8 {c['fp8_flops'] / 1e12:.0f} TFLOP/s")
    t0 = time.perf_counter()
    hf = hf_model_from_ours(model, raw, torch.bfloat16, experts_implementation=args.hf_experts)
    hf.generation_config.eos_token_id = None  # exactly the tokens asked for
    hf.generation_config.pad_token_id = cfg.pad_token_id
    sync(device)
    hf_bytes = hf_param_bytes(hf)
    import transformers

    peer = {"transformers": transformers.__version__, "experts_implementation": hf.config._experts_implementation,
            "attn_implementation": hf.config._attn_implementation}
    log(f"transformers: built and filled in {time.perf_counter() - t0:.1f} s; {json.dumps(peer)}")
    log(f"parameter GB ours: {json.dumps({k: round(v / 1e9, 2) for k, v in ours_bytes.items()})}; "
        f"transformers: {json.dumps({k: round(v / 1e9, 2) for k, v in hf_bytes.items()})}")
    prompts = torch.randint(3, cfg.vocab_size, (max(args.batches), args.prompt),
                            generator=torch.Generator().manual_seed(0)).to(device)
    hf_rows, refs = measure_peer(hf, prompts, args.batches, args.new, device, args.reps)
    del hf  # ours needs the memory more than the peer does now
    if device == "cuda":
        torch.cuda.empty_cache()
    error = None
    try:
        our_rows = measure_ours(model, cfg, prompts, args.batches, args.new, device, refs, args.noise_batch,
                                args.profile if device == "cuda" else (), args.out, args.ab,
                                moe_paths=args.prefill_moe_paths)
    except Exception as e:  # keep the peer's numbers: they cost minutes
        traceback.print_exc()
        error, our_rows = f"{type(e).__name__}: {e}", {}
    rows = []
    for B in args.batches:
        context = args.prompt + args.new // 2  # the middle of the timed steps
        fp8_f, bf16_f = prefill_flops(model, cfg, B, args.prompt)
        row = {"B": B, "prompt": args.prompt, "new": args.new, **hf_rows[B], **our_rows.get(B, {}),
               "floor_ms_ours": decode_floor_bytes(ours_bytes, cfg, B, context) / c["copy_bw"] * 1e3,
               "floor_ms_hf": decode_floor_bytes(hf_bytes, cfg, B, context) / c["copy_bw"] * 1e3,
               "prefill_flops_fp8": fp8_f, "prefill_flops_bf16": bf16_f,
               "prefill_floor_s_ours": fp8_f / c["fp8_flops"] + bf16_f / c["bf16_flops"],
               "prefill_floor_s_hf": (fp8_f + bf16_f) / c["bf16_flops"]}
        rows.append(row)
    return {"ceilings": c, "peer": peer, "param_bytes_ours": ours_bytes, "param_bytes_hf": hf_bytes,
            "rows": rows, "ours_error": error}


def summary(result: dict) -> None:
    nan = float("nan")
    log(f"\nSUMMARY decode, prompt {result['rows'][0]['prompt']}, greedy, {result['rows'][0]['new'] - 1} steps "
        f"(transformers {result['peer']['transformers']}, experts {result['peer']['experts_implementation']}: "
        f"ms/step = (T(generate N) - T(generate 1)) / (N - 1); ours: mean of the N - 1 steps)")
    log(f"{'B':>3s} {'hf ms':>7s} {'hf tok/s':>9s} {'fwd ms':>7s} {'fwd tok/s':>9s} {'fwd/hf':>7s} "
        f"{'graph ms':>8s} {'graph/hf':>8s} {'floor ms':>8s} {'fwd xfl':>7s} {'hf xfl':>7s} "
        f"{'rel dec':>8s} {'argmax':>6s}")
    for r in result["rows"]:
        B, hf_ms, ours_ms, g_ms = r["B"], r["hf_ms"], r.get("ours_ms", nan), r.get("graphed_ms", nan)
        log(f"{B:3d} {hf_ms:7.2f} {B / hf_ms * 1e3:9.0f} {ours_ms:7.2f} {B / ours_ms * 1e3:9.0f} "
            f"{hf_ms / ours_ms:7.2f} {g_ms:8.2f} {hf_ms / g_ms:8.2f} {r['floor_ms_ours']:8.3f} "
            f"{ours_ms / r['floor_ms_ours']:7.1f} {hf_ms / r['floor_ms_hf']:7.1f} "
            f"{r.get('rel_decode', nan):8.2e} {r.get('agree_decode', nan):6.2f}")
    log("(fwd = ours through forward(ForwardBatch); graph = model.decode from CUDA graphs; x/hf = throughput "
        "ratio; xfl = measured / own decode floor, transformers' floor in its bf16 bytes; rel dec = |ours - hf| "
        "/ |hf| of the first decode step's logits, same input token)")
    log("\nSUMMARY prefill (tokens/s; floor: ours FP8 linears at the FP8 rate, transformers all bf16)")
    log(f"{'B':>3s} {'tokens':>7s} {'hf tok/s':>9s} {'ours tok/s':>10s} {'ours/hf':>7s} {'ours floor':>10s} "
        f"{'hf floor':>9s} {'rel prefill':>11s}")
    for r in result["rows"]:
        tokens = r["B"] * r["prompt"]
        ours = r.get("ours_prefill_tok_s", nan)
        log(f"{r['B']:3d} {tokens:7d} {r['hf_prefill_tok_s']:9.0f} {ours:10.0f} {ours / r['hf_prefill_tok_s']:7.2f} "
            f"{tokens / r['prefill_floor_s_ours']:10.0f} {tokens / r['prefill_floor_s_hf']:9.0f} "
            f"{r.get('rel_prefill', nan):11.2e}")
    for r in result["rows"]:
        if "f32_rel_decode_hf" in r:
            log(f"\nlogits at B={r['B']} against the exact math (ours in float32, no round trips): relative L2 "
                f"difference (argmax agreement)")
            for step in ("prefill", "decode"):
                log(f"  {step:7s}: transformers bf16 {r[f'f32_rel_{step}_hf']:.3e} ({r[f'f32_agree_{step}_hf']:.2f}); "
                    f"ours {r[f'f32_rel_{step}_ours']:.3e} ({r[f'f32_agree_{step}_ours']:.2f}); ours bf16 without "
                    f"round trips {r[f'f32_rel_{step}_plain']:.3e} ({r[f'f32_agree_{step}_plain']:.2f}); "
                    f"ours vs transformers {r[f'rel_{step}']:.3e}")
    for r in result["rows"]:
        if "graphed_ms_pinned" in r:
            log(f"A/B B={r['B']}: graph {r['graphed_ms']:.3f} ms, with {r['pinned']} {r['graphed_ms_pinned']:.3f} ms "
                f"(ratio {r['graphed_ms_pinned'] / r['graphed_ms']:.3f}; rel to the unpinned graph "
                f"{r['rel_pinned_vs_graphed']:.2e})")
    graphed = {r["B"]: r.get("graphed") for r in result["rows"]}
    if any(g != "ok" for g in graphed.values()):
        log(f"graphed decode: {json.dumps(graphed)}")
    if result["ours_error"]:
        log(f"OURS FAILED: {result['ours_error']}")


def pin_spec(text: str):
    """OP=BACKEND -> (label, pin, unpin)."""
    op, _, backend = text.partition("=")
    if backend not in kernels.backends(op):
        raise argparse.ArgumentTypeError(f"--ab-pin takes OP=BACKEND; {op!r} has backends {kernels.backends(op)}")
    return f"{op}={backend}", lambda: kernels.use_backend(op, backend), lambda: kernels.use_backend(op, None)


def switch_spec(name: str):
    """A switch of bench_real_width's A/B runs -> (label, turn it off, back on)."""
    if name not in AB_SWITCHES:
        raise argparse.ArgumentTypeError(f"--ab-off takes one of {sorted(AB_SWITCHES)}")
    off, on = AB_SWITCHES[name]
    return f"{name} switched", off, on


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny widths (CPU smoke test)")
    ap.add_argument("--batches", type=int, nargs="+")
    ap.add_argument("--prompt", type=int)
    ap.add_argument("--new", type=int, help="tokens generated per timed run (N); N - 1 decode steps")
    ap.add_argument("--reps", type=int, default=3, help="transformers: best of this many generate calls")
    ap.add_argument("--noise-batch", type=int, default=8, help="batch of the logits yardstick (0: none)")
    ap.add_argument("--expert-block", type=int, choices=[0, 128], default=native_format.EXPERT_BLOCK,
                    help="our routed experts: E4M3 with a scale per 128 inputs (a load's conversion) or 0: "
                         "packed FP4 as stored (weights='fp4'); transformers gets the same values in bf16")
    ap.add_argument("--hf-experts", default=None, help="transformers' experts_implementation (default: its own)")
    ap.add_argument("--profile", type=int, nargs="*", default=None, metavar="B",
                    help="torch.profiler over one eager model.decode step at these batch sizes (bare flag: the "
                    "smallest; CUDA; profile_decode_bB.txt and kernels_decode_bB.txt in --out)")
    ab = ap.add_mutually_exclusive_group()
    ap.add_argument("--prefill-moe-paths", nargs="*", default=[], choices=["fp8", "bf16"],
                    help="also time each prefill with the MoE's prefill path pinned to these (A/B with the default)")
    ab.add_argument("--ab-pin", type=pin_spec, dest="ab", default=None, metavar="OP=BACKEND",
                    help="after each graphed decode, the same with kernel OP pinned to BACKEND (side by side)")
    ab.add_argument("--ab-off", type=switch_spec, dest="ab", metavar="SWITCH",
                    help="after each graphed decode, the same with one of bench_real_width's A/B switches set as in "
                    "its A/B run (off, or on for the ones off by default)")
    args = ap.parse_args()
    defaults = TINY if args.tiny else {"batches": BATCHES, "prompt": PROMPT, "new": NEW}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.profile = [min(args.batches)] if args.profile == [] else args.profile or []
    if args.noise_batch not in args.batches:
        args.noise_batch = min(args.batches) if args.noise_batch else 0
    info = {"command": " ".join(sys.argv), "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if args.device == "cuda":
        import triton

        info.update(device=torch.cuda.get_device_name(0), triton=triton.__version__)
    log(f"INFO {json.dumps(info)}")
    t0 = time.perf_counter()
    result = run(args)
    info["wall_s"] = round(time.perf_counter() - t0, 1)
    with open(os.path.join(args.out, "bench_v4_width.json"), "w") as fh:
        json.dump({"info": info, **result}, fh, indent=1)
    summary(result)
    log(f"wall {info['wall_s']} s")
    if result["ours_error"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
