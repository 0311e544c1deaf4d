"""The gradebook and the class report: views of the result documents in DIR/results.

Read only from the documents on disk (never from a run in memory), so a resumed, interrupted or
cluster-graded class gives the same files as one graded in a single run.

- ``gradebook.csv``: one row per student: ``student``, one score column per exercise (its slug),
  ``total``, ``max``, ``percent``, ``status`` (``pass``: every exercise passed; ``fail``; ``error``: a
  check could not be graded, see ``first_failure``; ``pending``: not graded yet) and
  ``first_failure`` (the first exercise that did not pass: its first failing test and the diagnosis,
  with the misconception when one was named) and ``commit`` (for a git checkout). Cells that came
  from a submission are neutralised against spreadsheet formula injection (untrusted.csv_cell: a
  quote before every ``= + - @`` that could start a formula, after any separator too).
- ``report.md`` and the terminal report: the score distribution, the pass rate of every hidden test,
  the most frequent misconceptions across the class (counted once per student and exercise, from
  the run-level ``misconceptions`` summary of each document and ``diagnosis.misconception`` of its
  failing tests), and the checks that need an instructor's look (status ``error``). Every name,
  message and hint in it is literal Markdown text on one line (untrusted.markdown), so none can
  start a heading, a link or an HTML tag.

Both files are always written, whatever the documents hold: a lone surrogate is replaced
(untrusted.encodable) instead of stopping the writer.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .atomic import write_atomically
from .catalog import Exercise
from .grade import load_document, result_path
from .results import points
from .untrusted import csv_cell, encodable, markdown, markdown_code

PSEUDO_TESTS = ("grader", "submission")      # stand-ins for a check that did not run its tests
BINS = 10


@dataclass
class StudentRow:
    student: str
    docs: dict[str, dict | None]              # exercise slug -> document (None: not graded yet)
    total: float = 0.0
    max_total: float = 0.0
    status: str = "pending"
    first_failure: str = ""
    commit: str = ""

    @property
    def percent(self) -> float | None:
        return 100.0 * self.total / self.max_total if self.max_total else None


@dataclass
class TestRate:
    exercise: Exercise
    id: str
    name: str
    group: str
    passed: int = 0
    ran: int = 0

    @property
    def rate(self) -> float:
        return self.passed / self.ran if self.ran else 0.0


@dataclass
class Misconception:
    exercise: Exercise
    id: str
    hint: str
    students: list[str] = field(default_factory=list)


@dataclass
class ClassReport:
    title: str
    exercises: list[Exercise]
    rows: list[StudentRow]
    rates: list[TestRate]
    misconceptions: list[Misconception]
    needs_look: list[tuple[str, str, str]]          # (student, exercise path, reason)
    generated: str = ""

    @property
    def graded(self) -> list[StudentRow]:
        return [r for r in self.rows if r.status != "pending"]

    def distribution(self) -> list[tuple[str, int]]:
        """Students per 10-point band of the total percentage (the last band includes 100 %)."""
        counts = [0] * BINS
        for r in self.graded:
            if r.percent is not None:
                counts[min(int(r.percent // (100 / BINS)), BINS - 1)] += 1
        width = 100 // BINS
        return [(f"{i * width}–{(i + 1) * width} %", counts[i]) for i in reversed(range(BINS))]

    def exercise_stats(self) -> list[dict]:
        out = []
        for ex in self.exercises:
            docs = [r.docs.get(ex.slug) for r in self.rows]
            scores = [d["score"] for d in docs if d is not None]
            statuses = Counter(d["status"] for d in docs if d is not None)
            out.append({"exercise": ex, "graded": len(scores), "max": ex.max_score,
                        "mean": statistics.fmean(scores) if scores else None,
                        "median": statistics.median(scores) if scores else None,
                        "pass": statuses.get("pass", 0), "fail": statuses.get("fail", 0),
                        "error": statuses.get("error", 0), "pending": len(docs) - len(scores)})
        return out


def misconceptions_of(doc: dict) -> dict[str, str]:
    """Misconception id -> explanation, for one document: the run-level ``misconceptions`` summary
    (``[{"id", "sentence", ...}]``) when present, and ``diagnosis.misconception`` of failing tests."""
    found: dict[str, str] = {}
    summary = doc.get("misconceptions")
    for entry in summary if isinstance(summary, list) else ():
        name = entry.get("id") if isinstance(entry, dict) else entry
        sentence = entry.get("sentence") if isinstance(entry, dict) else ""
        if isinstance(name, str) and name:
            found[name] = sentence if isinstance(sentence, str) else ""
    for t in doc.get("tests", []):
        diag = t.get("diagnosis") or {}
        name = diag.get("misconception")
        if t.get("status") not in ("pass", "skipped") and isinstance(name, str) and name:
            if not found.get(name):
                found[name] = diag.get("hint") or ""
    return found


def first_failure(ex: Exercise, doc: dict) -> str:
    """'01-attention/attention.py: values match the reference [4d]: values: ... (misconception: no-scale)'."""
    test = next((t for t in doc.get("tests", []) if t.get("status") not in ("pass", "skipped")), None)
    if test is None:
        return f"{ex.path}: {doc.get('message', '')}"
    diag = test.get("diagnosis") or {}
    text = diag.get("summary") or test.get("message") or test.get("status")
    where = "" if test.get("id") in PSEUDO_TESTS else f"{test.get('name')}: "
    line = f"{ex.path}: {where}{text}"
    if diag.get("misconception"):
        line += f" (misconception: {diag['misconception']})"
    return line


def build(out: Path, students: list[str], exercises: list[Exercise], title: str) -> ClassReport:
    rows: list[StudentRow] = []
    rates: dict[tuple[str, str], TestRate] = {}
    misc: dict[tuple[str, str], Misconception] = {}
    needs_look: list[tuple[str, str, str]] = []
    for student in students:
        row = StudentRow(student, {}, commit=_commit(out, student))
        statuses = []
        for ex in exercises:
            doc = load_document(result_path(out, student, ex))
            row.docs[ex.slug] = doc
            if doc is None:
                statuses.append("pending")
                row.max_total += ex.max_score
                continue
            statuses.append(doc["status"])
            row.total += doc["score"]
            row.max_total += doc["max_score"] or ex.max_score
            if doc["status"] != "pass" and not row.first_failure:
                row.first_failure = first_failure(ex, doc)
            if doc["status"] == "error":
                needs_look.append((student, ex.path, doc.get("message", "")))
            for t in doc.get("tests", []):
                if t.get("id") in PSEUDO_TESTS or t.get("status") == "skipped":
                    continue
                rate = rates.setdefault((ex.slug, t["id"]), TestRate(ex, t["id"], t.get("name", t["id"]),
                                                                      t.get("group", "")))
                rate.ran += 1
                rate.passed += t.get("status") == "pass"
            for name, hint in misconceptions_of(doc).items():
                m = misc.setdefault((ex.slug, name), Misconception(ex, name, hint))
                m.hint = m.hint or hint
                m.students.append(student)
        row.total = round(row.total, 4)
        row.max_total = round(row.max_total, 4)
        if "pending" in statuses:
            row.status = "pending"
        elif "error" in statuses:
            row.status = "error"
        elif all(s == "pass" for s in statuses):
            row.status = "pass"
        else:
            row.status = "fail"
        rows.append(row)
    order = {ex.slug: i for i, ex in enumerate(exercises)}
    return ClassReport(
        title=title, exercises=exercises, rows=rows,
        rates=sorted(rates.values(), key=lambda r: (order[r.exercise.slug], r.rate, r.id)),
        misconceptions=sorted(misc.values(), key=lambda m: (-len(m.students), order[m.exercise.slug], m.id)),
        needs_look=needs_look,
        generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )


def _commit(out: Path, student: str) -> str:
    from .grade import RESULTS, SUBMISSION_INFO

    try:
        commit = json.loads((Path(out) / RESULTS / student / SUBMISSION_INFO).read_text()).get("commit", "")
    except (OSError, ValueError, AttributeError):
        return ""
    return commit if isinstance(commit, str) else ""


# -- gradebook.csv ---------------------------------------------------------------------------------


_safe = csv_cell          # a cell from a submission: one line, never a formula


def _num(x: float) -> str:
    return f"{x:.4f}".rstrip("0").rstrip(".")


def gradebook_csv(report: ClassReport) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["student", *(ex.slug for ex in report.exercises), "total", "max", "percent", "status",
                "first_failure", "commit"])
    for r in report.rows:
        scores = ["" if r.docs[ex.slug] is None else _num(r.docs[ex.slug]["score"]) for ex in report.exercises]
        pct = "" if r.percent is None or r.status == "pending" else f"{r.percent:.1f}"
        w.writerow([_safe(r.student), *scores, _num(r.total), _num(r.max_total), pct, r.status,
                    _safe(r.first_failure), _safe(r.commit)])
    return buf.getvalue()


# -- report.md -------------------------------------------------------------------------------------


_md = markdown            # a heading or table cell from a submission: literal text on one line


def _pts(x: float | None) -> str:
    return "–" if x is None else points(x)


def report_markdown(report: ClassReport) -> str:
    graded = report.graded
    out = [f"# Class report: {_md(report.title)}", "",
           f"{len(graded)} of {len(report.rows)} students graded on "
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
    return "\n".join(out) + "\n"


def write_outputs(out: Path, students: list[str], exercises: list[Exercise], title: str,
                  formats: tuple[str, ...] = ()) -> ClassReport:
    """Write gradebook.csv, report.md and the extra per-student format files; return the report."""
    report = build(out, students, exercises, title)
    write_atomically(out / "gradebook.csv", encodable(gradebook_csv(report)))
    write_atomically(out / "report.md", encodable(report_markdown(report)))
    if formats:
        from lumen_ex import formats as formats_mod
        from lumen_ex.results import RunResult

        for row in report.rows:
            for ex in exercises:
                doc = row.docs.get(ex.slug)
                if doc is None:
                    continue
                result = RunResult.from_dict(doc)
                for name in formats:
                    fmt = formats_mod.get(name)
                    if fmt.name == "json":
                        continue        # the result document itself
                    path = result_path(out, row.student, ex).with_suffix(fmt.suffix)
                    write_atomically(path, encodable(fmt.render(result)))
    return report
