"""V4.1 Engram n-gram hashing (model_spec.md section 2.7), host-agnostic.

Follows DeepSeek's reference ``inference/engram.py`` (``build_compressed_token_map``,
``compute_hash_multipliers``, ``EngramLayout``, ``NgramHashState``) exactly, but
without its per-batch ``[max_batch, max_seq]`` history buffer: the caller keeps,
per sequence, the compressed ids of its last ``max_ngram_size - 1`` tokens and
passes them in with each chunk, so chunked prefill, decode and multi-token
verification give the rows one full forward over the whole sequence gives.

Pieces:
- :func:`build_compressed_token_map`: token id -> compressed id (cached per file).
- :class:`EngramHashLayout`: per-layer primes, offsets and multipliers.
- :class:`EngramHasher` / :func:`make_engram_hasher`: both, checked against the config.
- :func:`engram_hash_chunk` (hash ids and the carried history).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers
import torch
from tokenizers import Regex, normalizers

from deepinfer_adapters.config import EngramConfig, ModelConfig
from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.primes import next_prime

TOKENIZER_JSON = "tokenizer.json"

# History marker for "no usable token here": before the sequence start, or an
# image token. Look-back stops at the first one (see engram_hash_chunk).
BLOCKED = -1

# The reference's per-layer RNG seed is 10007 * layer_id.
_SEED_STRIDE = 10007

# Replacement character: a single-token decode containing it is a partial
# UTF-8 sequence, keyed by its raw (byte-level) token string instead.
_REPLACEMENT_CHAR = "\ufffd"
# Private-use char that protects a lone " " from Strip() in the reference.
_SPACE_SENTINEL = "\ue000"


class EngramHashError(ConfigError):
    """The tokenizer or config.json disagrees with the Engram hash layout."""


# ---------------------------------------------------------------------------
# Compressed token map
# ---------------------------------------------------------------------------


def _reference_normalizer() -> normalizers.Normalizer:
    """The reference's normalizer chain, from the same Rust library it uses."""
    return normalizers.Sequence(
        [
            normalizers.NFKC(),
            normalizers.NFD(),
            normalizers.StripAccents(),
            normalizers.Lowercase(),
            normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
            normalizers.Replace(Regex(r"^ $"), _SPACE_SENTINEL),
            normalizers.Strip(),
            normalizers.Replace(_SPACE_SENTINEL, " "),
        ]
    )


_ASCII_WHITESPACE_RUN = re.compile(r"[ \t\r\n]+")
# Rust char::is_whitespace within ASCII (what tokenizers' Strip removes); unlike
# Python's str.strip() it keeps \x1c-\x1f.
_ASCII_STRIP = " \t\n\x0b\x0c\r"


def _normalize_ascii(text: str) -> str:
    """The normalizer chain restricted to ASCII input, in plain Python.

    On ASCII, NFKC/NFD/StripAccents are identities and Lowercase only maps A-Z;
    after the whitespace collapse the only lone-space string is " " itself.
    tests/test_engram_hash.py checks this equals the library on every token.
    """
    collapsed = _ASCII_WHITESPACE_RUN.sub(" ", text.lower())
    return collapsed if collapsed == " " else collapsed.strip(_ASCII_STRIP)


def _compress(decoded: Sequence[str], raw_token: Any) -> tuple[np.ndarray, int]:
    """First-seen numbering of the normalized keys; raw_token(i) keys U+FFFD tokens."""
    normalizer = _reference_normalizer()
    key_ids: dict[str, int] = {}
    lookup = np.empty(len(decoded), dtype=np.int64)
    for token_id, text in enumerate(decoded):
        if text.isascii():
            key = _normalize_ascii(text) or text
        elif _REPLACEMENT_CHAR in text:
            key = raw_token(token_id)
        else:
            key = normalizer.normalize_str(text) or text
        lookup[token_id] = key_ids.setdefault(key, len(key_ids))
    return lookup, len(key_ids)


