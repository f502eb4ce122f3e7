"""Engram n-gram hashing against values computed here from the spec formulas.

Expected values never come from engram_hash internals: the compressed map is
rebuilt with a plain per-token loop over the reference's normalizer chain,
primes come from sympy, multipliers from numpy, and hashes from a Python-int
transliteration of the reference NgramHashState.forward.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest
import sympy
import tokenizers
import torch
from tokenizers import Regex, normalizers

from deepinfer_adapters.config import parse_config
from deepinfer_adapters.errors import DeepInferAdaptersError
from deepinfer_adapters.model_impl import engram_hash as eh
from deepinfer_adapters.model_impl.tokenizer import load_tokenizer, write_tokenizer_files
from deepinfer_adapters.presets import release_config, tiny_config

VOCAB = 129280
RELEASE_ROWS = [384006168, 384016682]
DEAD = None  # an image token in the plain reference below


@pytest.fixture(scope="module")
def v41_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer_files(tmp_path_factory.mktemp("tok-v41"), "v41")


@pytest.fixture(scope="module")
def plain_map(v41_dir: Path) -> list[int]:
    """The reference's build_compressed_token_map, written as a plain loop."""
    tok = tokenizers.Tokenizer.from_file(str(v41_dir / "tokenizer.json"))
    norm = normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "), normalizers.Replace(Regex(r"^ $"), "\ue000"),
        normalizers.Strip(), normalizers.Replace("\ue000", " "),
    ])
    keys: dict[str, int] = {}
    out = []
    for i in range(tok.get_vocab_size(with_added_tokens=True)):
        text = tok.decode([i], skip_special_tokens=False)
        key = tok.id_to_token(i) if "\ufffd" in text else (norm.normalize_str(text) or text)
        if key not in keys:
            keys[key] = len(keys)
        out.append(keys[key])
    return out


@pytest.fixture(scope="module")
def release():
    return parse_config(release_config("v41"))


@pytest.fixture(scope="module")
def release_hasher(release, v41_dir: Path) -> eh.EngramHasher:
    return eh.make_engram_hasher(release, v41_dir)


@pytest.fixture(scope="module")
def tiny_hasher(v41_dir: Path) -> eh.EngramHasher:
    return eh.make_engram_hasher(parse_config(tiny_config("v41")), load_tokenizer(v41_dir))


# ---------------------------------------------------------------------------
# Plain reference: spec formulas with Python ints
# ---------------------------------------------------------------------------


def spec_tables(engram, compressed_vocab: int):
    """(multipliers[l][k], primes[l][n-2][h], offsets[l][c]) from the spec, with sympy primes."""
    bound = (2**63 - 1) // compressed_vocab // 2
    mults = [[int(u) * 2 + 1 for u in np.random.default_rng(10007 * lid).integers(0, bound, size=engram.max_ngram_size,
                                                                                   dtype=np.int64)]
             for lid in engram.layer_ids]
    p, primes, offsets = engram.vocab_size - 1, [], []
    for _ in engram.layer_ids:
        per_n = []
        for _ in range(engram.max_ngram_size - 1):
            heads = []
            for _ in range(engram.n_heads):
                p = sympy.nextprime(p)
                heads.append(int(p))
            per_n.append(heads)
        primes.append(per_n)
        flat, acc, offs = [q for heads in per_n for q in heads], 0, []
        for q in flat:
            offs.append(acc)
            acc += q
        offsets.append(offs)
    return mults, primes, offsets


def plain_rows(seq: list[int | None], pad: int, engram, tables) -> list[list[list[int]]]:
    """Rows for a whole sequence of compressed ids (DEAD = image), as NgramHashState does."""
    mults, primes, offsets = tables
    out = []
    for p in range(len(seq)):
        slots, blocked = [], False
        for s in range(engram.max_ngram_size):
            blocked = blocked or p - s < 0 or seq[p - s] is DEAD
            slots.append(pad if blocked else seq[p - s])
        per_layer = []
        for layer in range(len(engram.layer_ids)):
            h, row = slots[0] * mults[layer][0], []
            for n in range(2, engram.max_ngram_size + 1):
                h ^= slots[n - 1] * mults[layer][n - 1]
                for head in range(engram.n_heads):
                    col = (n - 2) * engram.n_heads + head
                    row.append(h % primes[layer][n - 2][head] + offsets[layer][col])
            per_layer.append(row)
        out.append(per_layer)
    return out


def compressed_seq(ids: list[int], image: list[bool], cmap: list[int]) -> list[int | None]:
    return [DEAD if img else cmap[i] for i, img in zip(ids, image)]


# ---------------------------------------------------------------------------
# Compressed token map
# ---------------------------------------------------------------------------


