"""The command line as the tests run it: the installed `lumen-ex` script, golden outputs, a workspace.

``run`` calls the installed command with a fixed width and no colour; ``normalise`` takes out what
varies between runs (temporary paths, durations); ``compare`` holds a text to its golden in
tests/golden/ (LUMEN_EX_UPDATE_GOLDEN=1 rewrites it, then read the diff).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import LUMEN_EX

from lumen_ex.core import catalog

GOLDEN = Path(__file__).parents[1] / "golden"
REFERENCE_1 = catalog.load(environ={}).find(1).reference_path
SYNTAX_ERROR = "def scaled_dot_product_attention(q, k, v, mask=None)\n    return q\n"


def run(args: list[str], cwd: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORCE_COLOR", "CLICOLOR"))}
    env.update({"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", **(env_extra or {})})
    return subprocess.run([LUMEN_EX, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def normalise(text: str, root: Path) -> str:
    text = text.replace(str(root), "<tmp>")
    text = re.sub(r"\d+\.\d+ s\b", "<t> s", text)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def compare(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("LUMEN_EX_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden {path}: run with LUMEN_EX_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"output differs from {path} (LUMEN_EX_UPDATE_GOLDEN=1 rewrites it)"


@pytest.fixture
def workspace(tmp_path):
    """A workspace made by `lumen-ex init` (its root). tests/conftest.py registers this module as a
    plugin, so a test module that defines no ``workspace`` fixture of its own gets this one."""
    proc = run(["init", "ws"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "ws"


def put(ws: Path, source: str | Path, ex: str = "1") -> None:
    """Put ``source`` (a path or the code itself) in ``ws`` as exercise ``ex``'s file."""
    e = catalog.load().find(ex)
    target = ws / e.dir / e.file
    if isinstance(source, Path):
        shutil.copyfile(source, target)
    else:
        target.write_text(source)
