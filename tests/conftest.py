"""Shared fixtures: grade a single submission file through the real harness and sandbox."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lumen_ex.authoring.devcheck import DEFAULT_CLOSE_SEEDS, DEFAULT_SEEDS
from lumen_ex.core import catalog
from lumen_ex.core.results import RunResult
from lumen_ex.core.workspace import Workspace
from lumen_ex.harness.check import run_check
from lumen_ex.sandbox.bwrap import BwrapLauncher

ROOT = Path(__file__).resolve().parent.parent
# The tests live in three folders (unit/: no sandbox; sandbox/: attacks on every backend; e2e/: whole
# checks and class gradings); their files share helpers by module name across the folders.
for _folder in ("unit", "sandbox", "e2e"):
    if str(Path(__file__).resolve().parent / _folder) not in sys.path:
        sys.path.insert(0, str(Path(__file__).resolve().parent / _folder))
CORPUS = Path(__file__).resolve().parent / "corpus"          # the hostile submissions (tests/corpus/hostile)
# The built-in pack's exercises, by suite id (attention, kv_cache, ...): each one's corpus and reference
# live in its folder (src/lumen_ex/exercises/<NN-slug>/corpus/, reference.py).
BUILTIN = {ex.suite: ex for ex in catalog.load(environ={}).exercises}
CORPORA = {suite: ex.corpus_dir for suite, ex in BUILTIN.items()}
REFERENCES = {suite: ex.reference_path for suite, ex in BUILTIN.items()}
LUMEN_EX = str(Path(sys.executable).parent / "lumen-ex")   # the installed command, as a user runs it

# A `lumen-ex check` run by a test is graded cold, and starts no background server
# (src/lumen_ex/learner/check_server.py): tests/e2e/test_check_server.py turns it on for its own checks,
# and the golden, picture and format tests for theirs (tests/helpers/cli.py WarmWorkspace: one workspace
# and its server for the session's many checks of them, each after the first answered warm).
os.environ["LUMEN_EX_CHECK_SERVER"] = "off"

# Fixtures the test modules share without importing one another (tests/helpers/): the `workspace`
# made by `lumen-ex init`, for a module that defines none of its own.
pytest_plugins = ("helpers.cli",)


# The tests run on three xdist workers (pyproject.toml: -n 3 --dist loadgroup). Tests that would fight over
# one thing are kept on one worker, in order: the docker tests (one engine, one image, slot containers
# counted by name), the browser tests (one Chromium), the tests that read the corpus's one dev check run
# (tests/e2e/test_corpus.py marks its own, as does tests/e2e/test_seed_stability.py). The docker attacks
# graded by cold checks (COLD_DOCKER: each container found by its workspace, no slot started) are a
# group of their own, beside the other docker tests; the first group that matches is a test's group
# (an attack graded in a grading slot names the "docker" group itself: tests/sandbox/test_attacks.py IN_SLOT).
COLD_DOCKER = ("test_attacks.py", "test_protocol_attacks.py")
XDIST_GROUPS = {"docker-cold": lambda item: item.get_closest_marker("docker") is not None
                and item.path.name in COLD_DOCKER,
                "docker": lambda item: item.get_closest_marker("docker") is not None,
                "browser": lambda item: item.path.name == "test_playground_browser.py"}
# A module whose tests share one expensive module-scoped fixture (a class graded once, results drawn
# twice): its tests that use it are kept on one worker, so that the fixture is made once, not once
# per worker (a docker test among them keeps the docker group).
MODULE_FIXTURES = {"test_grade.py": "mixed", "test_grade_attribution.py": "graded", "test_grade_inputs.py": "graded",
                   "test_feedback.py": "graded", "test_scores_exact.py": "graded"}
# A session-scoped fixture that tests of several modules share: those tests are kept on one worker, in a
# group named after it, so that it is made once in the session (tests/helpers/cli.py warm_workspace: one
# workspace and its check server for the golden, picture and format checks of four modules).
SESSION_FIXTURES = ("warm_workspace",)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            for group, belongs in XDIST_GROUPS.items():
                if belongs(item):
                    item.add_marker(pytest.mark.xdist_group(group))
                    break
            else:
                names = getattr(item, "fixturenames", ())
                shared = [name for name in SESSION_FIXTURES if name in names]
                if shared:
                    item.add_marker(pytest.mark.xdist_group(shared[0]))
                elif MODULE_FIXTURES.get(item.path.name) in names:
                    item.add_marker(pytest.mark.xdist_group(item.path.stem))
        if getattr(config.option, "loadgroup", False):     # an xdist worker under --dist loadgroup
            _in_xdist_group(item)


def _in_xdist_group(item) -> None:
    """What pytest-xdist's worker does for --dist loadgroup (3.8: ``item._nodeid = f"{nodeid}@{group}"``),
    for pytest 9, where a node's id lives in ``item._id`` and that assignment is lost: every group
    was then split over the workers (the corpus graded twice at once). Older pytest: xdist's own."""
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    if not names or "@" in item.nodeid or not hasattr(item, "_id"):
        return
    from _pytest.nodeid import NodeId

    wanted = f"{item.nodeid}@{'_'.join(names)}"
    item._id = NodeId.parse(wanted)
    assert item.nodeid == wanted, f"cannot give {item.nodeid} its xdist group"


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


def tree_hash(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (and the set of folders), by relative path."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "<dir>"
            for p in sorted(root.rglob("*"))}


