"""The result documents of checks that graded nothing, for ``lumen-ex grade``, ``--collect`` and the platforms.

Each is made by ``lumen_ex.core.results.not_graded`` (one row that says why, no test run, score 0),
the one shape of such a record:

- :func:`unpreparable_result` / :func:`submission_result`: the submission itself keeps the exercise
  from being graded (refused, the file missing or unreadable): ``fail``, 0 of the exercise's points;
- :func:`grader_error_result`: the grading process died or hung, or the cluster sent no result:
  ``error``, the grader is to blame.
"""

from __future__ import annotations

from lumen_ex.core.catalog import Exercise
from lumen_ex.core.results import (
    Diagnosis,
    RunResult,
    SandboxInfo,
    Status,
    TestResult,
    catalog_versions,
    grader_error,
    not_graded,
)


def submission_result(ex: Exercise, reason: str, *, status: Status, sandbox: SandboxInfo, device: str,
                      seed: int = 0) -> RunResult:
    """The document of an exercise that could not be graded because of the submission itself
    (``fail``, 0 points: the file is not there, or the submission broke a rule of
    src/lumen_ex/classroom/submissions.py), with the reason."""
    test = TestResult("submission", f"{ex.path} was submitted", "submission", Status.ERROR,
                      max_score=ex.max_score, message=reason,
                      diagnosis=Diagnosis("missing", reason, hint=f"Submit your file as {ex.path}."))
    return not_graded(ex.summary(), test, status=status, max_score=ex.max_score, sandbox=sandbox, device=device,
                      seed=seed, versions=catalog_versions())


def unpreparable_result(ex: Exercise, refused: str, missing: dict[str, str], *, sandbox: SandboxInfo,
                        device: str, seed: int = 0) -> RunResult | None:
    """The document of an exercise the submission itself keeps from being graded (the whole
    submission refused, or this exercise's file missing or unreadable: fail, with the reason; the
    submission is charged, not the grader), or None when it can be graded."""
    if refused:
        return submission_result(ex, refused, status=Status.FAIL, sandbox=sandbox, device=device, seed=seed)
    if ex.slug in missing:
        return submission_result(ex, missing[ex.slug], status=Status.FAIL, sandbox=sandbox, device=device,
                                 seed=seed)
    return None


def grader_error_result(ex: Exercise, reason: str, *, sandbox: SandboxInfo, device: str, seed: int,
                        duration: float = 0.0) -> RunResult:
    """The document of a check whose grading process died or hung: status ``error``, the reason."""
    return grader_error(ex.summary(), reason, sandbox=sandbox, device=device, seed=seed, duration=duration)
