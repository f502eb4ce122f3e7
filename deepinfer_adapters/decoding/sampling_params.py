"""SamplingParams: what a request asks of the sampler (DeepInfer/vLLM names).

Validation runs on construction and again, with the model's vocabulary size, when
the engine accepts the request; both raise :class:`SamplingParamsError`, whose
message names the parameter and the valid range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepinfer_adapters.decoding.structured import StructuredOutput
from deepinfer_adapters.errors import DeepInferAdaptersError

MAX_LOGPROBS = 20
UINT64_LIMIT = 1 << 64


class SamplingParamsError(DeepInferAdaptersError):
    """A sampling parameter is out of range or of the wrong type."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class SamplingParams:
    """Per-request sampling settings.

    temperature: 0 means greedy (argmax, lowest index on ties); otherwise a finite
        number > 0 that divides the logits.
    top_p: nucleus mass in (0, 1]; 1 = off.
    top_k: keep the k most likely tokens; 0 or -1 = off.
    max_tokens: most tokens to generate, >= 1.
    stop: a string or list of strings that end generation (not included in the text).
    stop_token_ids: token ids that end generation (in addition to EOS).
    ignore_eos: keep generating after EOS.
    logprobs: how many top log-probabilities to return per token (0..20), in
        addition to the chosen token's; None = none.
    seed: uint64 in [0, 2**64). None: the engine derives one per request from its
        own seed and a request counter (``sampler.derive_seed``), so a run is still
        reproducible given the engine seed.
    structured: a ``StructuredOutput`` (regex, JSON schema or EBNF grammar) the output
        must follow (decoding/structured.py); None = free text.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 16
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    logprobs: int | None = None
    seed: int | None = None
    structured: StructuredOutput | None = None

    def __post_init__(self) -> None:
        self.validate()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def validate(self, vocab_size: int | None = None) -> None:
        """Raise SamplingParamsError naming the first bad parameter."""
        t = self.temperature
        if not _is_real(t) or math.isnan(t) or math.isinf(t) or t < 0:
            raise SamplingParamsError(
                f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}", "temperature"
            )
        p = self.top_p
        if not _is_real(p) or not (0 < p <= 1):  # NaN fails the comparison too
            raise SamplingParamsError(f"top_p must be in (0, 1], got {p!r}", "top_p")
        if not _is_int(self.top_k) or self.top_k < -1:
            raise SamplingParamsError(
                f"top_k must be an int >= -1 (0 or -1 = off), got {self.top_k!r}", "top_k"
            )
        if not _is_int(self.max_tokens) or self.max_tokens < 1:
            raise SamplingParamsError(
                f"max_tokens must be an int >= 1, got {self.max_tokens!r}", "max_tokens"
            )
        self._validate_stop()
        self._validate_stop_token_ids(vocab_size)
        if not isinstance(self.ignore_eos, bool):
            raise SamplingParamsError(
                f"ignore_eos must be a bool, got {self.ignore_eos!r}", "ignore_eos"
            )
        lp = self.logprobs
        if lp is not None and (not _is_int(lp) or not 0 <= lp <= MAX_LOGPROBS):
            raise SamplingParamsError(
                f"logprobs must be None or an int in [0, {MAX_LOGPROBS}], got {lp!r}", "logprobs"
            )
        s = self.seed
        if s is not None and (not _is_int(s) or not 0 <= s < UINT64_LIMIT):
            raise SamplingParamsError(
                f"seed must be None or an int in [0, 2**64), got {s!r}", "seed"
            )
        if self.structured is not None and not isinstance(self.structured, StructuredOutput):
            raise SamplingParamsError(
                f"structured must be None or a StructuredOutput, got {type(self.structured).__name__}", "structured"
            )

    def _validate_stop(self) -> None:
        stop = self.stop
        if stop is None:
            return
        items = [stop] if isinstance(stop, str) else stop
        if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) for s in items):
            raise SamplingParamsError(
                f"stop must be None, a str or a list of str, got {type(stop).__name__}: {stop!r}",
                "stop",
            )
        if any(s == "" for s in items):
            raise SamplingParamsError(f"stop strings must be non-empty, got {stop!r}", "stop")

    def _validate_stop_token_ids(self, vocab_size: int | None) -> None:
        ids = self.stop_token_ids
        if ids is None:
            return
        if not isinstance(ids, (list, tuple)) or not all(_is_int(i) for i in ids):
            raise SamplingParamsError(
                f"stop_token_ids must be None or a list of int, got {ids!r}", "stop_token_ids"
            )
        upper = "vocab_size" if vocab_size is None else str(vocab_size)
        for i in ids:
            if i < 0 or (vocab_size is not None and i >= vocab_size):
                raise SamplingParamsError(
                    f"stop_token_ids entries must be in [0, {upper}), got {i}", "stop_token_ids"
                )
