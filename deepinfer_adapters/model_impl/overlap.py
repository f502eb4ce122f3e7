"""Two independent parts of a step side by side on the GPU (a second CUDA stream).

At decode most kernels are too small to fill the GPU, so a part that does not depend on
the work around it can run next to it instead of after it: V4.1's hyper-connection mixes
next to the sublayer they are computed for (single-pass HC: the sublayer reads the previous
mix), the shared expert next to the MoE gate, routing and routed experts (``aside``: joined
where its output is added), at decode an attention layer's
window KV, compressor and indexer next to its query projection, and inside that the V4.1 indexer's
query side next to the window, compressor and publishing, and (``KEYS_PARTS_ASIDE``) the window ring
and a source's compressed KV rows on streams of their own; a V4.1 KV source's publishing and the indexer's
head weights start before the projection (``PUBLISH_EARLY``, ``INDEX_WEIGHTS_EARLY``); a V4.1 decode step's engram
ids from its start (``ENGRAM_IDS_ASIDE``). The same kernels run on the
same inputs, so every value is the same bits as run one after the other; only the time
changes. SGLang runs DeepSeek's shared experts this way in its decode graphs.

Calls nest (the attention overlap runs inside the HC one's ``main``): each side part not yet joined
holds a stream of its own (the lowest free level), so an inner side part never queues behind an
outer one; joins may come in any order, from any stream (``join`` makes the calling stream wait).

CUDA graphs capture the fork and join (the side stream joins the capture through
``wait_stream``; its allocations go to the graph's pool). ``side``'s inputs must stay
referenced until ``side_by_side`` returns, or ``aside``'s join is called (the callers'
tensors and closures do): the side stream may still be reading them while ``main`` runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

A = TypeVar("A")
B = TypeVar("B")

ENABLED = True
DECODE_KEYS = True  # attention's keys next to its queries at decode (AttentionBase.decode_step)
SHARED_THROUGH_EXPERTS = True  # the shared expert next to the routed experts too (else next to the gate only)
# a sublayer's pre-norm before its mixes' side stream forks (layers/block_v41.py): behind the mixes' split
# GEMV the one-program norm took ~9 us of the critical path, alone ~2 (H200, B = 1 graph timeline, session 18)
NORM_BEFORE_MIXES = True
# with NORM_BEFORE_MIXES, a decode step's attention projection (wq_a + wkv) too: the B=1 timeline shows it ~4 us
# behind ``mix_logits``; B=1 2.326 -> 2.313 ms in one run, 2.190 either way in the next (H200, 5 alternating
# rounds each, session 19), B=8 the same
PROJECT_BEFORE_MIXES = True
# the V4.1 indexer's query side (its wq_b GEMV, RoPE, FP4 round trip, head weights) on a stream of its own
# next to the window, compressor and publishing of a decode step (layers/attention_v41.py): in a layer that
# runs the indexer those dozens of small kernels, not the query heads, are the critical path -- from this many tokens
# a step: a one-token step runs them inline on the keys' stream, where one join less on the chain pays more than the
# overlap. H200, V4.1 at real widths, 7 alternating rounds (session 37): inline at B=1 -6.1 us (part s37c, 7 of 7)
# and -4.7 (s37d, 6 of 7), at B=8 +10.7 (s37d, 7 of 7); the same bits
INDEX_QUERIES_ASIDE_FROM = 2
# in a compressed layer's decode keys, the window ring and a source's compressed KV rows on streams of their own
# next to the publishing and the selection: B=8 4.959 -> 4.928 ms (H200, 5 alternating rounds, session 19), B=1
# within its rounds' spread
KEYS_PARTS_ASIDE = True
# a V4.1 KV source's publishing (compressor, index keys, compressed KV rows: dozens of small kernels that need only
# the attention's input) started on a stream of its own before the projection is issued (AttentionV41.decode_early),
# instead of inside the keys' part after the query norm: B=1 2.197 -> 2.182 ms, B=8 within the rounds (H200, 5
# alternating rounds, session 20; the KV source's attention 228 -> 182 us in the timelines, with the next two)
PUBLISH_EARLY = True
# the V4.1 indexer's head weights (weights_proj, from the layer's input alone) started in AttentionV41.decode_early
# on a stream of their own, not after the index queries on theirs: B=1 2.141 -> 2.123 ms, B=8 4.849 -> 4.835 (session
# 20, 5 rounds; 3 rounds in another run: 2.186 / 2.190, 4.702 / 4.695)
INDEX_WEIGHTS_EARLY = True
# a V4.1 decode step's engram ids (the n-gram hashes of the new tokens and their ring's write) on a stream of their
# own from the step's start, joined at the first engram layer, instead of before the embedding
ENGRAM_IDS_ASIDE = True
# a V4.1 decode step's shared index tensors of its compressed layers (the compressor rings' rows, the groups' RoPE rows
# and row addresses, the visible rows, the block tables: ``AttentionV41.decode_prelude``) built on a stream of their
# own from the step's start (``DecodeBatch.shared_ahead``), not by the first compressed layer that reads them, whose
# keys chain ends its attention (the s34e timeline: ~40 us of ~16 torch kernels on it). H200, V4.1 at real widths,
# 7 alternating rounds (session 35, part s35a): B=1 1.642 against 1.679 / 1.664 ms (paired -18 us, 7 of 7), B=8
# 4.393 against 4.482 / 4.411 (paired -11 us, 7 of 7), the same bits
DECODE_PRELUDE = True
# a part's owner joining every part again when it ends (on success too, though its reader had joined it): under
# stream capture that makes the owner's next kernel depend on the part's last one as well, a redundant edge across
# the graph's streams. False: the owner joins again only where something failed (``join_all``), so that no side
# stream is left open. H200, V4.1 at real widths, 7 alternating rounds (session 35, part s35c): B=1 1.552 against
# 1.557 / 1.563 ms with it (paired -10.6 us, 7 of 7), B=8 within the rounds' drift (+6.6 us, 4.23 -> 4.37 ms
# across the rounds), the same bits
REJOIN_JOINED = False
# where a V4.1 index layer's decode joins its keys' other parts (the window ring, the compressed KV rows, the block
# table built ahead): "after_topk" (right before the selected keys' kernel), "before_scores" or "before_topk". The
# kernel after the joins waits on their streams too: a graph runs it on one of them, starting it ~2 us after the last
# of its inputs ends, where a kernel behind one other on its own stream launches under PDL. H200, V4.1 at real
# widths, 7 alternating rounds each (session 35; paired: the default's time minus the other's): "before_scores"
# against "after_topk" at B=1 +1.1 us (part s35e, 4 of 7) and +12.5 (s35f, 5 of 7, a machine whose rounds jumped
# between 1.57 and 1.69 ms), at B=8 -15 (6 of 7, inside B=8's drift). Its B=1 timeline (s35e) has the selected keys
# ending 2.7 us after the top-k instead of 5.2, but the index scores then wait for the compressed KV rows' store.
# "before_topk" against "before_scores" at B=1: -3.9 us (s35f, 4 of 7). Again on a quiet machine (session 36, s35f:
# rounds 1.577-1.585 ms) against "after_topk" at B=1: "before_topk" +0.0 us (3 of 7), "before_scores" +2.3 (6 of 7)
KEYS_PARTS_JOINED = "after_topk"
MAX_TOKENS = 1024  # up to this many tokens (decode and short steps; prefill is not measured)
# side parts of steps of up to this many tokens run on streams of a higher CUDA priority than the step's own
# (URGENT_PRIORITY; lower is more urgent, 0 the default and the least): where their blocks and the main stream's
# contend, the block scheduler takes theirs first. A CUDA graph keeps each kernel's priority from its capture (torch
# instantiates graphs with cudaGraphInstantiateFlagUseNodePriority), so replays keep the order. H200, V4.1 at real
# widths (session 33, 7 alternating rounds each): B=1 1.757 against 1.796-1.802 ms (part s33b) and 1.618 against
# 1.653 (s33c), 7 of 7 rounds each, the same bits; urgent at B=4 2.995 against 2.935 and at B=8 4.435 against 4.407
# (slower); the captured step's own stream urgent instead (standalone runner): neutral at B=1, within the noise at
# B=4 and 8 (-1 to -15 us in parts s33b and s33i; code at 9744c12)
URGENT_SIDE_TOKENS = 1
URGENT_PRIORITY = -1
# which side parts are urgent: the shared expert's (B=1 -12 us against it not, 5 of 7 rounds) and the
# hyper-connection mixes' (-57 us, 7 of 7), session 33, part s33c. Graded by nesting level (inner parts -1 / -2 / -3,
# or outer ones) was no better (+20 / -3 us, part s33d; code at ebe6c51), nor did the GEMVs' SM shares move
SHARED_URGENT = True
MIXES_URGENT = True
_STREAMS: dict[tuple[torch.device, int, int], torch.cuda.Stream] = {}
_live: set[int] = set()  # the stream levels of side parts started (``aside``) and not yet joined


def side_by_side(x: torch.Tensor, main: Callable[[], A], side: Callable[[], B], *, when: bool = True,
                 urgent: bool = True) -> tuple[A, B]:
    """(main(), side()); on CUDA with ``x`` (the step's activations, tokens first) at most
    ``MAX_TOKENS`` rows, side() runs on a second stream while main() runs on the current one.
    Elsewhere (CPU, larger steps, torch.compile tracing, ``when`` False) one after the other.
    ``urgent``: the side stream takes ``URGENT_PRIORITY`` at up to ``URGENT_SIDE_TOKENS`` rows."""
    join = aside(x, side, when=when, urgent=urgent)
    try:
        a = main()
    finally:
        b = join()
    return a, b


def join_all(*joins: Callable[[], object] | None) -> None:
    """Join the parts ``aside`` started (None: a part not started): where something failed, so that no side
    stream is left open (and with ``REJOIN_JOINED``, where the owner ends)."""
    for join in joins:
        if join is not None:
            join()


def aside(x: torch.Tensor, side: Callable[[], B], *, when: bool = True, urgent: bool = True) -> Callable[[], B]:
    """Start side() as ``side_by_side`` does and return ``join``: join() makes the calling stream wait
    for side()'s work and returns its value (every call waits: a part read from several streams is
    joined from each). What runs between the two is the main part, however far down the call stack
    join() is called (the MoE hands it to the experts' kernel, which calls it right before adding the
    shared expert's output)."""
    if not (ENABLED and when and x.is_cuda and x.shape[0] <= MAX_TOKENS) or torch.compiler.is_compiling():
        value = side()
        return lambda: value
    level = min(set(range(len(_live) + 1)) - _live)
    priority = URGENT_PRIORITY if urgent and x.shape[0] <= URGENT_SIDE_TOKENS else 0
    key = (x.device, level, priority)
    stream = _STREAMS.get(key)
    if stream is None:
        stream = _STREAMS[key] = torch.cuda.Stream(x.device, priority=priority)
    stream.wait_stream(torch.cuda.current_stream(x.device))
    _live.add(level)
    try:
        with torch.cuda.stream(stream):
            value = side()
            done = torch.cuda.Event()
            done.record(stream)
    except BaseException:
        _live.discard(level)
        raise

    joined = False

    def join(_inputs: Callable[[], B] = side) -> B:  # side() and what it closed over stay allocated with the join
        nonlocal joined
        if not joined:  # the level is free for the next part started; ``done`` marks this part's end on it
            joined = True
            _live.discard(level)
        torch.cuda.current_stream(x.device).wait_event(done)
        return value

    return join
