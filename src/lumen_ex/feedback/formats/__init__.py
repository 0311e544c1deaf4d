"""Output formats: each one a pure view of the one result record (lumen_ex.core.results.RunResult).

A writer reads the record and never re-derives a verdict or a score: the statuses, points and
messages are the record's own. ``lumen-ex check --format NAME`` prints :func:`render`;
``lumen-ex grade --format NAME`` writes it beside each student's result document. Only the
``github`` format has side effects, and only in :func:`publish`: it appends the job summary to
``$GITHUB_STEP_SUMMARY`` and the Classroom runner result to ``$GITHUB_OUTPUT`` when those are set.

Each writer names its platform's own source for the fields; docs/classroom.md (Output formats) shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from lumen_ex.core.errors import UsageError
from lumen_ex.core.results import RunResult
from lumen_ex.feedback.formats import github, gradescope, junit, prairielearn


@dataclass(frozen=True)
class Format:
    name: str
    suffix: str                                  # file name suffix when `grade` writes it
    description: str
    render: Callable[[RunResult], str]
    publish: Callable[[RunResult, Mapping[str, str]], None] | None = None


def _json(result: RunResult) -> str:
    """The record itself, its text exactly as it came: ``json.dumps`` writes every control and
    non-ASCII character (a lone surrogate too) as a ``\\uXXXX`` escape, so the output is plain ASCII."""
    return result.to_json() + "\n"


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("json", ".json", "the lumen-ex result document (docs/result-schema.md)", _json),
    Format("junit", ".junit.xml", "JUnit XML, for any CI that shows test reports", junit.render),
    Format("gradescope", ".gradescope.json", "Gradescope results.json", gradescope.render),
    Format("github", ".github.txt", "GitHub Actions annotations, job summary and Classroom runner result",
           github.render, github.publish),
    Format("prairielearn", ".prairielearn.json", "PrairieLearn external grader results.json",
           prairielearn.render),
)}
NAMES = tuple(FORMATS)


def get(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise UsageError(f"unknown format {name!r}", f"Choose one of: {', '.join(NAMES)}") from None


def emit(name: str, result: RunResult, environ: Mapping[str, str] | None = None) -> str:
    """The text to print for ``result`` in format ``name``, after the format's side effects (if any)."""
    fmt = get(name)
    if fmt.publish is not None and environ is not None:
        fmt.publish(result, environ)
    return fmt.render(result)