def _map_for_tokenizer(tok: tokenizers.Tokenizer) -> tuple[np.ndarray, int]:
    size = tok.get_vocab_size(with_added_tokens=True)
    # decode as the reference does: the raw Rust tokenizer, specials kept
    decoded = tok.decode_batch([[i] for i in range(size)], skip_special_tokens=False)
    return _compress(decoded, tok.id_to_token)


@functools.lru_cache(maxsize=8)
def _cached_map_for_file(path: str, mtime_ns: int, size: int) -> tuple[np.ndarray, int]:
    del mtime_ns, size  # cache key only: a rewritten file rebuilds
    return _map_for_tokenizer(tokenizers.Tokenizer.from_file(path))


# in-memory tokenizers, keyed by a digest of their JSON (not the JSON itself)
_MAPS_BY_DIGEST: dict[str, tuple[np.ndarray, int]] = {}


def _cached_map_for_tokenizer(tok: tokenizers.Tokenizer) -> tuple[np.ndarray, int]:
    digest = hashlib.sha256(tok.to_str().encode()).hexdigest()
    if digest not in _MAPS_BY_DIGEST:
        if len(_MAPS_BY_DIGEST) >= 4:
            _MAPS_BY_DIGEST.pop(next(iter(_MAPS_BY_DIGEST)))
        _MAPS_BY_DIGEST[digest] = _map_for_tokenizer(tok)
    return _MAPS_BY_DIGEST[digest]


def _tokenizer_file(source: str | Path) -> Path:
    path = Path(source)
    if path.is_dir():
        path = path / TOKENIZER_JSON
    if not path.is_file():
        raise EngramHashError(f"{path} not found: the Engram token map needs the model's tokenizer.json")
    return path


def _map_for_source(source: Any) -> tuple[np.ndarray, int]:
    path = getattr(source, "path", None)  # DeepSeekTokenizer loaded from a file
    if isinstance(source, (str, Path)) or isinstance(path, Path):
        file = _tokenizer_file(source if isinstance(source, (str, Path)) else path)
        stat = file.stat()
        return _cached_map_for_file(str(file.resolve()), stat.st_mtime_ns, stat.st_size)
    tok = source if isinstance(source, tokenizers.Tokenizer) else getattr(source, "backend_tokenizer", None)
    if isinstance(tok, tokenizers.Tokenizer):  # a tokenizers.Tokenizer or an HF fast tokenizer
        return _cached_map_for_tokenizer(tok)
    if hasattr(source, "decode") and hasattr(source, "id_to_token") and hasattr(source, "vocab_size"):
        decoded = [source.decode([i], skip_special_tokens=False) for i in range(source.vocab_size)]
        return _compress(decoded, source.id_to_token)
    raise EngramHashError(
        f"cannot build the Engram token map from a {type(source).__name__}; pass a model directory, "
        "a tokenizer.json path, a DeepSeekTokenizer, a tokenizers.Tokenizer or an HF fast tokenizer"
    )


