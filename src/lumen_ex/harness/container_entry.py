"""The grader image's entry point: grade one exercise and write the result document.

    lumen-ex-container EXERCISE [--seed N] [--device cpu|cuda|auto] [--select EXPR]

Inside the container (see src/lumen_ex/image/grader.Dockerfile and docs/docker.md), with the learner's workspace
mounted read-only at /workspace and a results directory at /results, this runs the same
``run_check`` as ``lumen-ex check`` on the host, with the launcher that starts the worker as the
unprivileged ``lumen-worker`` user, then writes ``RunResult.to_dict()`` (the schema of
``lumen-ex check --format json``) to /results/result.json, atomically. It always writes a document:
a check that cannot run becomes status "error" with the reason. The exit code is 0 when a document
was written (the process then ends at once, skipping torch's slow interpreter shutdown); the host
reads verdicts only from the document.

The image runs this (and src/lumen_ex/classroom/platforms.py) as ``python -IB`` in the fixed folder /run/lumen
(src/lumen_ex/image/grader.Dockerfile): nothing in the working folder or the environment of whoever starts the
container is imported (src/lumen_ex/core/trusted.py).

The seed may come from the environment (LUMEN_EX_SEED, which the docker backend uses) rather than
the command line, because every process in the container, the worker included, can read the
harness's command line in /proc, but not its environment.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from lumen_ex.core.atomic import write_atomically
from lumen_ex.core.errors import LumenError
from lumen_ex.core.options import SEED_ENV
from lumen_ex.core.results import RunResult, SandboxInfo, grader_error, one_line

WORKSPACE = Path("/workspace")
RESULTS = Path("/results")
RESULT_NAME = "result.json"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lumen-ex-container", description=__doc__.split("\n\n")[0])
    parser.add_argument("exercise", help="the exercise number or slug")
    parser.add_argument("--seed", type=int, default=None, help=f"seed for the hidden inputs (or ${SEED_ENV})")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--select", default=None, help="only tests matching this pytest -k expression")
    parser.add_argument("--workspace", type=Path, default=WORKSPACE)
    parser.add_argument("--results", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """The console script: grade, write the document, and end the process at once.

    An absolute path as the first argument is a command to run instead, as hosted platforms run an
    image (``docker run IMAGE /autograder/run_autograder``, Gradescope's local run).
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0].startswith("/"):
        os.execv(argv[0], argv)
    exit_now(run(argv))


def exit_now(code: int) -> None:
    """End the process at once, output flushed: the document is in place, and the interpreter's
    (and torch's) slow shutdown is skipped."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def seed_given(seed: int | None) -> int | None:
    """``--seed`` when given, else ``$LUMEN_EX_SEED`` (taken out of the environment, so the
    worker started later does not inherit it), else None: a fresh seed is drawn."""
    seed_text = os.environ.pop(SEED_ENV, "")
    return seed if seed is not None else (int(seed_text) if seed_text.isdigit() else None)


def run(argv: list[str]) -> int:
    """Grade as the command line ``argv`` says and write the result document; 0 when written."""
    started = time.monotonic()
    args = parse(argv)
    seed = seed_given(args.seed)
    try:
        # lazy, inside the try: a document is written even when the grader itself fails to import
        from lumen_ex.harness.check import run_check
        from lumen_ex.sandbox.container import ContainerLauncher

        result = run_check(args.exercise, workspace=args.workspace, seed=seed, device=args.device,
                           record=False, select=args.select, launcher=ContainerLauncher())
        document = result.to_dict()
    except Exception as exc:  # noqa: BLE001  a document is always written
        document = error_document(args.exercise, seed, args.device, exc, started)
    write_atomically(args.results / RESULT_NAME, json.dumps(document, indent=1))
    return 0


def error_document(exercise: str, seed: int | None, device: str, exc: BaseException,
                   started: float) -> dict[str, Any]:
    """A result document for a check that could not run: status error, the reason as the message."""
    return error_result(exercise, seed, device, exc, started).to_dict()


def error_result(exercise: str, seed: int | None, device: str, exc: BaseException, started: float) -> RunResult:
    """The RunResult of a check that could not run (see :func:`error_document`)."""
    if isinstance(exc, LumenError):
        message = str(exc)
    else:
        message = f"the grader failed in the container: {type(exc).__name__}: {exc}"
    summary = {"number": 0, "slug": "unknown", "title": "unknown"}
    try:
        from lumen_ex.core import catalog  # lazy, inside the try: the catalogue may be what failed

        summary = catalog.load().find(exercise).summary()
    except Exception:  # noqa: BLE001  the catalogue itself may be what failed
        pass
    return grader_error(summary, one_line(message, "the grader failed in the container"),
                        sandbox=SandboxInfo("docker", True, {}, ""),
                        device=device if device in ("cpu", "cuda") else "cpu", seed=seed or 0,
                        duration=time.monotonic() - started)


if __name__ == "__main__":
    main()
