"""Run a script under Triton's CPU interpreter (TRITON_INTERPRET=1, read when kernels are
defined, hence a fresh process): how the CPU suite checks a Triton kernel's algorithm."""

from __future__ import annotations

import os
import subprocess
import sys


def run_interpreted(script: str) -> str:
    """The script's stdout; fails the calling test with its stderr when it exits non-zero."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
