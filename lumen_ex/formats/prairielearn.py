"""PrairieLearn external grader ``results.json`` (PrairieLearn docs/externalGrading.md, formats.md 1.3).

``score`` is the record's score over its maximum, in [0, 1]. ``gradable`` is false only when the
grader itself could not finish (record status ``error``): PrairieLearn then charges no attempt and
shows ``format_errors``. ``message`` is the record's one-line message; ``output`` the headline and any
sandbox note. Every test has ``name``, ``description`` (its group and id), ``points``,
``max_points``, ``message`` (the diagnosis as text) and ``output`` (what the learner's code printed),
so the per-test points display stays on (it is disabled when any test lacks points). A skipped test
has 0 of 0 points, which PrairieLearn renders as neutral.

Every text PrairieLearn shows has its controls and invisible characters shown, not acted on
(lumen_ex/untrusted.py); a test's name and description stay on one line.
"""

from __future__ import annotations

import json

from lumen_ex.results import RunResult, Status, TestResult
from lumen_ex.untrusted import one_line, visible

from ._text import capped, explain, headline


def results(result: RunResult) -> dict:
    gradable = result.status is not Status.ERROR
    doc = {
        "gradable": gradable,
        "score": round(result.score / result.max_score, 6) if result.max_score > 0 and gradable else 0.0,
        "message": visible(result.message),
        "output": visible(headline(result) + (f"\n{result.sandbox.note}" if result.sandbox.note else "")),
        "tests": [_test(t) for t in result.tests],
    }
    if not gradable:
        doc["format_errors"] = [visible(f"the grader could not finish: {result.message}")]
    return doc


def _test(t: TestResult) -> dict:
    output = capped(t.output.strip())
    return {
        "name": one_line(t.name),
        "description": one_line(f"{t.group} · {t.id}"),
        "points": round(t.score, 4),
        "max_points": round(t.max_score, 4),
        "message": visible(explain(t, with_output=False)),
        "output": visible(output),
    }


def combine(runs: list[RunResult]) -> dict:
    """One ``results.json`` for a question graded on several exercises: the score is the points won
    over the points possible across them, and the question is gradable only when every exercise was
    (a grader error anywhere charges the student no attempt)."""
    if len(runs) == 1:
        return results(runs[0])
    parts = [results(r) for r in runs]
    gradable = all(p["gradable"] for p in parts)
    possible = sum(r.max_score for r in runs)
    doc = {
        "gradable": gradable,
        "score": round(sum(r.score for r in runs) / possible, 6) if possible > 0 and gradable else 0.0,
        "message": visible("; ".join(f"exercise {r.exercise['number']}: {r.message}" for r in runs)),
        "output": "\n".join(p["output"] for p in parts),
        "tests": [t for p in parts for t in p["tests"]],
    }
    if not gradable:
        doc["format_errors"] = [e for p in parts for e in p.get("format_errors", [])]
    return doc


def render(result: RunResult) -> str:
    return json.dumps(results(result), indent=2) + "\n"
