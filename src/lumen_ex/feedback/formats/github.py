"""GitHub Actions: workflow annotations, a Markdown job summary, and the Classroom runner result.

- :func:`render` is what ``lumen-ex check N --format github`` prints: a collapsed group with one
  line per test, an ``::error file=...,line=...,title=...::`` annotation per distinct failure (tests
  that fail the same way at the same line, such as every test after a syntax error, share one
  annotation that counts them; at most :data:`MAX_ANNOTATIONS`, as GitHub shows only ten errors per
  step), and a ``::notice`` with the points.
- :func:`summary_markdown` is appended to ``$GITHUB_STEP_SUMMARY`` by :func:`publish`.
- :func:`classroom_result` is the GitHub Classroom autograding runner result (the command-grader
  shape of classroom-resources/autograding-command-grader, docs/classroom.md (Output formats, github): ``version``,
  ``status``, ``max_score``, ``tests[]`` with ``name``, ``status``, ``score``, ``message``,
  ``test_code``, ``filename``, ``line_no``, ``duration`` in ms). :func:`publish` writes it base64
  encoded as the step output ``result`` (``$GITHUB_OUTPUT``), which is what
  classroom-resources/autograding-grading-reporter reads from ``<STEP-ID>_RESULTS``. Skipped tests
  (0 of 0 points) are left out of it: the runner format has no status for them.

Messages are escaped as the Actions toolkit escapes them, so learner text (an exception message)
can never start a workflow command of its own; what the learner's code printed appears only in
the job summary, inside a code block. Before that, all text from the record is neutralised by
src/lumen_ex/core/untrusted.py: controls and invisible characters are shown (the log viewer runs ANSI
escapes), names and titles are kept on one line, and the job summary's Markdown is escaped.
"""

from __future__ import annotations

import base64
import json
from typing import Mapping

from lumen_ex.core.results import RunResult, Status
from lumen_ex.core.untrusted import code_block, encodable, markdown, one_line, visible
from lumen_ex.feedback.text import OUTPUT_CAP, exercise_path, explain, points, source_line

MAX_ANNOTATIONS = 10
MARK = {Status.PASS: "✓", Status.FAIL: "✗", Status.ERROR: "!", Status.TIMEOUT: "⏱", Status.SKIPPED: "-"}


