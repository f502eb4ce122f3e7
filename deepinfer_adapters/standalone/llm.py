"""LLM: offline generation over the standalone engine (vLLM-shaped API).

    llm = LLM()                                  # embedded tiny V4.1 preset (RANDOM weights)
    llm = LLM("/path/to/DeepSeek-V4.1-Flash", max_num_seqs=64)
    outs = llm.generate(["Hello", [0, 1234, 99]], SamplingParams(temperature=0, max_tokens=32))
    outs = llm.chat([{"role": "user", "content": "Hi"}], thinking=True)
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from deepinfer_adapters.decoding.sampling_params import SamplingParams
from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.model_impl.tokenizer import encode_chat, render_chat
from deepinfer_adapters.standalone.cache_manager import CacheUsage
from deepinfer_adapters.standalone.config import EngineConfig
from deepinfer_adapters.standalone.engine import LLMEngine
from deepinfer_adapters.standalone.outputs import RequestOutput
from deepinfer_adapters.standalone.request import Request, RequestError

logger = logging.getLogger(__name__)

# name -> (arch, seed) of the embedded presets: tiny random checkpoints built on first use
PRESETS: dict[str, tuple[str, int]] = {"tiny-v41": ("v41", 0), "tiny-v4": ("v4", 0), "tiny-v4-0731": ("v4-0731", 0)}
DEFAULT_MODEL = "tiny-v41"
_MARKER = ".deepinfer-preset"

Prompt = str | Sequence[int]


def preset_cache_dir() -> Path:
    return Path.home() / ".cache" / "deepinfer-adapters"


def random_weights_notice(name: str) -> str:
    arch, seed = PRESETS[name]
    return (f"model {name!r} is the embedded tiny {arch} preset with RANDOM weights (seed {seed}): "
            "its output is nonsense by design; pass --model/model= a real checkpoint directory for real text")


def build_preset(name: str) -> Path:
    """The preset's checkpoint directory, written once (atomically) into the cache directory."""
    from deepinfer_adapters.model_impl.tiny_checkpoint import write_tiny_checkpoint

    arch, seed = PRESETS[name]
    out = preset_cache_dir() / name
    stamp = f"{arch} seed={seed}\n"
    if (out / _MARKER).is_file() and (out / _MARKER).read_text() == stamp:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    logger.warning("building the %s preset (tiny %s, RANDOM weights, seed %d) in %s", name, arch, seed, out)
    write_tiny_checkpoint(tmp, arch, seed=seed)
    (tmp / _MARKER).write_text(stamp)
    if out.exists():
        if (out / _MARKER).is_file() and (out / _MARKER).read_text() == stamp:  # another process won
            shutil.rmtree(tmp, ignore_errors=True)
            return out
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def resolve_model(model: str | Path) -> tuple[Path, str | None]:
    """(checkpoint directory, preset name or None). A preset name wins over a directory of
    the same name in the working directory (write ``./tiny-v41`` for that)."""
    if isinstance(model, str) and model in PRESETS:
        return build_preset(model), model
    path = Path(model).expanduser()
    if path.is_dir():
        return path, None
    raise ConfigError(f"model {str(model)!r} is neither a checkpoint directory nor a preset; "
                      f"presets: {sorted(PRESETS)}", "model")


