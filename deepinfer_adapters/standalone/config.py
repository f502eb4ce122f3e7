"""EngineConfig: the standalone engine's knobs, from defaults, a YAML file and CLI flags (flags win)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepinfer_adapters.config import WEIGHT_FORMATS
from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.model_impl.numerics import Numerics

NUMERICS = ("reference", "float32", "float32-quant")
REPLAY_MODES = ("off", "mask", "compact")
DECODE_MODES = ("auto", "graphs", "eager", "forward")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*$", re.I)


@dataclass
class EngineConfig:
    max_num_seqs: int = 32  # sequences in one step (and state slots)
    max_num_batched_tokens: int = 1024  # tokens in one step: prefill chunks + decodes
    max_model_len: int | None = None  # prompt + output; None: min(model limit, 4096)
    block_size: int = 64  # tokens per page of "rows" state; rounded up to a multiple of every ratio
    state_memory_bytes: int | str = "2GiB"  # CPU: state budget (fixed slots + pages)
    gpu_memory_utilization: float = 0.9  # GPU: fraction of device memory the process may use
    async_scheduling: bool = True  # prepare step N+1 on the CPU while the model runs step N
    numerics: str = "reference"  # reference (bf16 + quantization points) | float32 | float32-quant
    device: str | None = None  # None: cuda when available, else cpu
    seed: int = 0  # seeds of requests that do not bring their own
    # SWA bounded replay for V4.1 prompt prefills (model_impl/replay.py): off (exact) | mask | compact.
    # DeepInfer defaults to compact for V4.1; we default to off so outputs equal the full model.
    replay: str = "off"
    replay_keep: int = 140  # >= sliding window + the most tokens speculative decoding may roll back
    # decode steps (every sequence one new token): "graphs" = model.decode replayed from CUDA
    # graphs (standalone/cuda_graphs.py), "eager" = model.decode without graphs, "forward" = the
    # general forward; "auto" = graphs on CUDA when the model has decode(), else forward
    decode: str = "auto"
    weights: str = "auto"  # dense (float64, the reference path) | fp8 (as stored) | fp4 (FP4 experts packed) | auto
    # kernels whose results do not depend on the batch (seeded sampling is then reproducible
    # whatever else runs); off lets the GPU use its fastest kernels
    batch_invariant: bool = True
    # speculative decoding with the model's draft stages (standalone/speculative.py): draft tokens
    # verified per step (0 = off; DSpark proposes up to 5); such steps run synchronously
    speculative_tokens: int = 0
    # confidence-scheduled verification: verify the leading drafts whose predicted cumulative
    # acceptance probability is at least this (0 = all of them)
    speculative_min_confidence: float = 0.0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            _positive_int(name, getattr(self, name))
        if self.max_model_len is not None:
            _positive_int("max_model_len", self.max_model_len)
            if self.max_model_len < 2:
                raise ConfigError("max_model_len must be at least 2 (one prompt token and one output token)",
                                  "max_model_len")
        self.state_memory_bytes = parse_size(self.state_memory_bytes, "state_memory_bytes")
        if not 0.0 < float(self.gpu_memory_utilization) <= 1.0:
            raise ConfigError(f"gpu_memory_utilization is {self.gpu_memory_utilization}; must be in (0, 1]",
                              "gpu_memory_utilization")
        if self.numerics not in NUMERICS:
            raise ConfigError(f"numerics is {self.numerics!r}; valid: {list(NUMERICS)}", "numerics")
        if not isinstance(self.async_scheduling, bool):
            raise ConfigError(f"async_scheduling must be true or false, got {self.async_scheduling!r}",
                              "async_scheduling")
        if self.device is not None and not str(self.device).startswith(("cpu", "cuda")):
            raise ConfigError(f"device is {self.device!r}; valid: cpu, cuda, cuda:N", "device")
        if self.replay not in REPLAY_MODES:
            raise ConfigError(f"replay is {self.replay!r}; valid: {list(REPLAY_MODES)}", "replay")
        _positive_int("replay_keep", self.replay_keep)
        if self.weights not in ("auto", *WEIGHT_FORMATS):
            raise ConfigError(f"weights is {self.weights!r}; valid: {', '.join(('auto', *WEIGHT_FORMATS))}", "weights")
        if not isinstance(self.batch_invariant, bool):
            raise ConfigError(f"batch_invariant must be true or false, got {self.batch_invariant!r}",
                              "batch_invariant")
        if not isinstance(self.speculative_tokens, int) or isinstance(self.speculative_tokens, bool) \
                or self.speculative_tokens < 0:
            raise ConfigError(f"speculative_tokens must be a non-negative integer, got {self.speculative_tokens!r}",
                              "speculative_tokens")
        if not 0.0 <= float(self.speculative_min_confidence) < 1.0:
            raise ConfigError(f"speculative_min_confidence is {self.speculative_min_confidence}; must be in [0, 1)",
                              "speculative_min_confidence")
        if self.decode not in DECODE_MODES:
            raise ConfigError(f"decode is {self.decode!r}; valid: {list(DECODE_MODES)}", "decode")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ConfigError(f"seed must be a non-negative integer, got {self.seed!r}", "seed")

    def make_numerics(self) -> Numerics:
        """Batch-invariant unless turned off: seeded sampling must not depend on the batch."""
        if self.numerics == "reference":
            numerics = Numerics.reference()
        else:
            numerics = Numerics.float32(quant=self.numerics == "float32-quant")
        return numerics.invariant() if self.batch_invariant else numerics

    def resolved_weights(self) -> str:
        """``weights: auto``: dense float64 on the CPU (the reference path). On CUDA the checkpoint's FP8
        weights, its FP4 experts kept packed ("fp4") when batch invariance is off -- the fastest decode on
        the H200 and half the experts' memory (BENCHMARKS.md, session 13) -- and converted to E4M3 ("fp8")
        when it is on: every MoE call then takes the bf16 path, where E4M3 is ~1.1x faster and both give
        the same bits (docs/notes/gpu_fast_path.md)."""
        if self.weights != "auto":
            return self.weights
        if not self.resolved_device().startswith("cuda"):
            return "dense"
        return "fp8" if self.batch_invariant else "fp4"

    def resolved_device(self) -> str:
        if self.device is not None:
            return str(self.device)
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: Any) -> "EngineConfig":
        """Defaults, then the YAML file at ``path``, then ``overrides`` (None values are ignored,
        so unset CLI flags leave the file's values alone)."""
        values: dict[str, Any] = {}
        if path is not None:
            values.update(_read_yaml(Path(path)))
        values.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown engine setting(s) {unknown}; valid: {sorted(known)}", unknown[0])
        return cls(**values)

    def replace(self, **changes: Any) -> "EngineConfig":
        return dataclasses.replace(self, **changes)


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    if not path.is_file():
        raise ConfigError(f"engine config file {path} not found", "config")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}", "config") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of engine settings, got {type(data).__name__}", "config")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}", name)


def parse_size(value: int | str, name: str) -> int:
    """Bytes from an int or a string such as ``512MiB`` / ``2GB`` / ``1.5G`` (powers of 1024)."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and (m := _SIZE.match(value)):
        n = int(float(m.group(1)) * 1024 ** "_KMGT".index(m.group(2).upper() or "_"))
    else:
        raise ConfigError(f"{name} must be a byte count such as 536870912 or '512MiB', got {value!r}", name)
    if n < 1:
        raise ConfigError(f"{name} must be positive, got {value!r}", name)
    return n
