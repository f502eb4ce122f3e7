"""Typed errors a user can cause. Each message names what is wrong and what is valid."""

from __future__ import annotations


class DeepInferAdaptersError(ValueError):
    """Base class: bad input from the user (a file, a request, a flag)."""


class ConfigError(DeepInferAdaptersError):
    """config.json is missing a field, or a field has an invalid value."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class CheckpointError(DeepInferAdaptersError):
    """A checkpoint tensor or shard is missing, unexpected, misshaped, mistyped or corrupt."""

    def __init__(self, message: str, tensor: str | None = None, file: str | None = None) -> None:
        super().__init__(message)
        self.tensor = tensor
        self.file = file
