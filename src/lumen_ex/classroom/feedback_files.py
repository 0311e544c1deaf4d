"""Per-student feedback files: what a student gets back, written from the same result records.

``lumen-ex grade`` writes, for every student with at least one result, ``DIR/feedback/<student>.md``
and ``DIR/feedback/<student>.html``:

- the total (and, when a deadline was set with ``--due``, when the submission was made, how that is
  known, the due time, how late it was, the penalty and the final score: src/lumen_ex/classroom/late.py);
- for each exercise: the score, the verdict, the first failing test explained as ``lumen-ex check``
  explains it (expected vs got, the likely mistake, a hint), what the code printed there, and a
  table of every test;
- in the HTML file, the heatmap picture of each failing test that has one (the PNG that the hidden
  suite attached to the diagnosis, ``details.heatmap.png_base64``, docs/result-schema.md), embedded
  as a ``data:`` URL so the file stands alone. The Markdown file says the picture is in the HTML.

Everything shown comes from the record, and every piece of text in it that a submission could have
written (a test message, what the code printed, an exception's text, a name) goes through
src/lumen_ex/core/untrusted.py first (:func:`markdown`, :func:`code_block`, :func:`html`), so no student text
becomes a heading, a link, a tag or a script. A picture is embedded only when its bytes decode as a
PNG of at most 64 KiB, and it is re-encoded
(src/lumen_ex/feedback/pictures/__init__.py), so nothing else reaches the ``src``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from lumen_ex.classroom.late import SOURCES, duration_text, iso
from lumen_ex.core.atomic import write_atomically
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.results import RunResult, Status, TestResult
from lumen_ex.core.untrusted import code_block, encodable, html, markdown
from lumen_ex.feedback.pictures import caption, data_url, picture, pictured
from lumen_ex.feedback.text import OUTPUT_CAP, explain, points

if TYPE_CHECKING:
    from lumen_ex.classroom.gradebook import ClassReport

FEEDBACK = "feedback"
MARK = {Status.PASS: "✓", Status.FAIL: "✗", Status.ERROR: "!", Status.TIMEOUT: "⏱", Status.SKIPPED: "–"}
_UNSAFE_FILE = re.compile(r"[^\w.@+-]")


def file_stem(student: str) -> str:
    """A file name for ``student`` (letters, digits, ``. @ + - _``; never hidden, never a path)."""
    return _UNSAFE_FILE.sub("_", student).lstrip(".")[:120] or "student"


def _results(row, exercises) -> list[tuple[Exercise, RunResult]]:
    """(exercise, record) for each graded exercise of a gradebook row."""
    out = []
    for ex in exercises:
        doc = row.docs.get(ex.slug)
        if doc is not None:
            try:
                out.append((ex, RunResult.from_dict(doc)))
            except (KeyError, TypeError, ValueError):
                continue
    return out


def _late_lines(a) -> list[str]:
    """Plain sentences about the deadline (no student text in them), or [] without one."""
    if a is None or (a.due is None and a.submitted is None):
        return []
    lines = []
    if a.submitted is not None:
        lines.append(f"Submitted {iso(a.submitted)} (from {SOURCES.get(a.source, a.source)}).")
    if a.due is not None:
        lines.append(f"Due {iso(a.due)}.")
        if a.late:
            lines.append(f"Late by {duration_text(a.late_by)}: penalty {points(a.penalty)} points "
                         f"({a.percent:g} % of the points).")
        elif a.submitted is not None:
            lines.append("On time: no penalty.")
    return lines


def _total_line(row, a) -> str:
    pct = f" ({100 * row.total / row.max_total:.1f} %)" if row.max_total else ""
    line = f"Total: {points(row.total)} / {points(row.max_total)} points{pct}"
    if a is not None and a.penalty:
        line += f"; after the late penalty: {points(a.final)} / {points(row.max_total)}"
    return line + "."


# -- Markdown ----------------------------------------------------------------------------------------------


def markdown_feedback(row, exercises, assessment) -> str:
    out = [f"# Feedback for {markdown(row.display)}", "", _total_line(row, assessment), ""]
    out += [line for line in _late_lines(assessment)] + ([""] if _late_lines(assessment) else [])
    for ex, result in _results(row, exercises):
        out += [f"## Exercise {ex.number}: {markdown(ex.title)}: {points(result.score)} / "
                f"{points(result.max_score)} ({result.status.value})", "", markdown(result.message), ""]
        first = result.first_failure
        if first is not None:
            out += [f"**First failure:** {markdown(first.group)}: {markdown(first.name)}", ""]
            out += ["> " + markdown(line) for line in explain(first, with_output=False).split("\n")]
            out.append("")
            if first.output.strip():
                out += ["What your code printed:", "", code_block(first.output.strip()[:OUTPUT_CAP]), ""]
            if picture(first):
                out += ["A picture of the expected and your weights is in the HTML version of this file.", ""]
        out += ["| | group | test | score | what went wrong |", "|---|---|---|---|---|"]
        for t in result.tests:
            why = "" if t.status is Status.PASS else markdown((t.message or t.status.value)[:200])
            out.append(f"| {MARK[t.status]} | {markdown(t.group)} | {markdown(t.name)} | "
                       f"{points(t.score)}/{points(t.max_score)} | {why} |")
        out.append("")
    out.append("Seed of each check, to reproduce it: " + ", ".join(
        f"exercise {ex.number}: `lumen-ex check {ex.number} --seed {r.seed}`" for ex, r in _results(row, exercises)))
    return "\n".join(out) + "\n"


# -- HTML --------------------------------------------------------------------------------------------------

STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;line-height:1.4}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left}
pre{background:#f5f5f5;padding:.5rem;overflow-x:auto;white-space:pre-wrap}blockquote{border-left:4px solid #ccc;
margin:.5rem 0;padding-left:.8rem}.pass{color:#176b1d}.fail,.error,.timeout{color:#a4161a}.skipped{color:#666}
img{image-rendering:pixelated;max-width:100%;border:1px solid #ddd}"""


