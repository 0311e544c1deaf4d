"""The README stays true: its quick-start commands are the ones CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_two_quick_start_commands():
    commands = quick_start_commands()
    assert len(commands) == 2, commands
    assert commands[0].startswith("./install.sh")


def test_ci_runs_the_readme_setup_and_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    setup, test = quick_start_commands()
    assert "./install.sh" in ci
    assert re.search(rf"^{re.escape(test)}$", ci, re.M), f"`{test}` is not a line of .ci/run"