def escape_data(text: str) -> str:
    """A workflow command's message: controls shown (newlines kept), then ``%``, CR and LF escaped."""
    return visible(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: on one line, and ``%``, ``:`` and ``,`` escaped, so
    it can neither end the property list (``::``) nor start another property."""
    return escape_data(one_line(text)).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, **props) -> str:
    """``::name key=value,...::message`` with both parts escaped (escape_data, escape_property)."""
    fields = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v not in (None, ""))
    return f"::{name}{' ' + fields if fields else ''}::{escape_data(message)}"


def _title(result: RunResult) -> str:
    ex = result.exercise
    return f"lumen-ex check {ex['number']} ({ex['slug']})"


def distinct_failures(failing: list) -> list[list]:
    """The failing tests grouped by what an annotation would say (the line and the explanation),
    in the order of their first test: one syntax error is one group, not one per test."""
    groups: dict[tuple, list] = {}
    for t in failing:
        groups.setdefault((source_line(t), explain(t, with_output=False)), []).append(t)
    return list(groups.values())


def annotation_commands(result: RunResult) -> list[str]:
    """The workflow commands that become annotations: failures first, then the score notice."""
    lines: list[str] = []
    path = exercise_path(result)
    failing = [t for t in result.tests if t.status not in (Status.PASS, Status.SKIPPED)]
    if result.status is Status.ERROR:
        lines.append(command("error", f"{result.message}. The grader itself failed: this is not your code's fault.",
                             title=f"{_title(result)}: the grader could not finish"))
        failing = [t for t in failing if not (t.diagnosis and t.diagnosis.kind == "grader")]
    groups = distinct_failures(failing)
    for tests in groups[:MAX_ANNOTATIONS]:
        t = tests[0]
        more = f" (and {len(tests) - 1} more tests that fail the same way)" if len(tests) > 1 else ""
        lines.append(command("error", explain(t, with_output=False), file=path, line=source_line(t),
                             title=f"{_title(result)}: {t.group}: {t.name}{more}"))
    if len(groups) > MAX_ANNOTATIONS:
        rest = sum(len(g) for g in groups[MAX_ANNOTATIONS:])
        lines.append(command("warning", f"{rest} more tests did not pass: see the job summary", title=_title(result)))
    lines.append(command("notice", f"{result.message}; seed {result.seed}; sandbox {result.sandbox.backend}",
                         title=f"{_title(result)}: Points {points(result.score)}/{points(result.max_score)}"))
    return lines


def log_lines(result: RunResult) -> list[str]:
    """A readable one-line-per-test listing for the job log (each line starts with its mark)."""
    out = []
    for t in result.tests:
        why = "" if t.status is Status.PASS else f"  {(t.message or t.status.value).splitlines()[0][:160]}"
        out.append(one_line(f"{MARK[t.status]} {t.group}: {t.name}  {points(t.score)}/{points(t.max_score)}{why}"))
    return out


def render(result: RunResult) -> str:
    ex = result.exercise
    lines = [f"::group::lumen-ex check {ex['number']} · {escape_data(ex['title'])} · "
             f"{points(result.score)}/{points(result.max_score)}"]
    lines += [escape_data(line) for line in log_lines(result)]
    lines.append("::endgroup::")
    lines += annotation_commands(result)
    return "\n".join(lines) + "\n"


# -- job summary ---------------------------------------------------------------------------------


_cell = markdown          # a table cell, heading or quoted line: one line of literal Markdown text


def summary_markdown(result: RunResult) -> str:
    ex = result.exercise
    mark = {Status.PASS: "✅", Status.FAIL: "❌"}.get(result.status, "⚠️")
    passed = sum(t.status is Status.PASS for t in result.tests)
    counted = sum(t.status is not Status.SKIPPED for t in result.tests)
    iso = "isolated" if result.sandbox.isolated else "NOT isolated"
    out = [f"### {mark} lumen-ex check {ex['number']} · {_cell(ex['title'])}: "
           f"{points(result.score)} / {points(result.max_score)} points", "",
           f"{passed} of {counted} tests passed"
           f"{' · ' + _cell(result.message) if result.status is Status.ERROR else ''} · seed {result.seed} · "
           f"sandbox {_cell(result.sandbox.backend)} ({iso}) · {_cell(result.device)}", ""]
    first = result.first_failure
    if first is not None:
        out += [f"**First failure:** {_cell(first.group)}: {_cell(first.name)}", ""]
        out += ["> " + _cell(line) for line in explain(first, with_output=False).split("\n")]
        if first.output.strip():
            out += ["", "What your code printed:", "", code_block(first.output.strip()[:OUTPUT_CAP])]
        out.append("")
    out += ["| | group | test | score | why |", "|---|---|---|---|---|"]
    for t in result.tests:
        why = "" if t.status is Status.PASS else _cell((t.message or t.status.value)[:200])
        out.append(f"| {MARK[t.status]} | {_cell(t.group)} | {_cell(t.name)} | "
                   f"{points(t.score)}/{points(t.max_score)} | {why} |")
    return "\n".join(out) + "\n\n"


# -- GitHub Classroom runner result --------------------------------------------------------------

_RUNNER_STATUS = {Status.PASS: "pass", Status.FAIL: "fail", Status.ERROR: "error", Status.TIMEOUT: "error"}


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 4)


def classroom_result(result: RunResult) -> dict:
    path = exercise_path(result)
    n = result.exercise["number"]
    return {
        "version": 1,
        "status": {Status.PASS: "pass", Status.FAIL: "fail"}.get(result.status, "error"),
        "max_score": _number(result.max_score),
        "tests": [{
            "name": one_line(f"{t.group}: {t.name}"),
            "status": _RUNNER_STATUS[t.status],
            "score": _number(t.score),
            "message": visible(explain(t, with_output=False)),
            "test_code": one_line(f"lumen-ex check {n} --seed {result.seed}  # {t.id}"),
            "filename": path,
            "line_no": source_line(t) or 0,
            "duration": int(round(t.duration * 1000)),
        } for t in result.tests if t.status is not Status.SKIPPED],
    }


def encoded_result(result: RunResult) -> str:
    """base64 of the compact runner-result JSON, as the Classroom graders put it in ``result``."""
    return base64.b64encode(json.dumps(classroom_result(result), separators=(",", ":")).encode()).decode()


def publish(result: RunResult, environ: Mapping[str, str]) -> None:
    """Append the job summary and the step outputs, where the Actions runner asks for them."""
    summary = environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(encodable(summary_markdown(result)))
    output = environ.get("GITHUB_OUTPUT")
    if output:
        with open(output, "a", encoding="utf-8") as f:
            f.write(f"result={encoded_result(result)}\n"
                    f"score={points(result.score)}\nmax_score={points(result.max_score)}\n")
