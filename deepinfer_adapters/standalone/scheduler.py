"""Continuous batching with chunked prefill, and preemption by recompute.

Each step gets a token budget (``max_num_batched_tokens``). Running requests go
first, oldest first: a decode takes one token, an unfinished prefill takes as
much of the rest of the budget as it needs. Waiting requests are then admitted
in arrival order while the budget, ``max_num_seqs`` and state memory allow; the
first that does not fit stops admission (no overtaking, so nobody starves).

When a running request cannot get the blocks it needs, the newest running
request is preempted: its state is freed and it goes back to the waiting queue
with everything it generated so far, to be prefilled again from scratch later
(recompute). The sampler is seeded per (seed, position), so the recomputed
request continues exactly as it would have.

Speculative decoding: a running request that carries draft tokens (proposed after
its last step) decodes its last token plus the drafts in one chunk; the step then
keeps the accepted prefix (the engine sets ``num_computed_tokens`` back to it, the
state is sized to rewind over the rest). Such steps run synchronously.

Async scheduling: a step is planned before the previous step's tokens are
known. ``Request.num_pending`` counts tokens that scheduled steps will sample;
a decode whose input is such a token is scheduled with a placeholder the runner
fills in. A request is never planned past ``max_tokens`` or ``max_model_len``,
and a preempted request whose token is still being sampled waits one step
before it is readmitted.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field

from deepinfer_adapters.standalone.cache_manager import CacheManager
from deepinfer_adapters.standalone.request import Request, Status


@dataclass
class ScheduledSeq:
    request: Request
    start: int  # tokens already in the state
    num_tokens: int  # new tokens this step
    samples: bool  # the chunk ends at the sequence's last token: a new token is sampled
    fresh_slot: bool  # the slot was just assigned: reset its fixed state first
    drafts: list[int] = field(default_factory=list)  # speculative tokens after the last one (to verify)


@dataclass
class SchedulerOutput:
    seqs: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.seqs)


class Scheduler:
    def __init__(self, cache: CacheManager, *, max_num_seqs: int, max_num_batched_tokens: int,
                 max_model_len: int) -> None:
        self.cache = cache
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.max_model_len = max_model_len
        self.waiting: list[Request] = []  # by arrival
        self.running: list[Request] = []  # by arrival: the newest is last

    def add(self, req: Request) -> None:
        _insert(self.waiting, req)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = self._chunk(req, budget)
            if n == 0:
                i += 1
                continue
            drafts = self._drafts(req, n, budget)
            if not self._make_room(req, n + len(drafts), out.preempted):
                break  # req itself was the newest and got preempted
            out.seqs.append(self._commit(req, n, fresh=False, drafts=drafts))
            budget -= n + len(drafts)
            i += 1
        while not out.preempted and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            if req.num_pending:  # its last token is still being sampled
                break
            n = self._chunk(req, budget)
            slot = self.cache.allocate_slot()
            if n == 0 or slot is None:
                raise RuntimeError(f"request {req.request_id} cannot be admitted (chunk {n}, slot {slot})")
            if not self.cache.grow(slot, n):
                self.cache.free(slot)
                break
            self.waiting.pop(0)
            req.slot, req.status = slot, Status.RUNNING
            if req.metrics.first_scheduled_time is None:
                req.metrics.first_scheduled_time = time.time()
            _insert(self.running, req)
            out.seqs.append(self._commit(req, n, fresh=True))
            budget -= n
        return out

    def _chunk(self, req: Request, budget: int) -> int:
        """Tokens of ``req`` to compute this step: the rest of what is known, within budget,
        stopping short of the last one when sampling after it would pass a limit."""
        left = req.num_tokens - req.num_computed_tokens
        if req.num_outputs >= req.params.max_tokens or req.num_tokens >= self.max_model_len:
            left -= 1  # the request finishes once its pending tokens arrive
        return max(0, min(left, budget))

    def _drafts(self, req: Request, n: int, budget: int) -> list[int]:
        """The draft tokens ``req`` verifies this step: only on a decode (its one known token
        left), within the token budget, and never past max_tokens or max_model_len."""
        if not req.draft_tokens or n != 1 or req.num_computed_tokens + 1 != req.num_tokens:
            return []
        room = min(budget - 1, req.params.max_tokens - req.num_outputs - 1,
                   self.max_model_len - req.num_tokens - 1)
        return req.draft_tokens[: max(0, room)]

    def _make_room(self, req: Request, n: int, preempted: list[Request]) -> bool:
        """Blocks for ``n`` more tokens of ``req``, preempting the newest running requests.
        False when ``req`` itself had to go."""
        while not self.cache.grow(req.slot, req.num_computed_tokens + n):
            victim = self.running[-1]
            self.preempt(victim)
            preempted.append(victim)
            if victim is req:
                return False
        return True

    def _commit(self, req: Request, n: int, fresh: bool, drafts: list[int] | None = None) -> ScheduledSeq:
        """``drafts``: the chunk also writes them (positions after the last token); the engine
        moves ``num_computed_tokens`` back to what was accepted."""
        start = req.num_computed_tokens
        req.num_computed_tokens += n
        samples = req.num_computed_tokens == req.num_tokens
        if samples:
            req.num_pending += 1
        req.num_computed_tokens += len(drafts or ())
        return ScheduledSeq(req, start, n, samples, fresh, list(drafts or ()))

    def preempt(self, req: Request) -> None:
        self.running.remove(req)
        self.cache.free(req.slot)
        req.slot, req.status, req.num_computed_tokens = None, Status.WAITING, 0
        req.draft_tokens = []  # proposed from state that is gone
        req.metrics.num_preemptions += 1
        _insert(self.waiting, req)

    def finish(self, req: Request, reason: str) -> None:
        """Take ``req`` out of the queues and free its state (finish or abort)."""
        if req.status is Status.RUNNING:
            self.running.remove(req)
            self.cache.free(req.slot)
            req.slot = None
        elif req.status is Status.WAITING:
            self.waiting.remove(req)
        req.status, req.finish_reason = Status.FINISHED, reason


def _insert(queue: list[Request], req: Request) -> None:
    keys = [r.arrival for r in queue]
    queue.insert(bisect.bisect(keys, req.arrival), req)
