"""What the engine hands back: one RequestOutput per finished request."""

from __future__ import annotations

from dataclasses import dataclass

FINISH_REASONS = ("stop", "length", "abort")


@dataclass
class RequestMetrics:
    """Wall-clock times (``time.time()``) of a request's milestones; None until reached."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    num_preemptions: int = 0

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def latency(self) -> float | None:
        return None if self.finish_time is None else self.finish_time - self.arrival_time


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None  # None when the request came as token ids
    prompt_token_ids: list[int]
    text: str  # detokenized output, cut before a matched stop string
    token_ids: list[int]
    # per output token, {token id: logprob} for the sampled token and the top-``logprobs``
    # candidates; None unless SamplingParams.logprobs was set
    logprobs: list[dict[int, float]] | None
    finish_reason: str | None  # "stop" | "length" | "abort"; None while unfinished
    metrics: RequestMetrics

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