def make_workspace(tmp: Path) -> Workspace:
    return Workspace.create(tmp / "ws", catalog.load())


def workspace_with(tmp: Path, exercise: str | int, source: str | Path | None = None,
                   extra: dict[str, str] | None = None) -> Path:
    """A fresh workspace (its root) with ``source`` (a path or the code itself) as the exercise's
    file, the stub when None, and ``extra`` files beside it."""
    ws = make_workspace(tmp)
    ex = catalog.load().find(exercise)
    target = ws.root / ex.dir / ex.file
    if isinstance(source, Path):
        shutil.copyfile(source, target)
    elif source is not None:
        target.write_text(source)
    for name, text in (extra or {}).items():
        (ws.root / ex.dir / name).write_text(text)
    return ws.root


def grade_source(tmp: Path, exercise: str | int, source: str | Path, *, sandbox: str | None = None,
                 seed: int = 1234, device: str = "cpu", extra: dict[str, str] | None = None,
                 launcher=None) -> RunResult:
    """Put ``source`` (a path or the code itself) in a fresh workspace and check it for real
    (``launcher``, when given, starts its workers instead of ``sandbox``'s own)."""
    root = workspace_with(tmp, exercise, source, extra)
    return run_check(exercise, workspace=root, sandbox=sandbox or best_sandbox(), seed=seed,
                     device=device, record=False, launcher=launcher)


@pytest.fixture(scope="session")
def forked_bwrap():
    """bwrap's launcher with every worker forked from one warm zygote, as `lumen-ex grade`, watch
    and the playground start them (src/lumen_ex/sandbox/zygote.py; tests/sandbox/test_zygote.py
    holds forked and fresh workers to the same verdicts): each check still gets a new sandboxed
    worker of its own, without a torch import of its own. None where bubblewrap is unavailable."""
    if not bwrap_ok():
        yield None
        return
    from lumen_ex.sandbox.zygote import ZygoteLauncher

    launcher = ZygoteLauncher(BwrapLauncher())
    yield launcher
    launcher.close()


@pytest.fixture
def grade(tmp_path, forked_bwrap):
    """grade(exercise, source, sandbox=None, seed=1234) -> RunResult, in a fresh workspace each call.

    With no ``sandbox`` the check is bwrap's with a forked worker (``forked_bwrap``): for the tests
    whose point is the verdict; a test about a backend names it (tests/sandbox/ grade every attack
    with workers started the way `lumen-ex check` starts them)."""
    counter = iter(range(10_000))

    def _grade(exercise, source, **kwargs):
        if kwargs.get("sandbox") is None and forked_bwrap is not None:
            kwargs["launcher"] = forked_bwrap
        return grade_source(tmp_path / f"g{next(counter)}", exercise, source, **kwargs)

    return _grade


# The built-in pack's corpus is graded once for the whole test run, by `lumen-ex dev check` (a warm
# batch for all the seeds, then one for the close seeds): every file under CORPUS_SEEDS, the files nearest the tolerance under CLOSE_SEEDS too.
# tests/e2e/test_corpus.py reads the verdicts, tests/e2e/test_seed_stability.py their agreement.
# They are the command's own defaults, so what an instructor runs unflagged is what this proves (other
# seeds once hid a file that `lumen-ex dev check` failed at its seed 3: docs/tolerances.md).
CORPUS_SEEDS = DEFAULT_SEEDS
CLOSE_SEEDS = DEFAULT_CLOSE_SEEDS


@pytest.fixture(scope="session")
def corpus_report() -> dict:
    """`lumen-ex dev check --format json` on the built-in pack (the installed command, run from /).

    About 1,230 gradings (twelve exercises): four to five minutes on two cores, and the reason
    tests/e2e/test_corpus.py and tests/e2e/test_seed_stability.py take more than 30 s: they grade
    every corpus file under 3 to 5 seeds, for every test that reads the report."""
    # Under bwrap's forked workers (or the unisolated mode where bwrap is missing), not docker: the docker
    # tests run meanwhile on the other xdist worker and count the grading slots on this machine.
    proc = subprocess.run([LUMEN_EX, "dev", "check", "--format", "json", "--seeds", ",".join(map(str, CORPUS_SEEDS)),
                           "--close-seeds", ",".join(map(str, CLOSE_SEEDS)), "--sandbox", best_sandbox()],
                          capture_output=True, text=True, timeout=3600, cwd="/")
    assert proc.stdout.strip(), proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert proc.returncode == (0 if doc["ok"] else 1), proc.stderr[-3000:]
    return doc


def pack_copy(tmp: Path, *, version: str | None = None, edits: dict[str, tuple[str, str]] | None = None) -> Path:
    """A copy of the built-in pack (same name, so on LUMEN_EX_PATH it replaces the built-in one),
    with another ``version`` and text ``edits``: {file relative to the pack: (old, new)}."""
    root = tmp / "pack-copy"
    shutil.copytree(catalog.exercises_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    changes = dict(edits or {})
    if version is not None:
        text = (root / "pack.toml").read_text()
        current = catalog.read_pack(root).version
        changes["pack.toml"] = (f'version = "{current}"', f'version = "{version}"')
        assert current in text
    for rel, (old, new) in changes.items():
        text = (root / rel).read_text()
        assert old in text, f"{old!r} not in {rel}"
        (root / rel).write_text(text.replace(old, new, 1))
    return root