def build_compressed_token_map(
    tokenizer_dir_or_tokenizer: Any, vocab_size: int, expected: int | None = None
) -> tuple[torch.Tensor, int]:
    """Token id -> compressed id, and the number of compressed ids.

    The reference's rules, in order, for each token id 0..vocab_size-1:
    1. ``text = decode([id], skip_special_tokens=False)`` with the raw Rust
       tokenizer (added tokens decode to their content).
    2. If text contains U+FFFD (a partial UTF-8 byte token), the key is the raw
       token string (``id_to_token``), e.g. "\u00e2\u0124".
    3. Otherwise the key is text normalized by NFKC, NFD, StripAccents,
       Lowercase, ``[ \\t\\r\\n]+`` -> " ", Strip -- except that a text that is
       exactly " " after the collapse stays " ". An empty result falls back to
       the unnormalized text as key.
    4. Keys share one namespace and get ids in order of first appearance
       (ascending token id), starting at 0.

    ``expected`` (config's ``engram_compressed_vocab_size``) is checked when
    given: every hash multiplier derives from this count. Results are cached per
    tokenizer.json path + mtime (or content hash); the returned tensor is a copy.
    """
    lookup, count = _map_for_source(tokenizer_dir_or_tokenizer)
    if lookup.shape[0] != vocab_size:
        raise EngramHashError(
            f"the tokenizer has {lookup.shape[0]} token ids but the model vocab_size is {vocab_size}; "
            "the Engram token map needs one entry per model token id",
            field="vocab_size",
        )
    if expected is not None and count != expected:
        raise EngramHashError(
            f"the tokenizer yields {count} compressed Engram ids but config engram_compressed_vocab_size "
            f"is {expected}; wrong tokenizer.json for this model (V4.1 needs its renamed added tokens) "
            "or a wrong config",
            field="engram_compressed_vocab_size",
        )
    return torch.from_numpy(lookup.copy()), count


# ---------------------------------------------------------------------------
# Layout: primes, offsets, multipliers
# ---------------------------------------------------------------------------


