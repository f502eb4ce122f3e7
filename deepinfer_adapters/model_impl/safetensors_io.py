"""Sharded safetensors on disk: header parsing with integrity checks, and writing.

Headers are parsed by hand (8-byte little-endian length, then JSON) so that a
checkpoint can be validated from headers alone, before any payload is read,
and so truncated or corrupt files are reported by name instead of failing
deep inside a loader.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from deepinfer_adapters.errors import CheckpointError

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I8": 1, "U8": 1, "I16": 2, "I32": 4, "I64": 8,
               "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "BOOL": 1}
_MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class HeaderEntry:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


def read_header(path: Path) -> dict[str, HeaderEntry]:
    """Every tensor's dtype and shape, after checking the file is complete."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise CheckpointError(f"shard {path} is truncated: {size} bytes, no safetensors header", file=str(path))
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER or 8 + n > size:
                raise CheckpointError(f"shard {path} is truncated or corrupt: header claims {n} bytes, file has {size}",
                                      file=str(path))
            header = json.loads(fh.read(n))
    except OSError as exc:
        raise CheckpointError(f"cannot read shard {path}: {exc}", file=str(path)) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"shard {path} is corrupt: its header is not valid JSON ({exc})", file=str(path)) from exc
    if not isinstance(header, dict):
        raise CheckpointError(f"shard {path} is corrupt: header is not a JSON object", file=str(path))
    payload = size - 8 - n
    entries: dict[str, HeaderEntry] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"shard {path} is corrupt: bad header entry for {name!r}", tensor=name,
                                  file=str(path)) from exc
        nbytes = math.prod(shape) * DTYPE_BYTES.get(dtype, 0)
        if dtype not in DTYPE_BYTES or end - begin != nbytes or begin < 0:
            raise CheckpointError(f"shard {path} is corrupt: tensor {name!r} ({dtype}, {list(shape)}) has "
                                  f"offsets [{begin}, {end}]", tensor=name, file=str(path))
        if end > payload:
            raise CheckpointError(f"shard {path} is truncated: tensor {name!r} ends at byte {end} of the payload, "
                                  f"which has only {payload} bytes", tensor=name, file=str(path))
        entries[name] = HeaderEntry(path, dtype, shape, nbytes)
    return entries


def shard_files(model_dir: Path) -> tuple[list[Path], dict[str, str] | None]:
    """The shard files, and the index's weight map when there is an index."""
    index = model_dir / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            assert isinstance(weight_map, dict)
        except (json.JSONDecodeError, KeyError, AssertionError, TypeError) as exc:
            raise CheckpointError(f"{index} is corrupt: expected a JSON object with a 'weight_map'",
                                  file=str(index)) from exc
        files = sorted(set(weight_map.values()))
        missing = [f for f in files if not (model_dir / f).is_file()]
        if missing:
            raise CheckpointError(f"{index} lists shard files that do not exist: {missing}", file=missing[0])
        return [model_dir / f for f in files], weight_map
    if (model_dir / SINGLE_FILE).is_file():
        return [model_dir / SINGLE_FILE], None
    raise CheckpointError(f"no checkpoint in {model_dir}: expected {INDEX_FILE} or {SINGLE_FILE}", file=str(model_dir))


def write_shards(tensors: dict[str, torch.Tensor], out_dir: Path, num_shards: int = 1) -> list[Path]:
    """Write tensors into ``num_shards`` files (greedy by size) plus the index file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(tensors)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    budget = math.ceil(total / num_shards)
    groups: list[list[str]] = [[]]
    used = 0
    for name in names:
        nbytes = tensors[name].numel() * tensors[name].element_size()
        if groups[-1] and used + nbytes > budget and len(groups) < num_shards:
            groups.append([])
            used = 0
        groups[-1].append(name)
        used += nbytes
    paths, weight_map = [], {}
    for i, group in enumerate(groups):
        fname = SINGLE_FILE if num_shards == 1 else f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: tensors[n].contiguous() for n in group}, str(out_dir / fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in group})
        paths.append(out_dir / fname)
    if num_shards > 1:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (out_dir / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return paths
