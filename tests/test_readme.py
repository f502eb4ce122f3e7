"""README's two set-up commands stay in step with .ci/run and the CLI."""

from __future__ import annotations

import re
from pathlib import Path

from deepinfer_adapters.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [line for block in blocks[:2] for line in block.splitlines() if line and not line.startswith("#")]


def test_ci_runs_readme_test_command():
    install_and_test = _commands()[1].split(" && ")
    ci = [l.strip() for l in (ROOT / ".ci" / "run").read_text().splitlines() if l.strip() and not l.startswith("#")]
    test_cmd = install_and_test[-1]
    assert test_cmd.startswith("python -m pytest")
    assert test_cmd in ci
    # the same installs, in the same order (torch first)
    readme_installs = [c.replace("pip install ", "") for c in install_and_test if c.startswith("pip install")]
    ci_installs = [c.split("pip install -q ")[1] for c in ci if "pip install -q " in c and "--upgrade" not in c]
    assert readme_installs == ci_installs
    assert readme_installs[0] == "torch==2.13.0"


def test_first_command_uses_real_subcommands():
    first = _commands()[0]
    subcommands = set(build_parser()._subparsers._group_actions[0].choices)
    used = re.findall(r"deepinfer-adapters (\S+)", first)
    assert used and set(used) <= subcommands