def hash_multipliers(layer_ids: Sequence[int], max_ngram_size: int, compressed_vocab_size: int) -> torch.Tensor:
    """[n_layers, max_ngram_size] int64: odd multipliers, one per look-back slot.

    ``2 * u + 1`` with u from ``numpy.random.default_rng(10007 * layer_id)``
    ``.integers(0, max(1, (2**63 - 1) // compressed_vocab_size // 2), size=max_ngram_size)``;
    the bound keeps ``compressed_id * multiplier`` inside int64.
    """
    bound = max(1, (np.iinfo(np.int64).max // compressed_vocab_size) // 2)
    rows = [
        np.random.default_rng(_SEED_STRIDE * layer_id).integers(0, bound, size=max_ngram_size, dtype=np.int64) * 2 + 1
        for layer_id in layer_ids
    ]
    return torch.from_numpy(np.stack(rows)) if rows else torch.empty(0, max_ngram_size, dtype=torch.int64)


@dataclass(frozen=True)
class EngramHashLayout:
    """Where each (layer, n-gram size, head) lands in its layer's table.

    primes[l][n - 2][h] is the bucket count of n-grams of size n (2..max) for
    head h of Engram layer l. Hash column c = (n - 2) * n_heads + h; its rows
    are ``offsets[l][c] .. offsets[l][c] + primes[l][n - 2][h] - 1``.
    """

    layer_ids: tuple[int, ...]
    max_ngram_size: int
    n_heads: int
    primes: tuple[tuple[tuple[int, ...], ...], ...]

    @property
    def history_len(self) -> int:
        return self.max_ngram_size - 1

    @property
    def n_hash_columns(self) -> int:
        return (self.max_ngram_size - 1) * self.n_heads

    def flat_primes(self, layer: int) -> list[int]:
        return [p for per_n in self.primes[layer] for p in per_n]

    @property
    def offsets(self) -> tuple[tuple[int, ...], ...]:
        """[n_layers][n_hash_columns]: exclusive cumulative sums of flat_primes."""
        out = []
        for layer in range(len(self.layer_ids)):
            flat = self.flat_primes(layer)
            out.append(tuple(int(x) for x in np.cumsum([0, *flat[:-1]])))
        return tuple(out)

    @property
    def num_embeddings(self) -> tuple[int, ...]:
        """Table rows per Engram layer: the sum of its primes."""
        return tuple(sum(self.flat_primes(layer)) for layer in range(len(self.layer_ids)))


def build_hash_layout(engram: EngramConfig) -> EngramHashLayout:
    """Primes in the reference's (layer, n-gram size, head) order.

    The reference restarts each (layer, n) search at ``engram_vocab_size - 1``
    but skips every prime already handed out, so the result is simply the
    consecutive primes above ``engram_vocab_size - 1``, continued across heads,
    n-gram sizes and layers.
    """
    prime = engram.vocab_size - 1
    layers = []
    for _ in engram.layer_ids:
        per_n = []
        for _ in range(engram.max_ngram_size - 1):
            heads = []
            for _ in range(engram.n_heads):
                prime = next_prime(prime)
                heads.append(prime)
            per_n.append(tuple(heads))
        layers.append(tuple(per_n))
    return EngramHashLayout(tuple(engram.layer_ids), engram.max_ngram_size, engram.n_heads, tuple(layers))


def check_table_rows(layout: EngramHashLayout, engram: EngramConfig) -> None:
    """Raise EngramHashError unless config engram_num_embeddings equals the prime sums."""
    computed = list(layout.num_embeddings)
    if computed != list(engram.num_embeddings):
        raise EngramHashError(
            f"config engram_num_embeddings is {list(engram.num_embeddings)} but the hash layout of "
            f"engram_vocab_size={engram.vocab_size}, engram_max_ngram_size={engram.max_ngram_size}, "
            f"engram_n_heads={engram.n_heads} over layers {list(engram.layer_ids)} needs {computed} rows",
            field="engram_num_embeddings",
        )


# ---------------------------------------------------------------------------
# Hasher
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EngramHasher:
    """Everything the hash needs, as tensors on one device."""

    layout: EngramHashLayout
    token_map: torch.Tensor  # [vocab_size] int64: token id -> compressed id
    pad_id: int  # compressed id of engram_pad_token_id; fills blocked slots
    multipliers: torch.Tensor  # [n_layers, max_ngram_size] int64
    primes: torch.Tensor  # [n_layers, max_ngram_size - 1, n_heads] int64
    offsets: torch.Tensor  # [n_layers, n_hash_columns] int64

    @classmethod
    def from_token_map(
        cls, engram: EngramConfig, token_map: torch.Tensor, compressed_vocab_size: int
    ) -> "EngramHasher":
        """Build from an explicit map (no config checks beyond the pad id)."""
        layout = build_hash_layout(engram)
        if not 0 <= engram.pad_token_id < token_map.numel():
            raise EngramHashError(
                f"engram_pad_token_id {engram.pad_token_id} is outside the vocabulary [0, {token_map.numel()})",
                field="engram_pad_token_id",
            )
        return cls(
            layout=layout,
            token_map=token_map.to(torch.int64),
            pad_id=int(token_map[engram.pad_token_id]),
            multipliers=hash_multipliers(layout.layer_ids, layout.max_ngram_size, compressed_vocab_size),
            primes=torch.tensor(layout.primes, dtype=torch.int64),
            offsets=torch.tensor(layout.offsets, dtype=torch.int64),
        )

    @property
    def history_len(self) -> int:
        return self.layout.history_len

    def to(self, device: torch.device | str) -> "EngramHasher":
        return EngramHasher(
            self.layout,
            self.token_map.to(device),
            self.pad_id,
            self.multipliers.to(device),
            self.primes.to(device),
            self.offsets.to(device),
        )

    def initial_history(self, num_seqs: int = 1, device: torch.device | str | None = None) -> torch.Tensor:
        """[num_seqs, history_len] history of fresh sequences (all BLOCKED)."""
        device = self.token_map.device if device is None else device
        return torch.full((num_seqs, self.history_len), BLOCKED, dtype=torch.int64, device=device)


def make_engram_hasher(config: ModelConfig, tokenizer_dir_or_tokenizer: Any) -> EngramHasher:
    """The hasher of a V4.1 model, checking table rows and compressed vocab against config."""
    engram = config.engram
    if engram is None:
        raise EngramHashError(f"the {config.arch} config has no Engram layers", field="engram_layer_ids")
    check_table_rows(build_hash_layout(engram), engram)
    token_map, count = build_compressed_token_map(
        tokenizer_dir_or_tokenizer, config.vocab_size, expected=engram.compressed_vocab_size
    )
    return EngramHasher.from_token_map(engram, token_map, count)


# ---------------------------------------------------------------------------
# Hashing a chunk
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Chunk:
    """Each sequence's history followed by its new compressed ids, in one buffer."""

    buffer: torch.Tensor  # [N * hist + T] int64
    token_pos: torch.Tensor  # [T]: where each new token sits in buffer
    seq_end: torch.Tensor  # [N]: one past each sequence's [history, tokens] segment
    single: bool  # history came in 1-D

    def history_after(self, hist: int) -> torch.Tensor:
        tail = self.buffer[self.seq_end.unsqueeze(1) - hist + torch.arange(hist, device=self.buffer.device)]
        return tail.reshape(hist) if self.single else tail


def _lay_out_chunk(
    hasher: EngramHasher,
    token_ids: torch.Tensor,
    history: torch.Tensor,
    cu_seqlens: torch.Tensor | Sequence[int] | None,
    image_mask: torch.Tensor | None,
) -> _Chunk:
    hist = hasher.history_len
    device = token_ids.device
    token_ids = token_ids.reshape(-1).to(torch.int64)
    single = history.dim() == 1
    history = history.to(device=device, dtype=torch.int64).reshape(-1, hist)
    num_tokens, num_seqs = token_ids.numel(), history.shape[0]
    if cu_seqlens is None:
        if num_seqs != 1:
            raise ValueError(f"history holds {num_seqs} sequences; pass cu_seqlens to say where each one's tokens are")
        cu = torch.tensor([0, num_tokens], dtype=torch.int64, device=device)
    else:
        cu = torch.as_tensor(cu_seqlens, dtype=torch.int64, device=device)
        if cu.numel() != num_seqs + 1:
            raise ValueError(f"cu_seqlens has {cu.numel()} entries; history holds {num_seqs} sequences")

    compressed = compressed_ids(hasher, token_ids, image_mask)

    # sequence i's segment: hist history slots, then its tokens cu[i]:cu[i+1]
    arange_t = torch.arange(num_tokens, device=device)
    seq_of_token = torch.bucketize(arange_t, cu[1:], right=True)
    token_pos = arange_t + hist * (seq_of_token + 1)
    seq_index = torch.arange(num_seqs, device=device)
    history_pos = (cu[:-1] + hist * seq_index).unsqueeze(1) + torch.arange(hist, device=device)
    buffer = torch.empty(num_tokens + num_seqs * hist, dtype=torch.int64, device=device)
    buffer[history_pos] = history
    buffer[token_pos] = compressed
    return _Chunk(buffer, token_pos, cu[1:] + hist * (seq_index + 1), single)


def compressed_ids(hasher: EngramHasher, token_ids: torch.Tensor, image_mask: torch.Tensor | None) -> torch.Tensor:
    """[T] compressed ids as the history stores them: ``token_map[id]``, BLOCKED for image tokens."""
    compressed = hasher.token_map[token_ids]
    if image_mask is not None:
        compressed = compressed.masked_fill(image_mask.reshape(-1).to(device=compressed.device, dtype=torch.bool),
                                            BLOCKED)
    return compressed


def engram_hash_chunk(
    hasher: EngramHasher,
    token_ids: torch.Tensor,
    history: torch.Tensor,
    cu_seqlens: torch.Tensor | Sequence[int] | None = None,
    image_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hash ids of T new tokens and each sequence's history afterwards.

    Args:
        token_ids: [T] int64 new token ids of all sequences, flattened.
        history: [N, max_ngram_size - 1] (or [max_ngram_size - 1] when N = 1)
            compressed ids of each sequence's previous tokens, oldest first;
            BLOCKED for slots before the sequence start or holding an image
            token. A fresh sequence is all BLOCKED (EngramHasher.initial_history).
        cu_seqlens: [N + 1] offsets of each sequence's tokens (ForwardBatch);
            None means one sequence.
        image_mask: [T] bool, True for image-span tokens (ForwardBatch
            convention, the reference's ``~token_mask``); None = text only.

    Returns:
        hash_ids: [T, n_engram_layers, n_hash_columns] int64 table rows;
            ``hash_ids[:, i]`` feeds Engram layer ``layer_ids[i]``.
        new_history: [N, max_ngram_size - 1] int64 (as ``history`` came in).

    What the reference (NgramHashState.forward) does, and this reproduces:
    - Each token's compressed id is ``token_map[id]``; an image token is stored
      as DEAD (= BLOCKED here).
    - Position p looks back at slots p, p-1, ..., p-(max_ngram_size-1). Slot
      p-s is blocked if p-s < 0 (before the sequence start) or it is DEAD, and
      blocking is sticky: once slot p-s is blocked, every older slot is too.
      A blocked slot reads ``pad_id`` = compressed id of engram_pad_token_id
      (token 2 in V4.1). So position 0 hashes (t0, pad, pad, pad); an image
      token hashes (pad, pad, pad, pad) (the Engram gate is closed there anyway);
      the token right after an image span hashes (t0, pad, pad, pad).
    - With x_s = slot_s * multiplier[layer][s] (int64), the n-gram hash is
      h_n = x_0 ^ x_1 ^ ... ^ x_(n-1) for n = 2..max_ngram_size, and column
      (n-2) * n_heads + head holds ``h_n % primes[layer][n-2][head] +
      offsets[layer][(n-2) * n_heads + head]``.
    """
    hist = hasher.history_len
    chunk = _lay_out_chunk(hasher, token_ids, history, cu_seqlens, image_mask)

    # slots[:, s] = compressed id s tokens back, or pad once look-back is blocked
    slots, blocked = [], torch.zeros(chunk.token_pos.shape, dtype=torch.bool, device=chunk.buffer.device)
    for shift in range(hist + 1):
        source = chunk.buffer[chunk.token_pos - shift]
        blocked = blocked | (source == BLOCKED)
        slots.append(torch.where(blocked, hasher.pad_id, source))
    return _hash_slots(hasher, torch.stack(slots, dim=-1)), chunk.history_after(hist)


def engram_hash_decode(hasher: EngramHasher, compressed: torch.Tensor, earlier: torch.Tensor) -> torch.Tensor:
    """``engram_hash_chunk``'s hash ids for one new text token per sequence, without the
    chunk layout: ``compressed`` [B] the new tokens' compressed ids, ``earlier``
    [B, max_ngram_size - 1] those of the tokens 1, 2, ... back (newest first, BLOCKED
    before the sequence start)."""
    look_back = torch.cat([compressed.unsqueeze(1), earlier], dim=1)
    blocked = (look_back == BLOCKED).cummax(dim=1).values  # sticky: blocks every older slot too
    return _hash_slots(hasher, torch.where(blocked, hasher.pad_id, look_back))


def _hash_slots(hasher: EngramHasher, slots: torch.Tensor) -> torch.Tensor:
    """slots [T, max_ngram_size] (compressed id s tokens back, pad where blocked) -> hash ids
    [T, n_engram_layers, n_hash_columns]."""
    products = slots.unsqueeze(1) * hasher.multipliers  # [T, n_layers, max_ngram]
    for s in range(1, hasher.history_len + 1):  # in place: column s becomes h_(s+1) = h_s ^ x_s
        products[..., s].bitwise_xor_(products[..., s - 1])
    # every order's buckets in one op: [T, n_layers, max_ngram - 1, n_heads], columns n-major
    return (products[..., 1:].unsqueeze(-1) % hasher.primes).flatten(-2) + hasher.offsets
