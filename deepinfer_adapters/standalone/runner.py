"""ModelRunner: scheduled work -> ForwardBatch -> model -> sampler.

``prepare`` runs on the scheduler's thread and copies everything the step needs
into a ``StepInput`` of plain data (token ids, block-table snapshots, sampling
parameters), so the scheduler may go on changing requests and tables while the
step runs. ``execute`` runs on the model thread, one step at a time, in order.
A decode input that was still being sampled when the step was planned (async
scheduling) is a placeholder; ``execute`` fills it from the tokens the previous
step sampled, which is the only state carried from one step to the next.
"""

from __future__ import annotations

import inspect
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from deepinfer_adapters.config import ARCH_V41, load_config
from deepinfer_adapters.decoding.sampler import sample, seed_to_int64
from deepinfer_adapters.decoding.structured import GrammarBackend
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.standalone.cache_manager import CacheManager, PagedStateCache
from deepinfer_adapters.standalone.cuda_graphs import DecodeGraphs
from deepinfer_adapters.standalone.speculative import Drafter, accepted
from deepinfer_adapters.standalone.scheduler import SchedulerOutput

PLACEHOLDER = -1


def model_class(arch: str) -> type:
    if arch == ARCH_V41:
        from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM

        return DeepseekV41ForCausalLM
    from deepinfer_adapters.model_impl.deepseek_v4 import DeepseekV4ForCausalLM

    return DeepseekV4ForCausalLM


def load_model(model_dir: str | Path, numerics: Numerics, device: str = "cpu", progress: bool = True,
               weights: str = "dense", with_draft: bool = False):
    """The model class for the checkpoint's arch (v4, v4-0731 -> V4; v41 -> V4.1), weights loaded
    (``weights``: "dense" float64 reference storage or "fp8" as stored, model_impl/native_format.py).
    Draft stages only ``with_draft`` (speculative decoding): they cost a ring update per layer
    and step."""
    cls = model_class(load_config(model_dir).arch)
    kwargs: dict[str, Any] = {}
    if "with_draft" in inspect.signature(cls.__init__).parameters:
        kwargs["with_draft"] = with_draft
    model = cls.from_pretrained(model_dir, numerics, device=device, progress=progress, weights=weights, **kwargs)
    return model.eval()


@dataclass
class StepInput:
    """One planned step as plain data and tensors, built on the engine thread."""

    step: int
    batch: ForwardBatch  # PLACEHOLDER ids where the previous step's sample goes
    keys: list[int]  # per sequence: the request's unique key (its arrival number)
    fill_rows: torch.Tensor  # [F] rows of batch.input_ids to fill ...
    fill_keys: list[int]  # ... with the token last sampled for these request keys
    tables: dict[int, list[int]]  # slot -> block ids, as scheduled
    table_tensors: dict[int, torch.Tensor]
    resets: list[int]  # slots given to a new sequence this step
    sampling: list[int]  # indices of the sequences that sample
    # per sampling sequence: the drafts it verifies (its rows: one per draft + 1) and the
    # position of its last known token
    drafts: list[list[int]]
    last_positions: list[int]
    grammars: list[Any]  # per sampling sequence: its compiled grammar, None = free text
    temperature: torch.Tensor  # [R] per sampled row (a row per sampling sequence, more with drafts) ...
    top_p: torch.Tensor
    top_k: torch.Tensor
    seeds: torch.Tensor  # int64 bits of the uint64 seeds
    positions: torch.Tensor  # position of each sampled token
    num_logprobs: int
    replay: Any = None  # per-step model option (SWA bounded replay), passed through when set
    decode_slots: torch.Tensor | None = None  # set when the step is a pure decode step (batched path)
    schedule: SchedulerOutput | None = None  # the scheduler's objects; execute never reads them


@dataclass
class StepResult:
    step: int
    tokens: list[list[int]]  # per sampling sequence: one token, or the accepted drafts + one
    logprobs: list[list[float]]
    top: list[list[list[tuple[int, float]]]] | None  # per sampling sequence and token, most likely first
    drafts: list[list[int]] | None = None  # per sampling sequence: proposals for its next step


