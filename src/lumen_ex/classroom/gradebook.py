"""The gradebook: the class's rows and statistics, read from the result documents in DIR/results.

Read only from the documents on disk (never from a run in memory), so a resumed, interrupted or
cluster-graded class gives the same files as one graded in a single run. :func:`build` makes the
:class:`ClassReport` that every view is written from (src/lumen_ex/classroom/outputs.py writes them all).

- ``gradebook.csv``: one row per student: ``student``, one score column per exercise (its slug),
  ``total``, ``max``, ``percent``, ``status`` (``pass``: every exercise passed; ``fail``; ``error``: a
  check could not be graded, see ``first_failure``; ``pending``: not graded yet) and
  ``first_failure`` (the first exercise that did not pass: its first failing test and the diagnosis,
  with the misconception when one was named) and ``commit`` (for a git checkout), then the
  deadline's columns (src/lumen_ex/classroom/late.py): ``submitted``, ``submitted_from``, ``due``, ``late_by``,
  ``penalty`` and ``final`` (``total`` is the raw score). Cells that came
  from a submission are neutralised against spreadsheet formula injection (untrusted.csv_cell: a
  quote before every ``= + - @`` that could start a formula, after any separator too).
- ``report.md`` (src/lumen_ex/classroom/class_report.py) and the terminal report: the score
  distribution, the pass rate of every hidden test, the most frequent misconceptions across the
  class (counted once per student and exercise, from
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
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lumen_ex.classroom.late import SOURCES, assess_class, duration_text, iso
from lumen_ex.classroom.store import load_class, load_document, result_path, submission_info
from lumen_ex.core import scores
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.explaining import most_explanatory, ranked_mistake
from lumen_ex.core.untrusted import csv_cell

PSEUDO_TESTS = ("grader", "submission", "file")   # stand-ins for a check that did not run its tests
NOT_SUBMITTED = ("skipped", "missing")        # rows with nothing graded: an entry skipped, a roster student
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
    name: str = ""                            # the name as given (``student`` is the key, results/<key>/)
    seed: str = ""                            # the seed its checks were graded with
    note: str = ""                            # skipped, ambiguous, missing, not on the roster: why

    @property
    def display(self) -> str:
        """The student's name as given ("José García"), for people to read."""
        return self.name or self.student

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
    late: dict = field(default_factory=dict)     # student -> late.Assessment (src/lumen_ex/classroom/late.py)

    @property
    def graded(self) -> list[StudentRow]:
        return [r for r in self.rows if r.status not in ("pending", *NOT_SUBMITTED)]

    @property
    def submitted(self) -> list[StudentRow]:
        """Every row of a submission (not a skipped entry, not a roster student who sent nothing)."""
        return [r for r in self.rows if r.status not in NOT_SUBMITTED]

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
            docs = [r.docs.get(ex.slug) for r in self.submitted]
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
    tests = [t for t in doc.get("tests", []) if isinstance(t, dict)]
    explaining = {m["id"] for m in doc.get("misconceptions") or [] if isinstance(m, dict) and isinstance(m.get("id"), str)}
    test = most_explanatory(tests, lambda t: (t.get("status"), (t.get("diagnosis") or {}).get("kind"),
                                              ranked_mistake(t.get("diagnosis") or {}, explaining)))
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
    names = _names(out)
    for student in students:
        row = StudentRow(student, {}, commit=_commit(out, student), name=names.get(student, ""))
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
                needs_look.append((row.display, ex.path, doc.get("message", "")))
            row.seed = row.seed or str(doc.get("seed", ""))
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
                m.students.append(row.display)
        _exact_totals(row, exercises)
        _flag_ambiguous(out, row, exercises)
        if "pending" in statuses:
            row.status = "pending"
        elif "error" in statuses:
            row.status = "error"
        elif all(s == "pass" for s in statuses):
            row.status = "pass"
        else:
            row.status = "fail"
        rows.append(row)
    rows = class_rows(out, rows, exercises)
    order = {ex.slug: i for i, ex in enumerate(exercises)}
    return ClassReport(
        title=title, exercises=exercises, rows=rows,
        rates=sorted(rates.values(), key=lambda r: (order[r.exercise.slug], r.rate, r.id)),
        misconceptions=sorted(misc.values(), key=lambda m: (-len(m.students), order[m.exercise.slug], m.id)),
        needs_look=needs_look,
        late=_late(out, rows),
        generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )


def _exact_totals(row: StudentRow, exercises: list[Exercise]) -> None:
    """The row's total and maximum as exact sums of its exercises' (src/lumen_ex/core/scores.py): the
    scores in the row always add up to its total, and the total never exceeds the maximum."""
    docs = [row.docs.get(ex.slug) for ex in exercises]
    row.max_total = scores.total(d["max_score"] or ex.max_score if d is not None else ex.max_score
                                 for d, ex in zip(docs, exercises))
    row.total = min(scores.total(d["score"] for d in docs if d is not None), row.max_total)


