"""Run one hidden suite with pytest, in this (trusted) process, against a worker pool.

pytest is configured so that nothing outside lumen-ex can change how it runs: no plugin
autoloading, no cache, no conftest files, no ini file but ours, and no terminal output. The
learner's files are never on pytest's path: their code exists only in the worker.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

from lumen_ex.core import exercise_modules
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.results import TestResult
from lumen_ex.harness.plugin import GradingPlugin
from lumen_ex.harness.proxy import LearnerModule

# pytest's configuration and root folder: lumen-ex's own, never the pack's or the learner's. The
# suite itself is the exercise's suite/ folder (found, not imported: the harness sits below the
# suites it runs, docs/architecture.md); outside the root folder, pytest names each test module
# after its full path, so two packs' suites never share a module name in one process.
GRADERS = Path(__file__).resolve().parents[1] / "graders"

# What a run of a suite gives: its results in file order and its collection errors.
SuiteOutcome = tuple[list[TestResult], list[str]]


# pytest's own plugins that no hidden suite needs and that cost time on every run (the logging
# plugin alone is a third of a warm run): ``lean`` runs (every check, unless asked otherwise) leave
# them out. Fixture providers a suite might use (tmp_path, monkeypatch, recwarn, capsys) stay, and so
# does the logging plugin for a suite that mentions its ``caplog`` fixture; nothing here changes a
# verdict (unraisable/thread exceptions only ever become warnings, which are not recorded).
LEAN_DISABLED = ("logging", "junitxml", "pastebin", "doctest", "legacypath", "setuponly", "setupplan",
                 "unittest", "debugging", "faulthandler", "unraisableexception", "threadexception",
                 "subtests")


def one_thread() -> None:
    """Run the harness's own torch work on one thread. Its tensors are small, and a second OpenMP
    thread only waits for a core that the worker or another grading process holds: with two grading
    processes on two cores, a failing check's known-mistake matching took 5-10x longer (8 s instead
    of 0.6 s for one file of exercise 3). The worker runs on one thread already (sandbox/base.py)."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def run_suite(ex: Exercise, learner: LearnerModule | None, *, seed: int, device: str,
              select: str | None = None, lean: bool = True, plugins: tuple[object, ...] = (),
              grading: GradingPlugin | None = None) -> SuiteOutcome:
    """Run the suite; return its results in file order and any collection errors.

    ``lean``: leave out the pytest plugins in LEAN_DISABLED (same verdicts, less time per run).
    ``plugins``: more plugin objects for this session (a prepared session is one that holds the
    session at its run loop, collected in advance, until its submission is there; the playground
    adds its progress).
    ``grading``: the GradingPlugin to record with, instead of a new one for ``learner``
    (src/lumen_ex/harness/prepared_session.py gives each run its learner).
    """
    plugin = grading or GradingPlugin(learner, seed=seed, device=device, exercise=ex)
    here = ex.suite_dir
    one_thread()
    exercise_modules.keep_packs_unwritten()        # pytest's rewritten suite: no __pycache__ in the pack
    args = [
        str(here),
        "-c", str(GRADERS / "pytest.ini"),
        "--rootdir", str(GRADERS),
        "-p", "no:cacheprovider", "-p", "no:terminal", "-p", "no:stepwise",
        "--noconftest", "--import-mode=importlib",
    ]
    if select:
        args += ["-k", select]
    if lean:
        left_out = [name for name in LEAN_DISABLED if name != "logging" or not _uses_caplog(here)]
        args += [arg for name in left_out for arg in ("-p", f"no:{name}")]
    # No plugin autoloading, and nothing from the environment that adds options or plugins.
    forced = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": None, "PYTEST_PLUGINS": None}
    saved = {name: os.environ.get(name) for name in forced}
    for name, value in forced.items():
        _set_env(name, value)
    try:
        pytest.main(args, plugins=[plugin, *plugins])
    finally:
        for name, value in saved.items():
            _set_env(name, value)
    return outcome(plugin, here)


def outcome(plugin: GradingPlugin, suite_dir: Path) -> SuiteOutcome:
    """A run's results in file order and its collection errors (a suite that collected nothing is one)."""
    results = plugin.ordered()
    if not results and not plugin.collect_errors:
        plugin.collect_errors.append(f"no tests were collected from {suite_dir}")
    return results, list(plugin.collect_errors)


@functools.lru_cache(maxsize=64)
def _uses_caplog(suite_dir: Path) -> bool:
    """Whether a suite names pytest's ``caplog`` fixture (then its logging plugin stays on)."""
    return any("caplog" in path.read_text(errors="replace") for path in sorted(suite_dir.rglob("*.py")))


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value