def test_real_v41_tokenizer_gives_99092_compressed_ids(v41_dir: Path, plain_map: list[int]) -> None:
    lookup, count = eh.build_compressed_token_map(v41_dir, VOCAB, expected=99092)
    assert count == 99092
    assert len(set(plain_map)) == 99092
    assert lookup.dtype == torch.int64 and lookup.shape == (VOCAB,)
    assert lookup.tolist() == plain_map  # ids, order and the ASCII fast path all agree


def test_compressed_map_collapses_case_space_and_accents(v41_dir: Path) -> None:
    tok = load_tokenizer(v41_dir)
    lookup, _ = eh.build_compressed_token_map(tok, VOCAB)
    one = [tok.token_to_id(t) for t in ("The", "the", "ĠThe", "Ġthe", "ĠTHE")]
    assert None not in one and len({int(lookup[i]) for i in one}) == 1
    assert lookup[0] == 0  # first token, first id
    # whitespace-only tokens all keep the single-space key " " instead of stripping to ""
    blanks = [tok.token_to_id(t) for t in ("Ġ", "ĠĠ", "Ċ", "ĉ")]
    assert None not in blanks and len({int(lookup[i]) for i in blanks}) == 1
    assert lookup[blanks[0]] != lookup[tok.token_to_id("a")]


def test_map_is_cached_and_accepts_tokenizer_objects(v41_dir: Path) -> None:
    a, _ = eh.build_compressed_token_map(v41_dir, VOCAB)
    b, _ = eh.build_compressed_token_map(v41_dir / "tokenizer.json", VOCAB)
    raw = tokenizers.Tokenizer.from_file(str(v41_dir / "tokenizer.json"))
    c, _ = eh.build_compressed_token_map(raw, VOCAB)
    a[0] = 12345  # a returned map is a copy: mutating it leaves the cache alone
    assert torch.equal(b, c) and b[0] == 0


# ---------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------


def test_release_table_rows_from_prime_layout(release) -> None:
    layout = eh.build_hash_layout(release.engram)
    assert list(layout.num_embeddings) == RELEASE_ROWS
    _, primes, offsets = spec_tables(release.engram, 99092)
    assert [[list(h) for h in per_n] for per_n in layout.primes] == primes
    assert [list(o) for o in layout.offsets] == offsets
    assert layout.primes[0][0][0] == sympy.nextprime(15_999_999)
    assert layout.n_hash_columns == 24 and layout.history_len == 3


def test_multipliers_match_numpy_spec(release) -> None:
    mults, _, _ = spec_tables(release.engram, 99092)
    got = eh.hash_multipliers(release.engram.layer_ids, 4, 99092)
    assert got.tolist() == mults
    assert all(m % 2 == 1 for row in mults for m in row)


# ---------------------------------------------------------------------------
# Hash rows
# ---------------------------------------------------------------------------


