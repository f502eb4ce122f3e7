"""Read the official checkpoint format (model_spec.md section 4).

Sharded safetensors with ``model.safetensors.index.json``; FP8 E4M3 weights with
E8M0 block scales; routed experts as packed FP4 E2M1 with E8M0 per-32 scales;
bf16/fp32 elsewhere; ``tid2eid`` as int64 or int32.

``validate_checkpoint`` checks every header against the tensor contract before
any payload is read. ``load_checkpoint`` then streams one shard at a time
(memory-mapped), optionally dequantizing FP8/FP4 pairs into dense weights, so
peak memory stays near the loaded weights plus one shard.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from tqdm.auto import tqdm

from deepinfer_adapters.config import ModelConfig
from deepinfer_adapters.errors import CheckpointError
from deepinfer_adapters.model_impl.checkpoint_spec import TensorSpec, expected_tensors
from deepinfer_adapters.model_impl.quant import dequant_fp4_experts, dequant_fp8_blocks
from deepinfer_adapters.model_impl.safetensors_io import HeaderEntry, read_header, shard_files

PROGRESS_DESC = "Loading safetensors checkpoint shards"


def validate_checkpoint(model_dir: str | Path, cfg: ModelConfig) -> dict[str, HeaderEntry]:
    """Check names, shapes and dtypes of every tensor from the shard headers alone.

    Raises CheckpointError naming the first offending tensor (and how many more
    there are) with expected and found; returns where each tensor lives.
    """
    model_dir = Path(model_dir)
    files, weight_map = shard_files(model_dir)
    found: dict[str, HeaderEntry] = {}
    for path in files:
        for name, entry in read_header(path).items():
            if name in found:
                raise CheckpointError(f"tensor {name!r} appears in both {found[name].file.name} and {path.name}",
                                      tensor=name, file=str(path))
            found[name] = entry
    if weight_map is not None:
        for name, fname in weight_map.items():
            if name in found and found[name].file.name != fname:
                raise CheckpointError(f"index maps tensor {name!r} to {fname} but it is in {found[name].file.name}",
                                      tensor=name, file=fname)
            if name not in found:
                raise CheckpointError(f"index maps tensor {name!r} to {fname} but that shard does not contain it",
                                      tensor=name, file=fname)
    expected = expected_tensors(cfg)
    _compare(expected, found)
    return found


def check_complete(expected: dict[str, TensorSpec], names: Iterable[str]) -> None:
    """CheckpointError naming the first contract tensor absent from ``names``."""
    missing = sorted(expected.keys() - set(names))
    if missing:
        spec = expected[missing[0]]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"checkpoint is missing tensor {spec.name!r}: expected {spec.dtype} "
                              f"{list(spec.shape)}, found nothing{more}", tensor=spec.name)


def _compare(expected: dict[str, TensorSpec], found: dict[str, HeaderEntry]) -> None:
    check_complete(expected, found)
    unexpected = sorted(found.keys() - expected.keys())
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        e = found[unexpected[0]]
        raise CheckpointError(f"unexpected tensor {unexpected[0]!r} in {e.file.name}: found {e.dtype} "
                              f"{list(e.shape)}, expected no such tensor for this config{more}",
                              tensor=unexpected[0], file=str(e.file))
    for name, spec in expected.items():
        e = found[name]
        if e.shape != spec.shape:
            raise CheckpointError(f"tensor {name!r} in {e.file.name} has the wrong shape: expected "
                                  f"{list(spec.shape)}, found {list(e.shape)}", tensor=name, file=str(e.file))
        if e.dtype not in spec.dtypes:
            raise CheckpointError(f"tensor {name!r} in {e.file.name} has the wrong dtype: expected "
                                  f"{' or '.join(spec.dtypes)}, found {e.dtype}", tensor=name, file=str(e.file))


def iter_shards(model_dir: str | Path, *, progress: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) shard by shard; payload errors name the file."""
    files, _ = shard_files(Path(model_dir))
    for path in tqdm(files, desc=PROGRESS_DESC, disable=not progress, unit="shard"):
        try:
            with safe_open(str(path), framework="pt") as fh:
                for name in fh.keys():
                    yield name, fh.get_tensor(name)
        except (SafetensorError, OSError, RuntimeError) as exc:
            raise CheckpointError(f"cannot read shard {path}: {exc}", file=str(path)) from exc


def load_checkpoint(
    model_dir: str | Path,
    cfg: ModelConfig,
    *,
    dequantize: torch.dtype | None = torch.bfloat16,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> dict[str, torch.Tensor]:
    """Validate, then load every tensor.

    With ``dequantize`` set, each FP8/FP4 weight is returned dense in that dtype
    under its own name and its ``.scale`` is dropped; with ``None`` the quantized
    tensors and their scales are returned as stored, for kernels that take them.
    """
    expected = expected_tensors(cfg)
    validate_checkpoint(model_dir, cfg)
    out: dict[str, torch.Tensor] = {}
    pending: dict[str, torch.Tensor] = {}  # a weight or scale whose partner is in a later shard
    for name, tensor in iter_shards(model_dir, progress=progress):
        spec = expected[name]
        if dequantize is None or spec.kind in ("plain", "hc"):
            out[name] = tensor.to(device)
            continue
        weight = spec.scale_for or name
        pending[name] = tensor
        scale = f"{weight.removesuffix('.weight')}.scale"
        if weight in pending and scale in pending:
            out[weight] = dequantize_tensor(expected[weight].kind, pending.pop(weight), pending.pop(scale), cfg,
                                            dequantize).to(device)
    if pending:  # the contract pairs every weight with a scale, so this means a bug
        raise CheckpointError(f"unpaired quantized tensors: {sorted(pending)[:4]}", tensor=sorted(pending)[0])
    return out


def dequantize_tensor(kind: str, w: torch.Tensor, scale: torch.Tensor, cfg: ModelConfig,
                      dtype: torch.dtype) -> torch.Tensor:
    """A quantized checkpoint weight (``TensorSpec.kind``) and its scale -> dense ``dtype``."""
    if kind == "fp4_weight":
        return dequant_fp4_experts(w, scale, dtype)
    if kind == "fp8_table":  # Engram rows: one scale per row and column block
        return dequant_fp8_blocks(w, scale, (1, cfg.quant.fp8_block[1]), dtype)
    return dequant_fp8_blocks(w, scale, cfg.quant.fp8_block, dtype)
