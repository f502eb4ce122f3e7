"""One request's life in the engine: its tokens, how many are in the state, where its state lives."""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from deepinfer_adapters.decoding.sampling_params import SamplingParams
from deepinfer_adapters.errors import DeepInferAdaptersError
from deepinfer_adapters.standalone.outputs import RequestMetrics


class RequestError(DeepInferAdaptersError):
    """A request the engine cannot take; ``param`` names the offending input."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class Status(enum.Enum):
    WAITING = "waiting"  # queued, or preempted and waiting to be recomputed
    RUNNING = "running"  # holds a slot and blocks
    FINISHED = "finished"


_arrivals = itertools.count()


@dataclass(eq=False)
class Request:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    seed: int | None  # the request's seed; the engine draws one when it accepts an unseeded request
    eos_token_id: int
    arrival: int = field(default_factory=lambda: next(_arrivals))  # order: "newest" = largest
    output_token_ids: list[int] = field(default_factory=list)
    output_logprobs: list[dict[int, float]] = field(default_factory=list)
    text: str = ""
    status: Status = Status.WAITING
    finish_reason: str | None = None
    slot: int | None = None
    num_computed_tokens: int = 0  # tokens whose state was written by scheduled steps
    num_pending: int = 0  # tokens being sampled by scheduled steps, not known yet
    draft_tokens: list[int] = field(default_factory=list)  # speculative proposals for the next step
    grammar: Any = None  # compiled structured-output grammar (decoding/structured.py), None = free text
    metrics: RequestMetrics = field(default_factory=lambda: RequestMetrics(arrival_time=time.time()))

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt + outputs, counting the ones still being sampled."""
        return len(self.prompt_token_ids) + len(self.output_token_ids) + self.num_pending

    @property
    def num_outputs(self) -> int:
        return len(self.output_token_ids) + self.num_pending

    def token_ids(self, start: int, end: int) -> list[int | None]:
        """Tokens [start, end); None for the ones still being sampled."""
        prompt, out = self.prompt_token_ids, self.output_token_ids
        n_prompt, n_known = len(prompt), len(prompt) + len(out)
        ids: list[int | None] = list(prompt[start:end]) if start < n_prompt else []
        ids += out[max(start - n_prompt, 0) : max(end - n_prompt, 0)]
        return ids + [None] * (end - max(start, n_known)) if end > n_known else ids

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED
