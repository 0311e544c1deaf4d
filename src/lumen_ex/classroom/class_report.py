"""``report.md``: the class report, a view of the gradebook (src/lumen_ex/classroom/gradebook.py).

The score distribution, the pass rate of every hidden test, the most frequent misconceptions across
the class (each student counted once per exercise) and the checks that need an instructor's look
(status ``error``), then the entries flagged, skipped or off the roster. Every name, message and hint
in it is literal Markdown text on one line (untrusted.markdown), so none can start a heading, a link
or an HTML tag.
"""

from __future__ import annotations

import statistics

from lumen_ex.classroom.gradebook import LOOK, ClassReport
from lumen_ex.core.results import points
from lumen_ex.core.untrusted import markdown, markdown_code

_md = markdown            # a heading or table cell from a submission: literal text on one line


def _pts(x: float | None) -> str:
    return "–" if x is None else points(x)


def report_markdown(report: ClassReport) -> str:
    graded = report.graded
    out = [f"# Class report: {_md(report.title)}", "",
           f"{len(graded)} of {len(report.submitted)} students graded on "
           + ", ".join(f"exercise {ex.number} ({ex.slug})" for ex in report.exercises)
           + f". Generated {report.generated} by `lumen-ex grade`.", ""]
    totals = [r.percent for r in graded if r.percent is not None]
    out += ["## Scores", "", "| | graded | mean | median | pass | fail | error | pending |",
            "|---|---|---|---|---|---|---|---|"]
    for s in report.exercise_stats():
        ex = s["exercise"]
        out.append(f"| {ex.number} {ex.slug} (of {_pts(s['max'])}) | {s['graded']} | {_pts(s['mean'])} | "
                   f"{_pts(s['median'])} | {s['pass']} | {s['fail']} | {s['error']} | {s['pending']} |")
    if totals:
        out += ["", f"Total: mean {statistics.fmean(totals):.1f} %, median {statistics.median(totals):.1f} %, "
                f"lowest {min(totals):.1f} %, highest {max(totals):.1f} %."]
    out += ["", "### Distribution of totals", "", "| total | students | |", "|---|---|---|"]
    for band, count in report.distribution():
        out.append(f"| {band} | {count} | {'█' * count} |")
    out += ["", "## Most frequent misconceptions", ""]
    if report.misconceptions:
        out += ["Each student is counted once per exercise.", "",
                "| misconception | exercise | students | share | what it means | for example |",
                "|---|---|---|---|---|---|"]
        for m in report.misconceptions:
            share = f"{100 * len(m.students) / max(len(graded), 1):.0f} %"
            names = ", ".join(m.students[:3]) + (" …" if len(m.students) > 3 else "")
            out.append(f"| {markdown_code(m.id)} | {m.exercise.number} {m.exercise.slug} | {len(m.students)} | {share} | "
                       f"{_md(m.hint)} | {_md(names)} |")
    else:
        out.append("No misconception was named in any failing test.")
    out += ["", "## Pass rate per test", "", "Hardest first within each exercise.", ""]
    for ex in report.exercises:
        rates = [r for r in report.rates if r.exercise.slug == ex.slug]
        out += [f"### {ex.number} {ex.slug}", "", "| test | group | passed | rate |", "|---|---|---|---|"]
        out += [f"| {_md(r.name)} | {_md(r.group)} | {r.passed}/{r.ran} | {100 * r.rate:.0f} % |" for r in rates]
        out.append("")
    out += ["## Checks that need a look", ""]
    if report.needs_look:
        out += ["These could not be graded (status `error`): the grader failed, the submission could not be "
                "read, or it crashed or stalled the grading process.", "", "| student | exercise | reason |",
                "|---|---|---|"]
        out += [f"| {_md(s)} | {_md(e)} | {_md(why)} |" for s, e, why in report.needs_look]
    else:
        out.append("None: every check ran to a verdict.")
    out += _entries_markdown(report)
    return "\n".join(out) + "\n"


def _entries_markdown(report: ClassReport) -> list[str]:
    """The submissions flagged for a look (two candidate files), the entries not graded, the
    roster's missing students and the submissions on no roster: each with its reason."""
    out: list[str] = []
    sections = (
        ("Submissions flagged for a look", lambda r: r.note.startswith(LOOK), lambda r: r.note[len(LOOK):]),
        ("Entries that were not graded", lambda r: r.status == "skipped", lambda r: r.note),
        ("On the roster, nothing submitted", lambda r: r.status == "missing", lambda r: r.note),
        ("Submissions that match no one on the roster", lambda r: r.note == "not on the roster",
         lambda r: f"graded as {r.student}"),
    )
    for title, chosen, why in sections:
        rows = [r for r in report.rows if chosen(r)]
        if rows:
            out += ["", f"## {title}", "", "| student | why |", "|---|---|"]
            out += [f"| {_md(r.display)} | {_md(why(r))} |" for r in rows]
    return out