class ModelRunner:
    def __init__(self, model: torch.nn.Module, cache: CacheManager, decode_graphs: DecodeGraphs | None = None,
                 drafter: Drafter | None = None) -> None:
        self.model, self.cache_manager, self.decode_graphs, self.drafter = model, cache, decode_graphs, drafter
        self.state: PagedStateCache = cache.cache
        self.device = self.state.device
        self._last_sampled: dict[int, int] = {}  # key -> token, from the previous executed step
        self.decode_steps = 0  # steps that took model.decode (the batched / graphed path)
        # structured output: the engine sets ``grammars`` with the first constrained request;
        # matchers live on the model thread, keyed by request, dropped after ``forget``
        self.grammars: GrammarBackend | None = None
        self._matchers: dict[int, Any] = {}
        self._forget: deque[int] = deque()

    def prepare(self, sched: SchedulerOutput, step: int, replay: Any = None) -> StepInput:
        """Engine thread: the ForwardBatch, block-table snapshots and sampling tensors."""
        seqs, keys, fill_rows, fill_keys, tables, resets, sampling = [], [], [], [], {}, [], []
        temperature, top_p, top_k, seeds, positions, num_logprobs = [], [], [], [], [], 0
        drafts, last_positions, logits_rows, grammars = [], [], [], []
        row = 0
        for i, s in enumerate(sched.seqs):
            req = s.request
            ids = req.token_ids(s.start, s.start + s.num_tokens)
            for j, t in enumerate(ids):
                if t is None:
                    fill_rows.append(row + j)
                    fill_keys.append(req.arrival)
            seqs.append((req.slot, s.start, [PLACEHOLDER if t is None else t for t in ids] + s.drafts))
            keys.append(req.arrival)
            tables[req.slot] = self.cache_manager.table(req.slot)
            if s.fresh_slot:
                resets.append(req.slot)
            if s.samples:
                p = req.params
                sampling.append(i)
                drafts.append(s.drafts)
                grammars.append(req.grammar)
                last = s.start + s.num_tokens - 1
                last_positions.append(last)
                for j in range(len(s.drafts) + 1):  # a token after the last one and after every draft
                    temperature.append(float(p.temperature))
                    top_p.append(float(p.top_p))
                    top_k.append(int(p.top_k))
                    seeds.append(seed_to_int64(req.seed))
                    positions.append(last + 1 + j)
                    logits_rows.append(row + s.num_tokens - 1 + j)
                num_logprobs = max(num_logprobs, p.logprobs or 0)
            row += s.num_tokens + len(s.drafts)
        dev = self.device
        batch = ForwardBatch.build(seqs, device=dev)
        batch.logits_rows = torch.tensor(logits_rows, dtype=torch.long, device=dev)
        if replay is not None:  # bounded replay narrows prompt prefills: the *original* prompt's length,
            # also when a preempted request recomputes prompt + outputs, so the recomputed state
            # equals the one it replaces
            batch.prompt_len = [s.request.num_prompt_tokens if s.start < s.request.num_prompt_tokens else None
                                for s in sched.seqs]
        # a pure decode step (every sequence one token past its prompt) takes model.decode
        decode = self.decode_graphs is not None and all(
            s.num_tokens == 1 and not s.drafts and s.start >= s.request.num_prompt_tokens for s in sched.seqs)
        return StepInput(
            decode_slots=torch.tensor(batch.slots, dtype=torch.long, device=dev) if decode else None,
            step=step, batch=batch, keys=keys, fill_rows=torch.tensor(fill_rows, dtype=torch.long, device=dev),
            fill_keys=fill_keys, tables=tables,
            table_tensors={k: torch.tensor(v, dtype=torch.long, device=dev) for k, v in tables.items()},
            resets=resets, sampling=sampling, drafts=drafts, last_positions=last_positions, grammars=grammars,
            temperature=torch.tensor(temperature, device=dev),
            top_p=torch.tensor(top_p, device=dev), top_k=torch.tensor(top_k, dtype=torch.long, device=dev),
            seeds=torch.tensor(seeds, dtype=torch.long, device=dev),
            positions=torch.tensor(positions, dtype=torch.long, device=dev), num_logprobs=num_logprobs,
            replay=replay, schedule=sched)

    @torch.inference_mode()
    def execute(self, inp: StepInput) -> StepResult:
        """Model thread: fill placeholders, bind the state, forward, sample."""
        batch = inp.batch
        if inp.fill_keys:
            toks = [self._last_sampled[k] for k in inp.fill_keys]
            batch.input_ids[inp.fill_rows] = torch.tensor(toks, dtype=torch.long, device=self.device)
        self.state.bind(inp.tables, inp.table_tensors)
        for slot in inp.resets:
            self.state.reset(slot)
        if inp.decode_slots is not None:
            logits = self.decode_graphs.run(batch.input_ids, batch.positions, inp.decode_slots,
                                            max(batch.start_pos) + 1)
            self.decode_steps += 1
            if len(inp.sampling) != batch.num_seqs:
                logits = logits[torch.tensor(inp.sampling, dtype=torch.long, device=logits.device)]
        else:
            kwargs = {} if inp.replay is None else {"replay": inp.replay}
            logits = self.model(batch, self.state, **kwargs).logits
        result = StepResult(inp.step, [], [], None)
        if inp.sampling:
            constrained = self._constrain(inp, logits)
            res = sample(logits, inp.temperature, inp.top_p, inp.top_k, inp.seeds, inp.positions,
                         num_logprobs=inp.num_logprobs)
            tokens, logprobs = res.tokens.tolist(), res.logprobs.tolist()
            for j, matcher in constrained:  # no drafts with grammars: sequence j is row j
                if not matcher.accept_token(tokens[j]):
                    raise RuntimeError(f"grammar rejected the token it allowed ({tokens[j]}): engine bug")
            top = None if res.top_token_ids is None else \
                [list(zip(i, v)) for i, v in zip(res.top_token_ids.tolist(), res.top_logprobs.tolist())]
            result.top = None if top is None else []
            row = 0
            for drafts in inp.drafts:  # keep the accepted drafts and the token after them
                keep = accepted(drafts, tokens[row : row + len(drafts) + 1]) + 1
                result.tokens.append(tokens[row : row + keep])
                result.logprobs.append(logprobs[row : row + keep])
                if top is not None:
                    result.top.append(top[row : row + keep])
                row += len(drafts) + 1
            if self.drafter is not None:
                result.drafts = self.drafter(
                    [inp.keys[i] for i in inp.sampling], [t[-1] for t in result.tokens],
                    [p + len(t) - 1 for p, t in zip(inp.last_positions, result.tokens)],
                    [batch.slots[i] for i in inp.sampling], self.state)
        self._last_sampled = {inp.keys[i]: t[-1] for i, t in zip(inp.sampling, result.tokens)}
        while self._forget:  # after this step's use: a step planned before the finish may still run
            self._matchers.pop(self._forget.popleft(), None)
        return result

    def forget(self, key: int) -> None:
        """Engine thread: request ``key`` finished; its grammar matcher can go."""
        self._forget.append(key)

    def _constrain(self, inp: StepInput, logits: torch.Tensor) -> list[tuple[int, Any]]:
        """Mask the logits rows of grammar-constrained sequences; their (row, matcher)."""
        constrained = []
        for j, (i, grammar) in enumerate(zip(inp.sampling, inp.grammars)):
            if grammar is None:
                continue
            key = inp.keys[i]
            matcher = self._matchers.get(key)
            if matcher is None:
                matcher = self._matchers[key] = self.grammars.matcher(grammar)
            if not matcher.is_terminated():  # terminated: the request stopped, this row is discarded
                constrained.append((j, matcher))
        if constrained:
            self.grammars.mask(logits, [j for j, _ in constrained], [m for _, m in constrained])
        return constrained