class LLM:
    def __init__(self, model: str | Path = DEFAULT_MODEL, *, config: EngineConfig | str | Path | None = None,
                 progress: bool = True, **engine_args: Any) -> None:
        """``config``: an EngineConfig or a YAML file of its fields; ``engine_args`` override fields."""
        if isinstance(config, EngineConfig):
            config = config.replace(**engine_args) if engine_args else config
        else:
            config = EngineConfig.load(config, **engine_args)
        self.model_dir, self.preset = resolve_model(model)
        if self.preset is not None:
            logger.warning(random_weights_notice(self.preset))
        self.engine = LLMEngine(self.model_dir, config, progress=progress)
        self.tokenizer = self.engine.tokenizer
        self._ids = itertools.count()

    @classmethod
    def from_engine(cls, engine: LLMEngine, preset: str | None = None) -> "LLM":
        """Wrap an existing engine (e.g. one built with an already loaded model)."""
        llm = cls.__new__(cls)
        llm.model_dir, llm.preset, llm.engine = engine.model_dir, preset, engine
        llm.tokenizer, llm._ids = engine.tokenizer, itertools.count()
        return llm

    @property
    def random_weights(self) -> bool:
        return self.preset is not None

    def generate(self, prompts: Prompt | Sequence[Prompt],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[RequestOutput]:
        """One output per prompt, in order. Prompts are strings (BOS is added) or token-id lists.
        Every prompt and parameter is checked before any is queued."""
        prompts = _as_prompt_list(prompts)
        return self._run([(p, None) for p in prompts], sampling_params, use_tqdm)

    def chat(self, conversations: Sequence[Mapping[str, Any]] | Sequence[Sequence[Mapping[str, Any]]],
             sampling_params: SamplingParams | Sequence[SamplingParams] | None = None, *, thinking: bool = False,
             reasoning_effort: str | None = None, use_tqdm: bool = True) -> list[RequestOutput]:
        """Render each conversation with deepseek-recipe (thinking or not) and generate the reply."""
        if conversations and isinstance(conversations[0], Mapping):
            conversations = [conversations]
        arch = self.engine.model_config.arch
        jobs = []
        for conv in conversations:
            ids = encode_chat(conv, self.tokenizer, arch, thinking=thinking, reasoning_effort=reasoning_effort)
            jobs.append((ids, render_chat(conv, arch, thinking=thinking, reasoning_effort=reasoning_effort)))
        return self._run(jobs, sampling_params, use_tqdm)

    def abort(self, request_id: str) -> None:
        """Abort a request (thread-safe); its output comes back with finish_reason "abort"."""
        self.engine.abort_request(request_id)

    def cache_usage(self) -> CacheUsage:
        return self.engine.cache_usage()

    def close(self) -> None:
        self.engine.close()

    # ------------------------------------------------------------------------
    def _run(self, jobs: list[tuple[Prompt, str | None]], sampling_params, use_tqdm: bool) -> list[RequestOutput]:
        params = _params_per_prompt(sampling_params, len(jobs))
        # validate everything first: a bad prompt queues nothing
        reqs: list[Request] = [self.engine.make_request(str(next(self._ids)), p, sp, prompt_text=text)
                               for (p, text), sp in zip(jobs, params)]
        for req in reqs:
            self.engine.add(req)
        return self._drive(reqs, use_tqdm)

    def _drive(self, reqs: list[Request], use_tqdm: bool) -> list[RequestOutput]:
        results: dict[str, RequestOutput] = {}
        waiting = {r.request_id for r in reqs}
        stats = self.engine.stats
        p0, g0, t0 = stats.prompt_tokens, stats.generation_tokens, time.perf_counter()
        bar = tqdm(total=len(reqs), desc="Processed prompts", dynamic_ncols=True, disable=not use_tqdm)
        try:
            while waiting:
                done = [o for o in self.engine.step() if o.request_id in waiting]
                for out in done:
                    results[out.request_id] = out
                    waiting.discard(out.request_id)
                dt = max(time.perf_counter() - t0, 1e-9)
                bar.set_postfix_str(f"input: {(stats.prompt_tokens - p0) / dt:.1f} tok/s, "
                                    f"output: {(stats.generation_tokens - g0) / dt:.1f} tok/s", refresh=False)
                bar.update(len(done))
        except BaseException:
            for rid in waiting:  # leave nothing running behind an interrupted call
                self.engine.abort_request(rid)
            raise
        finally:
            bar.close()
        return [results[r.request_id] for r in reqs]


def _is_token_list(x: Any) -> bool:
    return isinstance(x, Sequence) and not isinstance(x, (str, bytes)) and len(x) > 0 and \
        all(isinstance(t, int) and not isinstance(t, bool) for t in x)


def _as_prompt_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    if isinstance(prompts, str) or _is_token_list(prompts):
        return [prompts]
    if not isinstance(prompts, Sequence) or isinstance(prompts, bytes):
        raise RequestError(f"prompts must be a string, a list of token ids, or a list of those; "
                           f"got {type(prompts).__name__}", "prompt")
    return list(prompts)


def _params_per_prompt(sampling_params, n: int) -> list[SamplingParams | None]:
    if sampling_params is None or isinstance(sampling_params, SamplingParams):
        return [sampling_params] * n
    params = list(sampling_params)
    if len(params) != n:
        raise RequestError(f"got {len(params)} sampling_params for {n} prompts; give one, or one per prompt",
                           "sampling_params")
    return params