def test_hand_checked_prompt(release, release_hasher: eh.EngramHasher, v41_dir: Path, plain_map: list[int]) -> None:
    tok = load_tokenizer(v41_dir)
    ids = tok.encode("Hello world, the THE")
    assert 4 <= len(ids) <= 6
    engram = release.engram
    tables = spec_tables(engram, 99092)
    expected = plain_rows(compressed_seq(ids, [False] * len(ids), plain_map), plain_map[2], engram, tables)
    got = eh.engram_hash_chunk(release_hasher, torch.tensor(ids), release_hasher.initial_history(1)[0])[0]
    assert got.shape == (len(ids), 2, 24)
    assert got.tolist() == expected
    # "the" and "THE" compress alike, but their left contexts differ, so only the
    # current-token product is shared; position 0 uses pad for all three look-backs
    assert release_hasher.pad_id == plain_map[2]
    for layer in range(2):
        for col in range(24):
            lo = tables[2][layer][col]
            assert lo <= got[0, layer, col] < lo + tables[1][layer][col // 8][col % 8]


def _random_doc(rng: random.Random, n: int, image_spans: bool) -> tuple[list[int], list[bool]]:
    ids = [rng.randrange(VOCAB) for _ in range(n)]
    # repeated tokens so some n-grams recur
    ids[n // 2:n // 2 + 4] = ids[3:7]
    image = [False] * n
    if image_spans:
        for start, length in ((0, 2), (9, 3), (20, 1), (n - 1, 1)):
            for p in range(start, min(n, start + length)):
                image[p] = True
    return ids, image


@pytest.mark.parametrize("image_spans", [False, True])
@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_chunked_equals_full(tiny_hasher: eh.EngramHasher, plain_map: list[int], chunk: int,
                             image_spans: bool) -> None:
    engram = parse_config(tiny_config("v41")).engram
    ids, image = _random_doc(random.Random(chunk), 29, image_spans)
    expected = plain_rows(compressed_seq(ids, image, plain_map), plain_map[2], engram, spec_tables(engram, 99092))
    mask = torch.tensor(image) if image_spans else None
    full = eh.engram_hash_chunk(tiny_hasher, torch.tensor(ids), tiny_hasher.initial_history(1), [0, len(ids)], mask)[0]
    assert full.tolist() == expected

    history, parts = tiny_hasher.initial_history(1)[0], []
    for s in range(0, len(ids), chunk):
        part_ids = torch.tensor(ids[s:s + chunk])
        part_mask = None if mask is None else mask[s:s + chunk]
        rows, new_history = eh.engram_hash_chunk(tiny_hasher, part_ids, history, image_mask=part_mask)
        parts.append(rows)
        history = new_history
    assert torch.cat(parts).tolist() == expected
    last = [eh.BLOCKED if img else plain_map[i] for i, img in zip(ids[-3:], image[-3:])]
    assert history.tolist() == last


def test_batched_sequences_with_mixed_chunks(tiny_hasher: eh.EngramHasher, plain_map: list[int]) -> None:
    engram = parse_config(tiny_config("v41")).engram
    tables = spec_tables(engram, 99092)
    rng = random.Random(7)
    docs = [_random_doc(rng, n, image_spans=n > 24) for n in (1, 2, 13, 30)]
    expected = [plain_rows(compressed_seq(i, m, plain_map), plain_map[2], engram, tables) for i, m in docs]
    got: list[list] = [[] for _ in docs]
    history = tiny_hasher.initial_history(len(docs))
    done = [0] * len(docs)
    step_sizes = [3, 1, 5, 2, 4]
    for step in range(20):
        ids, mask, cu = [], [], [0]
        for k, (doc_ids, doc_img) in enumerate(docs):
            take = min(step_sizes[(step + k) % 5], len(doc_ids) - done[k])
            ids += doc_ids[done[k]:done[k] + take]
            mask += doc_img[done[k]:done[k] + take]
            cu.append(len(ids))
        if not ids:
            break
        rows, history = eh.engram_hash_chunk(tiny_hasher, torch.tensor(ids, dtype=torch.long), history, cu,
                                             torch.tensor(mask))
        for k in range(len(docs)):
            got[k] += rows[cu[k]:cu[k + 1]].tolist()
            done[k] += cu[k + 1] - cu[k]
    assert got == expected


def test_image_token_blocks_look_back(tiny_hasher: eh.EngramHasher) -> None:
    ids = torch.tensor([100, 200, 300, 400, 500, 600])
    image = torch.tensor([False, False, True, False, False, False])
    rows = eh.engram_hash_chunk(tiny_hasher, ids, tiny_hasher.initial_history(1)[0], image_mask=image)[0]
    fresh = eh.engram_hash_chunk(tiny_hasher, ids[3:], tiny_hasher.initial_history(1)[0])[0]
    assert torch.equal(rows[3:], fresh)  # after the image, as if the sequence started there
    text_only = eh.engram_hash_chunk(tiny_hasher, ids, tiny_hasher.initial_history(1)[0])[0]
    assert not torch.equal(rows[3:], text_only[3:])
    assert torch.equal(rows[:2], text_only[:2])


# ---------------------------------------------------------------------------
# Typed errors
# ---------------------------------------------------------------------------


def test_compressed_vocab_mismatch_is_typed(release, v41_dir: Path) -> None:
    bad = dataclasses.replace(release, engram=dataclasses.replace(release.engram, compressed_vocab_size=99091))
    with pytest.raises(eh.EngramHashError) as err:
        eh.make_engram_hasher(bad, v41_dir)
    assert isinstance(err.value, DeepInferAdaptersError)
    assert "99092" in str(err.value) and "99091" in str(err.value)
    assert err.value.field == "engram_compressed_vocab_size"
    with pytest.raises(eh.EngramHashError, match="99091"):
        eh.build_compressed_token_map(v41_dir, VOCAB, expected=99091)


def test_table_rows_mismatch_is_typed(release, v41_dir: Path) -> None:
    rows = (384006168, 384016683)
    bad = dataclasses.replace(release, engram=dataclasses.replace(release.engram, num_embeddings=rows))
    with pytest.raises(eh.EngramHashError) as err:
        eh.make_engram_hasher(bad, v41_dir)
    assert isinstance(err.value, DeepInferAdaptersError)
    assert "384016683" in str(err.value) and "384016682" in str(err.value)
    assert err.value.field == "engram_num_embeddings"


def test_vocab_size_mismatch_is_typed(v41_dir: Path) -> None:
    with pytest.raises(eh.EngramHashError, match="129281"):
        eh.build_compressed_token_map(v41_dir, VOCAB + 1)
