"""LLMEngine: the request lifecycle, top to bottom.

    add_request   validate (named ValueError, nothing queued on error) -> Request -> scheduler.waiting
    step          schedule -> run -> postprocess
                    schedule:     scheduler picks prefill chunks and decodes, allocates state,
                                  preempts the newest request when state runs out
                    run:          runner turns the plan into a ForwardBatch, runs the model, samples
                    postprocess:  append tokens, check stop conditions, finish and free
    abort_request queued; the next step finishes the request with reason "abort" and frees its state

Async scheduling (on by default): the model runs on a worker thread. ``step``
plans and launches step N+1 *before* it waits for step N, then postprocesses
step N while N+1 runs, so the CPU work of scheduling, batch building and
postprocessing hides behind the forward. Inputs not known when N+1 was planned
(the tokens step N samples) are filled in by the worker. A request that stops
at step N may still be in step N+1: that token is discarded. Outputs do not
change: a request's tokens depend only on its own (seed, position, logits).
"""

from __future__ import annotations

import itertools
import queue
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from deepinfer_adapters.config import load_config
from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.replay import Replay
from deepinfer_adapters.decoding.sampler import derive_seed
from deepinfer_adapters.decoding.sampling_params import SamplingParams
from deepinfer_adapters.model_impl.tokenizer import load_tokenizer
from deepinfer_adapters.standalone.cache_manager import CacheManager, CacheUsage, state_budget_bytes
from deepinfer_adapters.standalone.config import EngineConfig
from deepinfer_adapters.standalone.outputs import RequestOutput
from deepinfer_adapters.standalone.request import Request, RequestError
from deepinfer_adapters.standalone.cuda_graphs import DecodeGraphs, decode_mode
from deepinfer_adapters.standalone.runner import ModelRunner, StepInput, StepResult, load_model
from deepinfer_adapters.standalone.speculative import Drafter
from deepinfer_adapters.decoding.structured import GrammarBackend, StructuredOutputError
from deepinfer_adapters.standalone.scheduler import Scheduler

DEFAULT_MAX_MODEL_LEN = 4096


@dataclass
class EngineStats:
    """Counters since the engine started; CPU times are the engine thread's, in seconds."""

    steps: int = 0
    overlapped_steps: int = 0  # steps launched while the previous one was still running
    prompt_tokens: int = 0  # prompt tokens computed by completed steps (recomputes count again)
    generation_tokens: int = 0  # sampled tokens kept
    preemptions: int = 0
    schedule_time: float = 0.0  # schedule + batch building
    postprocess_time: float = 0.0
    wait_time: float = 0.0  # blocked on the model
    forward_time: float = 0.0  # the model thread: forward + sampling
    draft_tokens: int = 0  # speculative: draft tokens verified
    accepted_tokens: int = 0  # ... and accepted