def _html_text(text: str) -> str:
    """Untrusted lines as HTML (each line escaped, joined with <br>)."""
    return "<br>".join(html(line) for line in text.split("\n"))


def _html_test_row(t: TestResult) -> str:
    why = "" if t.status is Status.PASS else html((t.message or t.status.value)[:200])
    return (f'<tr class="{t.status.value}"><td>{MARK[t.status]}</td><td>{html(t.group)}</td><td>{html(t.name)}</td>'
            f"<td>{points(t.score)}/{points(t.max_score)}</td><td>{why}</td></tr>")


def _html_exercise(ex: Exercise, result: RunResult) -> list[str]:
    out = [f'<h2>Exercise {ex.number}: {html(ex.title)}: {points(result.score)} / {points(result.max_score)} '
           f'<span class="{result.status.value}">({result.status.value})</span></h2>', f"<p>{html(result.message)}</p>"]
    first = result.first_failure
    if first is not None:
        out += [f"<p><strong>First failure:</strong> {html(first.group)}: {html(first.name)}</p>",
                f"<blockquote>{_html_text(explain(first, with_output=False))}</blockquote>"]
        if first.output.strip():
            out += ["<p>What your code printed:</p>", f"<pre>{html(first.output.strip()[:OUTPUT_CAP])}</pre>"]
    for t, png in pictured(result):
        title = html(caption(t))
        out.append(f'<figure><img src="{data_url(png)}" alt="{title}"><figcaption>{title}</figcaption></figure>')
    out += ["<table><tr><th></th><th>group</th><th>test</th><th>score</th><th>what went wrong</th></tr>",
            *(_html_test_row(t) for t in result.tests), "</table>"]
    return out


def html_feedback(row, exercises, assessment) -> str:
    name = html(row.display)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
           'style-src \'unsafe-inline\'">',
           f"<title>Feedback for {name}</title><style>{STYLE}</style></head><body>",
           f"<h1>Feedback for {name}</h1>", f"<p>{html(_total_line(row, assessment))}</p>"]
    out += [f"<p>{html(line)}</p>" for line in _late_lines(assessment)]
    for ex, result in _results(row, exercises):
        out += _html_exercise(ex, result)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# -- writing ------------------------------------------------------------------------------------------------


def write_feedback(out: Path, report: ClassReport) -> list[Path]:
    """DIR/feedback/<student>.md and .html for each student of the class report with a result."""
    written: list[Path] = []
    folder = Path(out) / FEEDBACK
    for row in report.rows:
        if not any(doc is not None for doc in row.docs.values()):
            continue
        a = report.late.get(row.student)
        stem = file_stem(row.student)
        for suffix, text in ((".md", markdown_feedback(row, report.exercises, a)),
                             (".html", html_feedback(row, report.exercises, a))):
            path = folder / f"{stem}{suffix}"
            write_atomically(path, encodable(text))
            written.append(path)
    return written