LOOK = "needs a look: "


def _flag_ambiguous(out: Path, row: StudentRow, exercises: list[Exercise]) -> None:
    """A submission with two candidate files for an exercise is flagged for a look (its note)."""
    ambiguous = submission_info(out, row.student).get("ambiguous") or {}
    for ex in exercises:
        why = ambiguous.get(ex.slug) if isinstance(ambiguous, dict) else None
        if isinstance(why, str) and why:
            row.note = LOOK + why


def _names(out: Path) -> dict[str, str]:
    """Key -> the name as given, from DIR/class.json (src/lumen_ex/classroom/store.py)."""
    entries = load_class(out).get("entries") or []
    return {e["key"]: e["name"] for e in entries if isinstance(e, dict) and "key" in e and "name" in e}


def class_rows(out: Path, rows: list[StudentRow], exercises: list[Exercise]) -> list[StudentRow]:
    """The graded rows, put in the roster's order when there is one (``missing`` for an enrolled
    student with no submission, a note on submissions that match no one), then a ``skipped`` row
    for every entry of SUBMISSIONS that was not graded, with the reason (DIR/class.json)."""
    data = load_class(out)
    roster = data.get("roster")
    if isinstance(roster, dict):
        rows = _roster_rows(rows, roster, exercises)
    blank = {ex.slug: None for ex in exercises}
    for item in data.get("skipped") or []:
        if isinstance(item, dict):
            rows.append(StudentRow(str(item.get("entry", "")), dict(blank), status="skipped",
                                   name=str(item.get("entry", "")), note=str(item.get("reason", ""))))
    return rows


def _roster_rows(rows: list[StudentRow], roster: dict, exercises: list[Exercise]) -> list[StudentRow]:
    by_key = {r.student: r for r in rows}
    ordered: list[StudentRow] = []
    for student in roster.get("students") or []:
        found = [by_key.pop(k) for k in student.get("keys") or [] if k in by_key]
        for r in found:         # the name stays as the submission gives it
            if len(found) > 1:
                r.note = r.note or "several submissions match this student on the roster"
        if not found and not student.get("keys"):
            ordered.append(StudentRow("", {ex.slug: None for ex in exercises}, status="missing",
                                      name=str(student.get("name", "")), note="on the roster, nothing was submitted",
                                      max_total=scores.total(ex.max_score for ex in exercises)))
        ordered += found
    for r in by_key.values():
        if r.student in (roster.get("unmatched") or []):
            r.note = r.note or "not on the roster"
        ordered.append(r)
    return ordered


def _commit(out: Path, student: str) -> str:
    commit = submission_info(out, student).get("commit", "")
    return commit if isinstance(commit, str) else ""


def _late(out: Path, rows: list[StudentRow]) -> dict:
    """Student -> the deadline's effect on the total (src/lumen_ex/classroom/late.py; no penalty without --due)."""
    return assess_class(out, [(r.student, r.total, r.max_total) for r in rows])


# -- gradebook.csv ---------------------------------------------------------------------------------


_safe = csv_cell          # a cell from a submission: one line, never a formula


def _num(x: float) -> str:
    return f"{x:.4f}".rstrip("0").rstrip(".")


def gradebook_csv(report: ClassReport) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["student", "key", *(ex.slug for ex in report.exercises), "total", "max", "percent", "status",
                "first_failure", "commit", "seed", "note", *LATE_COLUMNS])
    for r in report.rows:
        scores = ["" if (doc := r.docs[ex.slug]) is None else _num(doc["score"]) for ex in report.exercises]
        pct = "" if r.percent is None or r.status in ("pending", *NOT_SUBMITTED) else f"{r.percent:.1f}"
        total = "" if r.status in NOT_SUBMITTED else _num(r.total)
        most = "" if r.status == "skipped" else _num(r.max_total)
        w.writerow([_safe(r.display), _safe(r.student), *scores, total, most, pct, r.status,
                    _safe(r.first_failure), _safe(r.commit), r.seed, _safe(r.note),
                    *_late_cells(report.late.get(r.student), r)])
    return buf.getvalue()


# The deadline's columns (src/lumen_ex/classroom/late.py): when the student submitted and how that is known, the
# due time, how late, the penalty in points and the final score (``total`` is the raw score).
LATE_COLUMNS = ("submitted", "submitted_from", "due", "late_by", "penalty", "final")


def _late_cells(a, r: StudentRow) -> list[str]:
    if a is None or r.status in ("pending", *NOT_SUBMITTED):
        return ["", "", "", "", "", ""]
    late = duration_text(a.late_by) if a.late else ""
    return [iso(a.submitted), SOURCES.get(a.source, a.source), iso(a.due), late, _num(a.penalty), _num(a.final)]
