"""`lumen-ex hint N --all` and seed checking, through the real command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import workspace_with

from lumen_ex.core import seeds
from lumen_ex.core.errors import UsageError

LUMEN_EX = str(Path(sys.executable).parent / "lumen-ex")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([LUMEN_EX, *args], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "80", "LUMEN_EX_CHECK_SERVER": "off"})


def test_hint_all_shows_the_hints_seen_so_far_and_reveals_none(tmp_path):
    root = str(workspace_with(tmp_path, 1))
    assert "No hints seen yet" in _run("hint", "1", "--all", "--workspace", root).stdout
    _run("hint", "1", "--workspace", root)
    _run("hint", "1", "--workspace", root)
    shown = _run("hint", "1", "--all", "--workspace", root).stdout
    assert "hint 1 of" in shown and "hint 2 of" in shown and "hint 3 of" not in shown
    again = _run("hint", "1", "--all", "--workspace", root).stdout
    assert again == shown                       # --all reveals nothing new


@pytest.mark.parametrize("sandbox", ["none", "bwrap", "docker"])
@pytest.mark.parametrize("seed", ["-1", "4294967296", "1e3"])
def test_a_bad_seed_is_one_line_and_exit_2_under_every_sandbox(tmp_path, sandbox, seed):
    root = str(workspace_with(tmp_path, 1))
    done = _run("check", "1", "--workspace", root, "--sandbox", sandbox, "--seed", seed)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "seed" in done.stderr and "Traceback" not in done.stderr, done.stderr
    if seed != "1e3":              # not a number at all: click's own usage message, before us
        assert done.stderr.count("\n") == 1, done.stderr


def test_seeds_choose():
    assert seeds.choose(0) == 0 and seeds.choose(seeds.MAX_SEED) == seeds.MAX_SEED
    assert 0 <= seeds.choose(None) <= seeds.MAX_SEED
    for bad in (-1, seeds.MAX_SEED + 1, "x", True, 1.5):
        with pytest.raises(UsageError):
            seeds.choose(bad)


@pytest.mark.slow
def test_the_next_hint_answers_the_last_checks_first_failure(tmp_path):
    """After a check that names "scaled by 1/d_k", `lumen-ex hint` shows the hint about the scale,
    not hint 1 about transposes; the next call goes back to the hints in order."""
    from lumen_ex.core import catalog

    ex = catalog.load().find(1)
    buggy = ex.corpus_dir / "buggy" / "scale_by_dk.py"
    root = str(workspace_with(tmp_path, 1, buggy))
    done = _run("check", "1", "--workspace", root, "--sandbox", "none")
    assert done.returncode == 1, done.stdout + done.stderr
    first = _run("hint", "1", "--workspace", root).stdout
    wanted = ex.hint_for["scale-1/d_k"]
    assert f"hint {wanted + 1} of {len(ex.hints)}" in first and "scale-1/d_k" in first, first
    assert "sqrt(d_k)" in " ".join(first.split())
    second = _run("hint", "1", "--workspace", root).stdout
    assert "hint 1 of" in second and "last check" not in second, second
