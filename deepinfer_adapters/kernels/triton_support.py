"""Whether Triton can be imported here (the CUDA backends' ``supports`` checks ask once), and
whether its CPU interpreter is on."""

from __future__ import annotations

import functools
import os


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # ImportError, or a broken install
        return False
    return True


def interpreting() -> bool:
    """Triton's CPU interpreter is on (its own switch, read by Triton)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"