class LLMEngine:
    def __init__(self, model_dir: str | Path, config: EngineConfig | None = None, *, progress: bool = True,
                 model: torch.nn.Module | None = None) -> None:
        """``model``: an already loaded model to run instead of loading ``model_dir``'s weights
        (its own numerics then apply); ``model_dir`` still gives the config and tokenizer."""
        self.config = config = config or EngineConfig()
        self.model_dir = Path(model_dir)
        self.model_config = load_config(model_dir)
        self.tokenizer = load_tokenizer(model_dir, pad_id=self.model_config.pad_token_id)
        device = config.resolved_device()
        speculative = config.speculative_tokens
        self.model = model if model is not None else load_model(model_dir, config.make_numerics(), device,
                                                                progress=progress, weights=config.resolved_weights(),
                                                                with_draft=speculative > 0)
        drafter = Drafter(self.model, speculative, config.speculative_min_confidence) if speculative else None
        self.max_model_len = config.max_model_len or min(self.model_config.max_position_embeddings,
                                                         DEFAULT_MAX_MODEL_LEN)
        budget = state_budget_bytes(device, config.state_memory_bytes, config.gpu_memory_utilization)
        decode = decode_mode(config.decode, self.model, device)
        # batched decode pads steps to a bucket with rows of a reserved slot: one slot more
        # speculative steps write drafts that may be rejected: the state rewinds over them
        self.cache = CacheManager.from_budget(self.model.state_spec(rewind=speculative),
                                              num_slots=config.max_num_seqs + (decode != "forward"),
                                              max_model_len=self.max_model_len, block_size=config.block_size,
                                              budget_bytes=budget, device=device)
        graphs = None
        if decode != "forward":
            graphs = DecodeGraphs(self.model, self.cache.cache, pad_slot=self.cache.reserve_padding_slot(),
                                  max_batch=config.max_num_seqs, max_len=self.max_model_len, device=device,
                                  capture=decode == "graphs")
        self.scheduler = Scheduler(self.cache, max_num_seqs=config.max_num_seqs,
                                   max_num_batched_tokens=config.max_num_batched_tokens,
                                   max_model_len=self.max_model_len)
        self.runner = ModelRunner(self.model, self.cache, graphs, drafter)
        self._replay_option = self._make_replay()
        self._grammars: GrammarBackend | None = None
        self.stats = EngineStats()
        self._requests: dict[str, Request] = {}
        self._aborts: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._inflight: deque[tuple[StepInput, Future[StepResult]]] = deque()
        # a speculative step's accepted length decides where the next one starts: no overlap
        overlap = config.async_scheduling and not speculative
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="deepinfer-model") if overlap else None
        self._step_ids = itertools.count()
        self._seed_counter = itertools.count()

    # ------------------------------------------------------------- requests ----
    def make_request(self, request_id: str, prompt: str | Sequence[int], params: SamplingParams | None = None,
                     *, prompt_text: str | None = None) -> Request:
        """Validate and tokenize; raises a ValueError naming the bad input. Queues nothing."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise RequestError(f"sampling_params must be a SamplingParams, got {type(params).__name__}",
                               "sampling_params")
        params.validate(self.model_config.vocab_size)
        if not isinstance(request_id, str) or not request_id:
            raise RequestError(f"request_id must be a non-empty string, got {request_id!r}", "request_id")
        if request_id in self._requests:
            raise RequestError(f"request_id {request_id!r} is already running", "request_id")
        ids = self.encode_prompt(prompt)
        grammar = self._compile_structured(params) if params.structured is not None else None
        text = prompt if isinstance(prompt, str) else prompt_text
        return Request(request_id, text, ids, params, params.seed, eos_token_id=self.model_config.eos_token_id,
                       grammar=grammar)

    def _compile_structured(self, params: SamplingParams):
        if self.config.speculative_tokens:
            raise RequestError("structured output with speculative decoding is not supported yet (the drafts "
                               "would need the grammar too): use speculative_tokens=0", "structured")
        if params.ignore_eos:
            raise RequestError("structured output ends at EOS once the grammar is complete: ignore_eos must be "
                               "false", "ignore_eos")
        if self._grammars is None:  # built on first use: it reads the whole vocabulary
            self._grammars = GrammarBackend(self.tokenizer, self.model_config.vocab_size,
                                            [self.model_config.eos_token_id])
            self.runner.grammars = self._grammars
        try:
            return self._grammars.compile(params.structured)
        except StructuredOutputError as exc:
            raise RequestError(str(exc), exc.param) from exc

    def encode_prompt(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise RequestError("prompt is empty; give at least one character or token", "prompt")
            ids = [self.model_config.bos_token_id, *self.tokenizer.encode(prompt)]
        elif isinstance(prompt, Sequence) and not isinstance(prompt, bytes):
            ids = list(prompt)
            if not ids:
                raise RequestError("prompt is empty; give at least one token id", "prompt")
            vocab = self.model_config.vocab_size
            for i, t in enumerate(ids):
                if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab:
                    raise RequestError(f"prompt token {i} is {t!r}; token ids are ints in [0, {vocab})", "prompt")
        else:
            raise RequestError(f"prompt must be a string or a list of token ids, got {type(prompt).__name__}",
                               "prompt")
        if len(ids) >= self.max_model_len:
            raise RequestError(f"prompt has {len(ids)} tokens; max_model_len is {self.max_model_len}, which must "
                               "leave room for at least one generated token", "prompt")
        return ids

    def add(self, req: Request) -> None:
        if req.request_id in self._requests:
            raise RequestError(f"request_id {req.request_id!r} is already running", "request_id")
        if req.seed is None:  # drawn here, so rejected requests do not move the counter
            req.seed = derive_seed(self.config.seed, next(self._seed_counter))
        self._requests[req.request_id] = req
        self.scheduler.add(req)

    def add_request(self, request_id: str, prompt: str | Sequence[int], params: SamplingParams | None = None) -> Request:
        req = self.make_request(request_id, prompt, params)
        self.add(req)
        return req

    def abort_request(self, request_id: str) -> None:
        """Thread-safe; takes effect at the next ``step``, which returns its "abort" output."""
        self._aborts.put(request_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests) or not self._aborts.empty()

    def cache_usage(self) -> CacheUsage:
        return self.cache.usage()

    # ------------------------------------------------------------------ step ----
    def step(self) -> list[RequestOutput]:
        """One engine step; returns the requests that finished in it."""
        finished = self._process_aborts()
        t0 = time.perf_counter()
        sched = self.scheduler.schedule()
        self.stats.preemptions += len(sched.preempted)
        inp = self.runner.prepare(sched, next(self._step_ids), replay=self._replay(sched)) if sched.seqs else None
        self.stats.schedule_time += time.perf_counter() - t0
        launched = None if inp is None else (inp, self._launch(inp))
        done = None
        if self._worker is None:  # synchronous: run this step now
            done = launched
        else:  # async: this step queues behind the one in flight; finish that one meanwhile
            done = self._inflight.popleft() if self._inflight else None
            if launched is not None and done is not None and not done[1].done():
                self.stats.overlapped_steps += 1
            if launched is not None:
                self._inflight.append(launched)
        if done is not None:
            finished += self._postprocess(*self._wait(done))
        elif launched is None and not finished and self.scheduler.has_unfinished():
            raise RuntimeError("the scheduler made no progress with requests waiting (engine bug)")
        return finished

    def _replay(self, sched) -> Replay | None:
        """SWA bounded replay for this step (V4.1 only); None = plain forward."""
        return self._replay_option

    def _make_replay(self) -> Replay | None:
        cfg = self.config
        if cfg.replay == "off":
            return None
        if not isinstance(self.model, DeepseekV41ForCausalLM):
            raise ConfigError(f"replay {cfg.replay!r} needs a V4.1 model (consumer layers after the first "
                              f"ratio-1 layer); this one is {self.model.cfg.arch}", "replay")
        replay = Replay(cfg.replay, cfg.replay_keep)
        try:
            replay.validate(self.model.cfg)
        except ValueError as exc:
            raise ConfigError(f"replay_keep: {exc}", "replay_keep") from exc
        return replay

    def _launch(self, inp: StepInput) -> Future[StepResult]:
        if self._worker is not None:
            return self._worker.submit(self._timed_execute, inp)
        fut: Future[StepResult] = Future()
        fut.set_result(self._timed_execute(inp))
        return fut

    def _timed_execute(self, inp: StepInput) -> StepResult:
        t0 = time.perf_counter()
        result = self.runner.execute(inp)
        self.stats.forward_time += time.perf_counter() - t0
        return result

    def _wait(self, launched: tuple[StepInput, Future[StepResult]]) -> tuple[StepInput, StepResult]:
        t0 = time.perf_counter()
        result = launched[1].result()
        self.stats.wait_time += time.perf_counter() - t0
        return launched[0], result

    def _postprocess(self, inp: StepInput, result: StepResult) -> list[RequestOutput]:
        t0 = time.perf_counter()
        self.stats.steps += 1
        finished = []
        for s in inp.schedule.seqs:
            self.stats.prompt_tokens += max(0, min(s.start + s.num_tokens, s.request.num_prompt_tokens) - s.start)
        for j, i in enumerate(inp.sampling):
            s = inp.schedule.seqs[i]
            req = s.request
            if req.finished:  # stopped (or aborted) while this step was planned: discard
                continue
            req.num_pending -= 1
            tokens = result.tokens[j]
            if s.drafts:  # the state holds the last token and the accepted drafts; the rest rewinds
                req.num_computed_tokens = s.start + s.num_tokens + len(tokens) - 1
                self.stats.draft_tokens += len(s.drafts)
                self.stats.accepted_tokens += len(tokens) - 1
            for n, token in enumerate(tokens):
                reason = self._keep(req, token, result.logprobs[j][n], result.top[j][n] if result.top else [])
                if reason is not None:
                    finished.append(self._finish(req, reason))
                    break
            else:
                if result.drafts is not None:
                    req.draft_tokens = result.drafts[j]
        self.stats.postprocess_time += time.perf_counter() - t0
        return finished

    def _keep(self, req: Request, token: int, logprob: float, top: list[tuple[int, float]]) -> str | None:
        """Append one sampled token to ``req``; the stop reason it causes, if any."""
        req.output_token_ids.append(token)
        self.stats.generation_tokens += 1
        if req.params.logprobs is not None:
            entry = {token: logprob}
            for tid, lp in top[: req.params.logprobs]:
                entry.setdefault(tid, lp)
            req.output_logprobs.append(entry)
        if req.metrics.first_token_time is None:
            req.metrics.first_token_time = time.time()
        return self._stop_reason(req, token)

    def _stop_reason(self, req: Request, token: int) -> str | None:
        p = req.params
        if (token == req.eos_token_id and not p.ignore_eos) or token in (p.stop_token_ids or ()):
            return "stop"
        if p.stop_strings and _find_stop(self._decode(req), p.stop_strings) >= 0:
            return "stop"
        if len(req.output_token_ids) >= p.max_tokens or \
                req.num_prompt_tokens + len(req.output_token_ids) >= self.max_model_len:
            return "length"
        return None

    def _decode(self, req: Request) -> str:
        return self.tokenizer.decode(req.output_token_ids, skip_special_tokens=True)

    def _finish(self, req: Request, reason: str) -> RequestOutput:
        text = self._decode(req)
        cut = _find_stop(text, req.params.stop_strings)
        req.text = text if cut < 0 else text[:cut]
        self.scheduler.finish(req, reason)
        if req.grammar is not None:
            self.runner.forget(req.arrival)
        req.metrics.finish_time = time.time()
        del self._requests[req.request_id]
        return self.output(req)

    def _process_aborts(self) -> list[RequestOutput]:
        out = []
        while not self._aborts.empty():
            req = self._requests.get(self._aborts.get())
            if req is not None:
                out.append(self._finish(req, "abort"))
        return out

    @staticmethod
    def output(req: Request) -> RequestOutput:
        return RequestOutput(
            request_id=req.request_id, prompt=req.prompt, prompt_token_ids=list(req.prompt_token_ids),
            text=req.text, token_ids=list(req.output_token_ids),
            logprobs=list(req.output_logprobs) if req.params.logprobs is not None else None,
            finish_reason=req.finish_reason, metrics=req.metrics)

    def close(self) -> None:
        """Wait for the step in flight and stop the model thread."""
        while self._inflight:
            self._wait(self._inflight.popleft())
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None

    def __del__(self) -> None:
        worker = getattr(self, "_worker", None)
        if worker is not None:
            worker.shutdown(wait=False)


def _find_stop(text: str, stops: Sequence[str]) -> int:
    """Index of the earliest stop string in ``text``, or -1."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits, default=-1)
