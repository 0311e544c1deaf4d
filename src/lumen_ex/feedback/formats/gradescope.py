"""Gradescope ``results.json`` (gradescope/autograder_samples docs/specs.md; docs/classroom.md, Output formats).

Top level: ``score`` (the record's score, so Gradescope never re-adds the tests), ``execution_time``
(seconds), ``output`` (one headline), ``output_format``, ``visibility``, ``stdout_visibility``,
``extra_data`` (exercise, seed, sandbox) and ``tests``. Per test: ``name``, ``number``
(``"<exercise>.<n>"``), ``score``, ``max_score``, ``status`` (``passed`` | ``failed``), ``output``
(the diagnosis as text), ``tags`` (the scoring group), ``visibility`` and ``extra_data`` (the test's
id, status and diagnosis kind). A test's ``visibility`` is its scoring group's in the catalogue
(each exercise's exercise.toml ``[visibility]``: ``visible``, ``hidden``, ``after_due_date`` or
``after_published``; ``visible`` when not listed). Gradescope hides the total score from a student
while any test is hidden to them. A skipped test (e.g. no GPU) is marked as skipped: its name ends
in ``(skipped)``, its tags hold ``skipped``, ``extra_data.status`` is ``skipped``, it has 0 of 0
points and no ``status`` (Gradescope's statuses are only passed and failed, so it is informational),
and its ``output`` says why.

A grader error (status ``error`` in the record) scores 0 and says so in ``output``: the submission
was not graded, which Gradescope shows to the student as the output text.

Every text Gradescope shows (``output``, a test's ``name``, ``output`` and ``tags``) has its
controls and invisible characters shown, not acted on (src/lumen_ex/core/untrusted.py); names and tags
stay on one line. ``extra_data`` is data, kept as the record has it (JSON escapes it).
"""

from __future__ import annotations

import json

from lumen_ex.core.results import RunResult, Status, TestResult
from lumen_ex.core.untrusted import one_line, visible
from lumen_ex.feedback.text import explain, headline

VISIBILITY = "visible"         # every lumen-ex test name is shown to learners by `check` already


def group_visibility(result: RunResult) -> dict[str, str]:
    """Scoring group -> visibility, from the catalogue entry of the record's exercise."""
    from lumen_ex.core import catalog

    try:
        return dict(catalog.load().find(result.exercise["number"]).visibility)
    except Exception:  # noqa: BLE001  a view never fails on an unknown exercise: all visible
        return {}


def results(result: RunResult) -> dict:
    ex = result.exercise
    output = headline(result)
    if result.status is Status.ERROR:
        output += "\nThe grader could not finish, so this submission was not graded. Please tell your instructor."
    if result.sandbox.note:
        output += f"\n{result.sandbox.note}"
    seen = group_visibility(result)
    return {
        "score": round(result.score, 4),
        "execution_time": round(result.duration, 3),
        "output": visible(output),
        "output_format": "text",
        "test_output_format": "text",
        "visibility": VISIBILITY,
        "stdout_visibility": "hidden",
        "extra_data": {"exercise": ex, "status": result.status.value, "max_score": result.max_score,
                       "seed": result.seed, "sandbox": result.sandbox.backend,
                       "isolated": result.sandbox.isolated},
        "tests": [_test(ex["number"], i, t, seen.get(t.group, VISIBILITY)) for i, t in enumerate(result.tests, 1)],
    }


def _test(number: int, index: int, t: TestResult, visibility: str = VISIBILITY) -> dict:
    skipped = t.status is Status.SKIPPED
    entry = {
        "name": one_line(f"{t.group}: {t.name}" + (" (skipped)" if skipped else "")),
        "number": f"{number}.{index}",
        "score": round(t.score, 4),
        "max_score": round(t.max_score, 4),
        "output": visible(explain(t)),
        "tags": [one_line(t.group)] + (["skipped"] if skipped else []),
        "visibility": visibility,
        "extra_data": {"id": t.id, "status": t.status.value,
                       "kind": t.diagnosis.kind if t.diagnosis else None},
    }
    if t.status is not Status.SKIPPED:
        entry["status"] = "passed" if t.status is Status.PASS else "failed"
    return entry


def combine(runs: list[RunResult]) -> dict:
    """One ``results.json`` for a submission graded on several exercises (one Gradescope assignment
    covering exercises 1 and 2): scores and times add up, tests are listed exercise by exercise
    (their ``number`` already says which), and ``output`` has one headline per exercise."""
    if len(runs) == 1:
        return results(runs[0])
    parts = [results(r) for r in runs]
    return {
        "score": round(sum(p["score"] for p in parts), 4),
        "execution_time": round(sum(p["execution_time"] for p in parts), 3),
        "output": "\n".join(p["output"] for p in parts),
        "output_format": "text",
        "test_output_format": "text",
        "visibility": VISIBILITY,
        "stdout_visibility": "hidden",
        "extra_data": {"exercises": [p["extra_data"] for p in parts]},
        "tests": [t for p in parts for t in p["tests"]],
    }


def render(result: RunResult) -> str:
    return json.dumps(results(result), indent=2) + "\n"
