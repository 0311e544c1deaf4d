"""Shared fixtures: grade a single submission file through the real harness and sandbox."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from lumen_ex import catalog
from lumen_ex.check import run_check
from lumen_ex.results import RunResult
from lumen_ex.sandbox.bwrap import BwrapLauncher
from lumen_ex.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "corpus"


def bwrap_ok() -> bool:
    return BwrapLauncher.availability().ok


requires_bwrap = pytest.mark.skipif(
    not bwrap_ok(), reason=f"bubblewrap unavailable: {BwrapLauncher.availability().reason}")


def best_sandbox() -> str:
    """bwrap when it works here, else the unisolated mode (the verdicts are the same)."""
    return "bwrap" if bwrap_ok() else "none"


def interruptible() -> None:
    """``preexec_fn`` for a child process that a test will Ctrl-C: SIGINT back to its default, as
    for a terminal's foreground job. (A shell starts background jobs with SIGINT ignored, and an
    ignored signal stays ignored in every child, so a test run started in the background would
    otherwise send Ctrl-C to programs that cannot hear it.)"""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def make_workspace(tmp: Path) -> Workspace:
    return Workspace.create(tmp / "ws", catalog.load())


def grade_source(tmp: Path, exercise: str | int, source: str | Path, *, sandbox: str | None = None,
                 seed: int = 1234, device: str = "cpu", extra: dict[str, str] | None = None) -> RunResult:
    """Put ``source`` (a path or the code itself) in a fresh workspace and check it for real."""
    ws = make_workspace(tmp)
    ex = catalog.load().find(exercise)
    target = ws.root / ex.dir / ex.file
    if isinstance(source, Path):
        shutil.copyfile(source, target)
    else:
        target.write_text(source)
    for name, text in (extra or {}).items():
        (ws.root / ex.dir / name).write_text(text)
    return run_check(exercise, workspace=ws.root, sandbox=sandbox or best_sandbox(), seed=seed,
                     device=device, record=False)


@pytest.fixture
def grade(tmp_path):
    """grade(exercise, source, sandbox=None, seed=1234) -> RunResult, in a fresh workspace each call."""
    counter = iter(range(10_000))

    def _grade(exercise, source, **kwargs):
        return grade_source(tmp_path / f"g{next(counter)}", exercise, source, **kwargs)

    return _grade
