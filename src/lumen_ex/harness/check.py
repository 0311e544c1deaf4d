"""``lumen-ex check``: grade one exercise of one workspace and return the result record.

The order of work matters for speed: the sandboxed worker is launched before this process imports
torch or pytest, so the two torch imports (the worker's and the harness's) overlap.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from lumen_ex import __version__
from lumen_ex.core import catalog as catalog_mod
from lumen_ex.core import scores, seeds, snapshot
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.errors import DeviceUnavailable
from lumen_ex.core.options import DEVICES, check_device, gpu_present, resolve_device  # noqa: F401 (DEVICES: re-exported)
from lumen_ex.core.results import (
    Diagnosis,
    RunResult,
    SandboxInfo,
    Status,
    TestResult,
    catalog_versions,
    join_notes,
    not_graded,
)
from lumen_ex.core.workspace import Workspace
from lumen_ex.sandbox.base import Backend, CheckHere, Launched, Launcher, WorkerSpec
from lumen_ex.sandbox.select import replacing, select_backend

if TYPE_CHECKING:   # for annotations only: they import torch (see the module docstring)
    from lumen_ex.harness.client import Worker, WorkerPool
    from lumen_ex.harness.runner import SuiteOutcome


class RunTests(Protocol):
    """What runs a check's hidden suite against its worker pool and returns run_suite's (results,
    collection errors): :func:`fresh_session`, unless the check is given another (a grading
    process's kept sessions, src/lumen_ex/harness/kept_session.py; watch mode's session collected
    in advance, src/lumen_ex/learner/watch_session.py: both src/lumen_ex/harness/prepared_session.py's)."""

    def __call__(self, ex: Exercise, pool: WorkerPool, learner_file: Path, *, seed: int, device: str,
                 select: str | None, lean: bool) -> SuiteOutcome: ...


@dataclass(frozen=True)
class CheckOptions:
    """What :func:`check_here` may be given beyond the exercise, the files, the launcher, the seed
    and the device; each has the default of a plain check.

    ``select``: only the tests matching this pytest ``-k`` expression.
    ``started``: when the check began (time.monotonic(); None: now), for its duration and run deadline.
    ``warning``: a note about the sandbox, added to the record's ``sandbox.note``.
    ``first``: a worker already launched for this check (a ``Launched``, or a ``harness.client.Worker``
    whose hello may already have been read), used instead of launching one; ``lumen-ex watch``
    keeps one ready between saves (src/lumen_ex/learner/prewarm.py). It is killed when the check ends.
    ``lean``: run pytest without the plugins no suite needs (src/lumen_ex/harness/runner.py LEAN_DISABLED);
    every check does, the same whoever asks for it, so that every way of grading gives the same verdicts.
    ``run_tests``: called instead of :func:`fresh_session` with the same arguments (see :class:`RunTests`).
    """

    select: str | None = None
    started: float | None = None
    warning: str = ""
    first: Launched | Worker | None = None
    lean: bool = True
    run_tests: RunTests | None = None


def worker_spec(ex: Exercise, workspace: Path, learner_file: Path, device: str, *, warm: bool = False) -> WorkerSpec:
    """The sandboxed worker a check of ``ex`` asks for. Watch mode and ``lumen-ex grade`` start
    workers in advance under this same spec (with ``warm``: src/lumen_ex/sandbox/base.py WorkerSpec),
    so that :func:`check_here` takes them as its own."""
    return WorkerSpec(workspace=workspace, module_dir=learner_file.parent, device=resolve_device(device),
                      limits=ex.limits, warm=warm, graded_file=learner_file)


def run_check(exercise: str | int, *, workspace: Path | None = None, sandbox: str = "auto",
              seed: int | None = None, device: str = "auto", record: bool = True,
              select: str | None = None, launcher: Backend | None = None, note: str = "",
              run_tests: RunTests | None = None) -> RunResult:
    """Grade ``exercise`` in ``workspace`` (found from the current folder when None).

    ``launcher`` overrides ``sandbox``: the grader image's entry point passes the launcher that
    starts workers as the container's worker user (src/lumen_ex/sandbox/container.py), and
    ``lumen-ex check`` the backend it has chosen already with ``note``, the warning that choice
    gave (src/lumen_ex/cli/warm.py).
    ``run_tests``: as in :class:`CheckOptions` (a grading process passes its kept pytest sessions,
    src/lumen_ex/harness/kept_session.py).
    """
    started = time.monotonic()
    check_device(device)
    cat = catalog_mod.load()
    ex = cat.find(exercise)
    ws = Workspace.find(workspace)
    learner_file = ws.exercise_file(ex)
    seed = seeds.choose(seed)   # checked once, the same way for every sandbox
    warning = note
    backend = launcher
    if backend is None:
        backend, warning = select_backend(sandbox)
    result = backend.run_check(ex, ws.root, learner_file, seed=seed, device=device, select=select, note=warning,
                               check_here=_check_here_for(started, run_tests))
    if record and result.status is not Status.ERROR:
        try:
            ws.record_result(ex.slug, result)
        except OSError as exc:   # a read-only workspace: the grade stands, the progress is not kept
            result.warnings.append(f"your progress was not saved ({exc.strerror or type(exc).__name__}: "
                                   f"{exc.filename or ws.root})")
    return result


def _check_here_for(started: float, run_tests: RunTests | None) -> CheckHere:
    """:func:`check_here` as a backend calls it (src/lumen_ex/sandbox/base.py ``Launcher.run_check``:
    the sandbox layer, below this one, passes ``select`` and its note as keywords of their own)."""

    def here(ex: Exercise, workspace: Path, learner_file: Path, launcher: Launcher, *, seed: int, device: str,
             select: str | None, warning: str) -> RunResult:
        return check_here(ex, workspace, learner_file, launcher, seed=seed, device=device,
                          options=CheckOptions(select=select, started=started, warning=warning,
                                               run_tests=run_tests))

    return here


def check_here(ex: Exercise, workspace: Path, learner_file: Path, launcher: Launcher, *, seed: int, device: str,
               options: CheckOptions = CheckOptions()) -> RunResult:
    """Run the hidden suite of ``ex`` in this process against workers started by ``launcher``
    (``options``: what else the check is given, :class:`CheckOptions`)."""
    started = time.monotonic() if options.started is None else options.started
    warning, first = options.warning, options.first
    wanted = device
    spec = worker_spec(ex, workspace, learner_file, device)
    device = spec.device
    try:
        source = snapshot.take(learner_file)   # once: every worker and the scan grade these bytes
    except snapshot.SnapshotRefused as exc:
        if first is not None:
            first.kill()
        return _refused(ex, str(exc), launcher, device=device, seed=seed, started=started, warning=warning)
    missing = ex.missing()
    if missing:             # no submission can be graded here: the machine's to fix, not the learner's
        if first is not None:
            first.kill()
        return _refused(ex, missing, launcher, device=device, seed=seed, started=started, warning=warning,
                        status=Status.ERROR)

    if first is None:
        # Before importing torch here, so that the two imports overlap; warm (WorkerSpec.warm): the
        # worker loads torch's meta kernels before its hello too, while this process is still
        # importing torch and pytest and collecting the suite, which takes longer than its import.
        first = launcher.launch(replace(spec, warm=True))
    pool: WorkerPool | None = None
    replacements = replacing(launcher)   # a zygote, started only if a worker fails
    try:
        from lumen_ex.harness.client import WorkerPool  # lazy: it imports torch, after the launch above

        pool = WorkerPool(launcher, spec, first=first, module=ex.module, functions=list(ex.functions),
                          forbidden=list(ex.forbidden), autograd=ex.autograd, kernel=ex.kernel,
                          source=source.data,
                          startup_timeout=ex.times.startup_seconds,
                          call_timeout=ex.times.call_seconds,
                          run_deadline=started + ex.times.run_seconds, replacements=replacements)
        device = _confirm_device(pool, wanted, device)
        results, errors = (options.run_tests or fresh_session)(ex, pool, learner_file, seed=seed, device=device,
                                                            select=options.select, lean=options.lean)
    finally:
        (pool.close() if pool is not None else first.kill())
        if replacements is not None:
            replacements.close()
    note = join_notes(launcher.note(), warning)
    sandbox_info = SandboxInfo(launcher.name, launcher.isolated, pool.enforced, note)
    result = _assemble(ex, results, errors, sandbox_info, device=device, seed=seed, started=started)
    result.source = source.to_dict()
    return result


def _refused(ex: Exercise, reason: str, launcher: Launcher, *, device: str, seed: int, started: float,
             warning: str, status: Status = Status.FAIL) -> RunResult:
    """The result for a file that cannot be graded at all (src/lumen_ex/core/snapshot.py): one failed row,
    no test run, nothing scored: the row carries the exercise's whole maximum, so the scores add up.
    ``status`` ERROR: not the file's fault (a package the exercise needs is missing: Exercise.missing)."""
    message = f"your file was not graded: {reason}"
    total = scores.total(ex.points.values())
    kind = "file" if status is Status.FAIL else "grader"
    row = TestResult("file", "the exercise file can be read", "file", status, message=message,
                     diagnosis=Diagnosis(kind, message), max_score=total)
    note = join_notes(launcher.note(), warning)
    return not_graded(ex.summary(), row, status=status, max_score=total,
                      sandbox=SandboxInfo(launcher.name, launcher.isolated, {}, note), device=device, seed=seed,
                      duration=time.monotonic() - started,
                      versions=catalog_versions())


def _confirm_device(pool: WorkerPool, wanted: str, device: str) -> str:
    """With --device auto, fall back to the CPU when the worker's torch cannot see the GPU."""
    if device != "cuda":
        return device
    from lumen_ex.harness.client import WorkerFailure  # lazy: it imports torch (see check_here)

    try:
        worker = pool.worker
        assert worker is not None     # a new pool holds its first worker
        hello = worker.wait_hello(time.monotonic() + pool.startup_timeout)
    except WorkerFailure:
        return device   # reported by the first test, like any other start-up failure
    if hello.cuda:
        return device
    if wanted == "cuda":
        raise DeviceUnavailable("--device cuda was asked for, but torch in the sandbox sees no CUDA device",
                                "Check `lumen-ex doctor`, or use --device cpu")
    return "cpu"


def fresh_session(ex: Exercise, pool: WorkerPool, learner_file: Path, *, seed: int, device: str,
                  select: str | None, lean: bool = True) -> SuiteOutcome:
    """Run the suite in a pytest session of its own (what a check does unless given ``run_tests``)."""
    # lazy: they import torch and pytest, which this module must not before the worker's launch
    from lumen_ex.harness.proxy import LearnerModule
    from lumen_ex.harness.runner import run_suite

    learner = LearnerModule(pool, device, learner_file.name)
    return run_suite(ex, learner, seed=seed, device=device, select=select, lean=lean)


def score(ex: Exercise, tests: list[TestResult]) -> None:
    """Share each group's points among its tests that ran (skipped tests score nothing).

    The shares are whole hundredths split by the largest-remainder rule (src/lumen_ex/core/scores.py):
    the tests of a group add up to the group's points exactly, never a little more."""
    for group, points in ex.points.items():
        members = [t for t in tests if t.group == group and t.status is not Status.SKIPPED]
        for t, units in zip(members, scores.share(scores.to_units(points), len(members))):
            t.max_score = scores.from_units(units)
            t.score = t.max_score if t.status is Status.PASS else 0.0


# The hidden tests that need a GPU are in this group (src/lumen_ex/exercises/01-attention/suite/test_attention.py,
# src/lumen_ex/exercises/02-kv-cache/suite/test_kv_cache.py: ``@pytest.mark.group("cuda")``, 0 points).
GPU_GROUP = "cuda"
NO_GPU = "no GPU on the grading machine"


def skip_gpu_tests(tests: list[TestResult], device: str) -> None:
    """Without a GPU, the GPU tests are ``skipped`` whatever else happened: a file that does not
    parse or a run that timed out must not turn them into errors (and make "runs on the GPU"
    the class's hardest test), and all say why in the same words (the suite's own skip says "no
    CUDA device in the sandbox"). With a GPU visible they keep their own outcome."""
    if device == "cuda" or gpu_present():
        return
    for t in tests:
        if t.group == GPU_GROUP:
            t.status, t.message, t.diagnosis = Status.SKIPPED, NO_GPU, None
            t.score = t.max_score = 0.0


def suite_error(ex: Exercise, message: str, errors: list[str]) -> Diagnosis:
    """The hidden suite did not load (or collected nothing): the fault of whoever wrote the
    exercise, blamed on its pack, with pytest's report of where (its last lines)."""
    from lumen_ex.harness.plugin import blame_hint  # lazy: it imports pytest (see the module docstring)

    return Diagnosis("grader", message, hint=blame_hint(ex, "suite"),
                     details={"pack": ex.pack, "exercise": ex.dir, "file": "suite", "error": errors[0][-2000:]})


def _assemble(ex: Exercise, tests: list[TestResult], errors: list[str], sandbox: SandboxInfo, *, device: str,
              seed: int, started: float) -> RunResult:
    import torch  # lazy: not before the worker's launch (see the module docstring)

    skip_gpu_tests(tests, device)
    score(ex, tests)
    unknown = sorted({t.group for t in tests} - set(ex.points))
    if unknown:
        errors = [*errors, f"test groups not in the catalogue: {', '.join(unknown)}"]
    if errors or any(t.diagnosis and t.diagnosis.kind == "grader" for t in tests):
        status = Status.ERROR
        message = errors[0].strip().splitlines()[-1] if errors else "a hidden test failed inside the grader"
    elif all(t.status in (Status.PASS, Status.SKIPPED) for t in tests):
        status, message = Status.PASS, "all tests passed"
    else:
        status = Status.FAIL
        failed = sum(t.status not in (Status.PASS, Status.SKIPPED) for t in tests)
        message = f"{failed} of {len(tests)} tests did not pass"
    if errors:
        tests = [*tests, TestResult("grader", "the hidden suite loaded", "grader", Status.ERROR,
                                    message=message, diagnosis=suite_error(ex, message, errors))]
    return RunResult(
        exercise=ex.summary(), status=status, sandbox=sandbox, device=device, seed=seed,
        score=scores.total(t.score for t in tests), max_score=scores.total(t.max_score for t in tests),
        duration=time.monotonic() - started, message=message, tests=tests,
        versions={"lumen_ex": __version__, "torch": torch.__version__,
                  "python": platform.python_version(), "catalog": catalog_mod.load().version},
    )
