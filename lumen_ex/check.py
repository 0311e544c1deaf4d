"""``lumen-ex check``: grade one exercise of one workspace and return the result record.

The order of work matters for speed: the sandboxed worker is launched before this process imports
torch or pytest, so the two torch imports (the worker's and the harness's) overlap.
"""

from __future__ import annotations

import os
import platform
import secrets
import time
from pathlib import Path

from lumen_ex import __version__
from lumen_ex.sandbox.base import WorkerSpec
from lumen_ex.sandbox.select import select_launcher

from . import catalog as catalog_mod
from .errors import DeviceUnavailable, UsageError
from .results import Diagnosis, RunResult, SandboxInfo, Status, TestResult
from .workspace import Workspace

DEVICES = ("auto", "cpu", "cuda")


def gpu_present() -> bool:
    """Whether an NVIDIA GPU is visible, without importing torch."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")


def run_check(exercise: str | int, *, workspace: Path | None = None, sandbox: str = "auto",
              seed: int | None = None, device: str = "auto", record: bool = True,
              select: str | None = None) -> RunResult:
    """Grade ``exercise`` in ``workspace`` (found from the current folder when None)."""
    started = time.monotonic()
    if device not in DEVICES:
        raise UsageError(f"unknown device {device!r}", "Use --device cpu, cuda or auto")
    cat = catalog_mod.load()
    ex = cat.find(exercise)
    ws = Workspace.find(workspace)
    learner_file = ws.exercise_file(ex)
    seed = secrets.randbelow(2**31) if seed is None else int(seed)
    launcher, warning = select_launcher(sandbox)
    wanted = device
    device = "cuda" if device == "cuda" or (device == "auto" and gpu_present()) else "cpu"
    spec = WorkerSpec(workspace=ws.root, module_dir=learner_file.parent, device=device, limits=ex.limits)

    first = launcher.launch(spec)  # before importing torch here: the two imports then overlap
    pool = None
    try:
        from lumen_ex.harness.client import WorkerPool

        pool = WorkerPool(launcher, spec, first=first, module=ex.module, functions=list(ex.functions),
                          forbidden=list(ex.forbidden), startup_timeout=ex.times.startup_seconds,
                          call_timeout=ex.times.call_seconds,
                          run_deadline=started + ex.times.run_seconds)
        device = _confirm_device(pool, wanted, device)
        results, errors = _run_tests(ex, pool, learner_file, seed=seed, device=device, select=select)
    finally:
        (pool.close() if pool is not None else first.kill())
    note = " ".join(filter(None, [launcher.note(), warning]))
    sandbox_info = SandboxInfo(launcher.name, launcher.isolated, pool.enforced, note)
    result = _assemble(ex, results, errors, sandbox_info,
                       device=device, seed=seed, started=started)
    if record and result.status is not Status.ERROR:
        ws.record_check(ex.slug, result.status.value, result.score, result.max_score)
    return result


def _confirm_device(pool, wanted: str, device: str) -> str:
    """With --device auto, fall back to the CPU when the worker's torch cannot see the GPU."""
    if device != "cuda":
        return device
    from lumen_ex.harness.client import WorkerFailure

    try:
        hello = pool.worker.wait_hello(time.monotonic() + pool.startup_timeout)
    except WorkerFailure:
        return device   # reported by the first test, like any other start-up failure
    if hello.cuda:
        return device
    if wanted == "cuda":
        raise DeviceUnavailable("--device cuda was asked for, but torch in the sandbox sees no CUDA device",
                                "Check `lumen-ex doctor`, or use --device cpu")
    return "cpu"


def _run_tests(ex, pool, learner_file: Path, *, seed: int, device: str, select: str | None):
    from lumen_ex.harness.proxy import Submission
    from lumen_ex.harness.runner import run_suite

    submission = Submission(pool, device, learner_file.name)
    return run_suite(ex.suite, submission, seed=seed, device=device, select=select)


def score(ex, tests: list[TestResult]) -> None:
    """Share each group's points equally among its tests that ran (skipped tests score nothing)."""
    for group, points in ex.points.items():
        members = [t for t in tests if t.group == group and t.status is not Status.SKIPPED]
        for t in members:
            t.max_score = points / len(members)
            t.score = t.max_score if t.status is Status.PASS else 0.0


def _assemble(ex, tests, errors, sandbox: SandboxInfo, *, device, seed, started) -> RunResult:
    import torch

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
                                    message=message, diagnosis=Diagnosis("grader", message))]
    return RunResult(
        exercise=ex.summary(), status=status, sandbox=sandbox, device=device, seed=seed,
        score=sum(t.score for t in tests), max_score=sum(t.max_score for t in tests),
        duration=time.monotonic() - started, message=message, tests=tests,
        versions={"lumen_ex": __version__, "torch": torch.__version__,
                  "python": platform.python_version(), "catalog": catalog_mod.load().version},
    )
