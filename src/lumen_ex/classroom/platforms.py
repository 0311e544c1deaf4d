"""The grader image on hosted platforms: a Gradescope autograder and a PrairieLearn external grader.

    lumen-ex-platform gradescope    [--exercise N ...] [--seed N] [--device cpu|cuda|auto]
    lumen-ex-platform prairielearn  [--exercise N ...] [--seed N] [--device cpu|cuda|auto]

Each platform runs the grader image once per submission, with the student's files in a folder of
its own and a results file it reads afterwards:

==============  ==============================  ========================================
platform        the student's files             the results document
==============  ==============================  ========================================
gradescope      ``/autograder/submission``      ``/autograder/results/results.json``
prairielearn    ``/grade/student``              ``/grade/results/results.json``
==============  ==============================  ========================================

The image has ``/autograder/run_autograder`` (Gradescope's fixed entry point), which runs
``lumen-ex-platform gradescope``. The files are found as ``lumen-ex grade`` finds them
(src/lumen_ex/classroom/submissions.py): at their workspace path (``01-attention/attention.py``), at the top
(``attention.py``), or as the only file of that name below; they are copied into a throwaway
workspace, and each exercise is graded exactly as in the docker sandbox: the harness runs as the
container's root, the learner's code as ``lumen-worker``, which cannot read the hidden suites, the
reference or the results folder. The exercises come from ``--exercise`` (repeatable), else from
``$LUMEN_EX_EXERCISES`` ("1,2"), else every exercise in the catalogue. A results document is always
written, even when grading itself failed (then Gradescope shows the reason with 0 points and
PrairieLearn marks the submission not gradable); the exit code is 0 whenever it was written.

Both entry points run isolated (``python -IB``, src/lumen_ex/image/grader.Dockerfile; ``run_autograder`` starts in
``/``): a student file named like a module (``json.py``, ``sitecustomize.py``) in the platform's
working folder is never imported by this trusted process, and the submission's files are read only
through src/lumen_ex/core/bounded.py (regular files, capped sizes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lumen_ex.classroom.entries import Submission
from lumen_ex.classroom.submissions import prepare
from lumen_ex.classroom.ungraded import unpreparable_result
from lumen_ex.core import catalog as catalog_mod
from lumen_ex.core import seeds
from lumen_ex.core.atomic import write_atomically
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.options import SEED_ENV
from lumen_ex.core.results import SandboxInfo
from lumen_ex.feedback.formats import gradescope, prairielearn
from lumen_ex.harness.check import run_check
from lumen_ex.harness.container_entry import error_result, exit_now, seed_given
from lumen_ex.sandbox.container import ContainerLauncher

EXERCISES_ENV = "LUMEN_EX_EXERCISES"


@dataclass(frozen=True)
class Platform:
    name: str
    submission: Path       # where the platform puts the student's files
    results: Path          # the document the platform reads


PLATFORMS = {p.name: p for p in (
    Platform("gradescope", Path("/autograder/submission"), Path("/autograder/results/results.json")),
    Platform("prairielearn", Path("/grade/student"), Path("/grade/results/results.json")),
)}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lumen-ex-platform", description=__doc__.split("\n\n")[0])
    parser.add_argument("platform", choices=sorted(PLATFORMS))
    parser.add_argument("--exercise", "-e", action="append", default=[],
                        help=f"an exercise number or slug, repeatable (default: ${EXERCISES_ENV}, else all)")
    parser.add_argument("--seed", type=int, default=None, help=f"seed for the hidden inputs (or ${SEED_ENV})")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--submission", type=Path, default=None, help="override the platform's folder")
    parser.add_argument("--results", type=Path, default=None, help="override the platform's results file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """The console script: grade, write the platform's document, and end the process at once."""
    exit_now(run(sys.argv[1:] if argv is None else argv))


def run(argv: list[str], launcher=None) -> int:
    """Grade as ``argv`` says and write the document; 0 when it was written.

    ``launcher`` is the worker launcher (default: the grader image's, which starts the worker as
    ``lumen-worker``); the project's tests pass a host launcher to run this outside the image.
    """
    args = parse(argv)
    platform = PLATFORMS[args.platform]
    seed = seed_given(args.seed)
    wanted = args.exercise or [e for e in os.environ.get(EXERCISES_ENV, "").replace(",", " ").split() if e]
    results = args.results or platform.results
    guard(results.parent)
    runs = grade_submission(args.submission or platform.submission, wanted, seed=seed, device=args.device,
                            launcher=launcher)
    document = render(platform.name, runs)
    write_atomically(results, json.dumps(document, indent=1))
    print(f"lumen-ex: wrote {results}: " + "; ".join(f"exercise {r.exercise['number']} {r.status.value} "
                                                    f"{r.score:g}/{r.max_score:g}" for r in runs))
    return 0


def guard(folder: Path) -> None:
    """Make the results folder before any learner code runs (PrairieLearn does not make it), and
    close it to everyone but its owner's writes, so that the worker's user cannot plant a results
    file (or the temporary file it is written through) however the platform left the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        folder.chmod(0o755)
    except OSError:
        pass            # not ours to change: the final rename still replaces anything planted


def render(platform: str, runs: list) -> dict:
    return {"gradescope": gradescope.combine, "prairielearn": prairielearn.combine}[platform](runs)


def grade_submission(source: Path, wanted: list[str], *, seed: int | None, device: str, launcher=None) -> list:
    """Grade the exercises ``wanted`` (all when empty) of the files in ``source``; one RunResult each.

    Never raises for anything a submission or the grader can do: a missing file is a failed
    exercise (0 points, "no 01-attention/attention.py"), an unreadable submission or a grader that
    could not run is an exercise with status error and the reason.
    """
    started = time.monotonic()
    cat = catalog_mod.load()
    try:
        exercises = [cat.find(key) for key in wanted] if wanted else list(cat.exercises)
    except Exception as exc:  # noqa: BLE001  a misconfigured assignment still gets a document
        return [_configuration_error(str(exc), device, started)]
    seed = seeds.choose(seed)   # checked once, the same way for every sandbox
    sandbox = SandboxInfo("docker", True, {}, "")
    dev = device if device in ("cpu", "cuda") else "cpu"
    scratch = Path(tempfile.mkdtemp(prefix="lumen-ex-platform-"))
    try:
        scratch.chmod(0o755)        # the worker's user reads the throwaway workspace
        prepared = prepare(Submission("submission", Path(source), "folder"), exercises, cat, scratch)
        runs = []
        for ex in exercises:
            unpreparable = unpreparable_result(ex, prepared.refused, prepared.missing, sandbox=sandbox,
                                               device=dev, seed=seed)
            runs.append(unpreparable or _check(ex, prepared.workspace, seed, device, launcher))
        return runs
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _check(ex: Exercise, workspace: Path, seed: int, device: str, launcher):
    started = time.monotonic()
    try:
        if launcher is None:
            launcher = ContainerLauncher()
        return run_check(ex.number, workspace=workspace, seed=seed, device=device, record=False,
                         launcher=launcher)
    except Exception as exc:  # noqa: BLE001  a document is always written
        return error_result(str(ex.number), seed, device, exc, started)


def _configuration_error(reason: str, device: str, started: float):
    """The result when the assignment names an exercise the catalogue does not have."""
    return error_result("?", None, device, RuntimeError(reason), started)


if __name__ == "__main__":
    main()
