"""PrairieLearn external grader ``results.json`` (PrairieLearn docs/externalGrading.md; docs/classroom.md, Output formats).

``score`` is the record's score over its maximum, in [0, 1]. ``gradable`` is false where
PrairieLearn's documentation says a submission is "invalid, not gradable" (docs/externalGrading.md:
no points, no attempt charged, ``format_errors`` shown): the exercise's file is missing, was refused
(not a regular file, too large) or does not parse; and when the grader itself could not finish
(record status ``error``), which is no fault of the student's either (:func:`ungradable_reason`).
``images`` holds the record's pictures (the heatmap PNG of each failing test that has one, checked
by src/lumen_ex/feedback/pictures/__init__.py) as ``{"label", "url": "data:image/png;base64,..."}``, at the top
level and on the test they belong to. ``message`` is the record's one-line message; ``output`` the headline and any
sandbox note. Every test has ``name``, ``description`` (its group and id), ``points``,
``max_points``, ``message`` (the diagnosis as text) and ``output`` (what the learner's code printed),
so the per-test points display stays on (it is disabled when any test lacks points). A skipped test
has 0 of 0 points, which PrairieLearn renders as neutral.

Every text PrairieLearn shows has its controls and invisible characters shown, not acted on
(src/lumen_ex/core/untrusted.py); a test's name and description stay on one line.
"""

from __future__ import annotations

import json

from lumen_ex.core.results import RunResult, Status, TestResult
from lumen_ex.core.untrusted import one_line, visible
from lumen_ex.feedback.pictures import caption, data_url, pictured
from lumen_ex.feedback.text import capped, explain, headline


def ungradable_reason(result: RunResult) -> str | None:
    """Why PrairieLearn should not grade this submission at all, or None when it can be graded:
    the file is missing or refused, it does not parse, or the grader could not finish."""
    if result.status is Status.ERROR:
        return f"the grader could not finish: {result.message}"
    for t in result.tests:
        diag = t.diagnosis
        if diag is None:
            continue
        if diag.kind in ("missing", "file") and t.id in ("submission", "file"):
            return diag.summary or t.message
        if diag.kind == "import" and diag.summary.startswith("your file does not parse"):
            line = diag.details.get("line")
            return diag.summary + (f" (line {line})" if type(line) is int else "")
    return None


def _images(pics) -> list[dict]:
    return [{"label": caption(t), "url": data_url(png)} for t, png in pics]


def results(result: RunResult) -> dict:
    why = ungradable_reason(result)
    gradable = why is None
    pics = pictured(result)
    doc = {
        "gradable": gradable,
        "score": round(result.score / result.max_score, 6) if result.max_score > 0 and gradable else 0.0,
        "message": visible(result.message),
        "output": visible(headline(result) + (f"\n{result.sandbox.note}" if result.sandbox.note else "")),
        "tests": [_test(t, [p for p in pics if p[0] is t]) for t in result.tests],
    }
    if pics:
        doc["images"] = _images(pics)
    if not gradable:
        doc["format_errors"] = [visible(why)]
    return doc


def _test(t: TestResult, pics=()) -> dict:
    output = capped(t.output.strip())
    entry = {
        "name": one_line(t.name),
        "description": one_line(f"{t.group} · {t.id}"),
        "points": round(t.score, 4),
        "max_points": round(t.max_score, 4),
        "message": visible(explain(t, with_output=False)),
        "output": visible(output),
    }
    if pics:
        entry["images"] = _images(pics)
    return entry


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
    images = [i for p in parts for i in p.get("images", [])]
    if images:
        doc["images"] = images
    if not gradable:
        doc["format_errors"] = [e for p in parts for e in p.get("format_errors", [])]
    return doc


def render(result: RunResult) -> str:
    return json.dumps(results(result), indent=2) + "\n"
