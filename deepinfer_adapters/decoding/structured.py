"""Structured output in the standalone engine: regex, JSON schema or EBNF, through xgrammar.

A request's ``SamplingParams.structured`` names one grammar. The engine compiles it when the
request arrives (``GrammarBackend.compile``: a bad grammar is a ``StructuredOutputError``
naming the field, and nothing is queued); the runner keeps one ``xgrammar.GrammarMatcher``
per request on the model thread, masks the logits row of each constrained sequence with the
matcher's next-token bitmask before sampling, and advances the matcher with the sampled
token. Steps run in order on that thread, so this holds under async scheduling too.
JSON is compact (no free whitespace between tokens): free whitespace lets a model loop on
spaces until max_tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch

from deepinfer_adapters.errors import DeepInferAdaptersError


class StructuredOutputError(DeepInferAdaptersError):
    """A structured-output request that cannot be compiled; ``param`` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class StructuredOutput:
    """Exactly one of: ``regex``, ``json_schema`` (a JSON Schema as a dict or a JSON string),
    ``grammar`` (EBNF in xgrammar's GBNF dialect, start rule ``root``)."""

    regex: str | None = None
    json_schema: dict[str, Any] | str | None = None
    grammar: str | None = None

    def __post_init__(self) -> None:
        given = [k for k in ("regex", "json_schema", "grammar") if getattr(self, k) is not None]
        if len(given) != 1:
            raise StructuredOutputError(f"structured output: give exactly one of regex, json_schema, grammar "
                                        f"(got {given or 'none'})",
                                        "structured")
        for name in ("regex", "grammar"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise StructuredOutputError(f"structured.{name} must be a non-empty string", f"structured.{name}")
        if self.json_schema is not None and not isinstance(self.json_schema, (dict, str)):
            raise StructuredOutputError("structured.json_schema must be a dict or a JSON string",
                                        "structured.json_schema")

    def key(self) -> tuple[str, str]:
        if self.regex is not None:
            return "regex", self.regex
        if self.grammar is not None:
            return "grammar", self.grammar
        schema = self.json_schema
        return "json_schema", schema if isinstance(schema, str) else json.dumps(schema, sort_keys=True)


class GrammarBackend:
    """xgrammar over one tokenizer: compiles grammars (cached) and makes matchers."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int]) -> None:
        import xgrammar as xgr

        vocab = tokenizer.vocab()
        encoded = [""] * vocab_size
        for token, i in vocab.items():
            if i < vocab_size:
                encoded[i] = token
        info = xgr.TokenizerInfo(encoded, vocab_type=xgr.VocabType.BYTE_LEVEL, vocab_size=vocab_size,
                                 stop_token_ids=stop_token_ids)
        self._xgr, self.vocab_size = xgr, vocab_size
        self._compiler = xgr.GrammarCompiler(info)
        self._cache: dict[tuple[str, str], Any] = {}

    def compile(self, spec: StructuredOutput) -> Any:
        key = spec.key()
        if key not in self._cache:
            kind, text = key
            try:
                if kind == "regex":
                    compiled = self._compiler.compile_regex(text)
                elif kind == "grammar":
                    compiled = self._compiler.compile_grammar(text)
                else:
                    compiled = self._compiler.compile_json_schema(text, any_whitespace=False)
            except Exception as exc:  # xgrammar raises RuntimeError/ValueError with the parser's message
                raise StructuredOutputError(f"structured.{kind} does not compile: {exc}", f"structured.{kind}") from exc
            self._cache[key] = compiled
        return self._cache[key]

    def matcher(self, compiled: Any) -> Any:
        return self._xgr.GrammarMatcher(compiled)

    def mask(self, logits: torch.Tensor, rows: list[int], matchers: list[Any]) -> None:
        """Set every token a matcher does not allow to -inf, in place, on its logits row."""
        bitmask = self._xgr.allocate_token_bitmask(len(rows), self.vocab_size)
        for j, m in enumerate(matchers):
            m.fill_next_token_bitmask(bitmask, j)
        index = torch.tensor(rows, dtype=torch.long, device=logits.device)
        sub = logits[index, : self.vocab_size].float().contiguous()
        self._xgr.apply_token_bitmask_inplace(sub, bitmask.to(sub.device))
        logits[index, : self.vocab_size] = sub.to(logits.dtype)
