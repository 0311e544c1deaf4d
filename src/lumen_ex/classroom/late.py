"""Deadlines and late penalties: when a student submitted, and what lateness costs.

    lumen-ex grade SUBMISSIONS --all --out DIR --due 2026-03-01T23:59 \\
        --late-penalty 10 --late-per day --late-cap 50 --grace 15m --extensions extensions.csv

The policy (:class:`LatePolicy`): a submission later than its due time (plus the grace period)
loses ``penalty`` percent of the exercise points for every day (or hour) or part of one it is late,
at most ``cap`` percent, and never more than the student scored. A student's own due time comes
from the extensions CSV (columns ``student`` and either ``due``, a new due time, or ``days`` /
``hours``, extra time). The policy is saved in DIR/late-policy.json, so a rerun without ``--due``
keeps it.

When a student submitted (:func:`submission_time`), from the first of these that is there:

1. ``submission_metadata.json`` at the top of the submission (Gradescope's file: ``created_at``);
2. the commit a git checkout is at (its committer time, read from ``.git`` without running git);
3. the newest member of a zip (zips keep the local time of the machine that made them, without a
   time zone: it is read in the time zone of the due time);
4. the newest file of a folder (its modification time).

Its source is recorded beside the results (DIR/results/<student>/submitted.json) and shown in the
gradebook and the feedback files. Everything is read through src/lumen_ex/core/bounded.py (regular files
only, size caps) and looking through a folder is bounded by src/lumen_ex/classroom/submission_limits.py's Budget.

Every function that decides a penalty is pure: the same times and scores give the same result.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from lumen_ex.classroom.git_checkout import commit_object, committer_time, read_git_commit
from lumen_ex.classroom.store import RESULTS
from lumen_ex.classroom.submission_limits import SKIP_DIRS, Budget, SubmissionRefused, list_dir
from lumen_ex.classroom.zips import open_zip
from lumen_ex.core.atomic import write_atomically
from lumen_ex.core.bounded import NotReadable, read_regular

POLICY_FILE = "late-policy.json"
TIME_FILE = "submitted.json"
METADATA = "submission_metadata.json"
MAX_METADATA_BYTES = 1 << 20
PERIODS = {"day": dt.timedelta(days=1), "hour": dt.timedelta(hours=1)}

SOURCES = {
    "gradescope": "Gradescope's submission_metadata.json",
    "git": "the git commit",
    "zip": "the zip's newest member",
    "folder": "the folder's newest file",
    "unknown": "unknown",
}


# -- times -------------------------------------------------------------------------------------------


def local_zone() -> dt.tzinfo:
    zone = dt.datetime.now().astimezone().tzinfo
    assert zone is not None     # astimezone() always gives an aware time
    return zone


def parse_time(text: str, zone: dt.tzinfo | None = None) -> dt.datetime:
    """An ISO 8601 time (``2026-03-01T23:59``, ``2026-03-01 23:59+01:00``, ``...Z``); without an
    offset it is read in ``zone`` (default: this machine's time zone). ValueError if not a time."""
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    when = dt.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone or local_zone())
    return when


def parse_duration(text: str) -> dt.timedelta:
    """``15m``, ``2h``, ``1d``, ``90s`` or a bare number of minutes; ValueError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text or "")
    if not m:
        raise ValueError(f"{text!r} is not a duration like 15m, 2h or 1d")
    unit = {"s": "seconds", "m": "minutes", "": "minutes", "h": "hours", "d": "days"}[m.group(2)]
    return dt.timedelta(**{unit: float(m.group(1))})


def iso(when: dt.datetime | None) -> str:
    return "" if when is None else when.isoformat(timespec="seconds")


def duration_text(delta: dt.timedelta) -> str:
    """``2 d 3 h 5 min`` (whole minutes, rounded up; ``0 min`` for on time)."""
    minutes = math.ceil(max(delta.total_seconds(), 0) / 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{mins} min" if mins or not minutes else ""]
    return " ".join(p for p in parts if p)


# -- the policy ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatePolicy:
    due: dt.datetime
    penalty: float = 0.0                  # percent of the points, per period or part of one
    per: str = "day"                      # "day" or "hour"
    cap: float = 100.0                    # at most this percent of the points
    grace: dt.timedelta = dt.timedelta()
    extensions: dict[str, dt.datetime] = field(default_factory=dict)   # student -> own due time

    def due_for(self, student: str) -> dt.datetime:
        return self.extensions.get(student, self.due)

    def to_dict(self) -> dict:
        return {"due": iso(self.due), "penalty": self.penalty, "per": self.per, "cap": self.cap,
                "grace_seconds": self.grace.total_seconds(),
                "extensions": {s: iso(t) for s, t in sorted(self.extensions.items())}}

    @classmethod
    def from_dict(cls, data: dict) -> LatePolicy:
        return cls(due=parse_time(data["due"]), penalty=float(data.get("penalty", 0)), per=data.get("per", "day"),
                   cap=float(data.get("cap", 100)), grace=dt.timedelta(seconds=float(data.get("grace_seconds", 0))),
                   extensions={s: parse_time(t) for s, t in data.get("extensions", {}).items()})


def make_policy(due: str, *, penalty: float = 0.0, per: str = "day", cap: float = 100.0, grace: str = "0",
                extensions_csv: str | None = None) -> LatePolicy:
    """The policy of ``--due`` and its options (ValueError with the reason when one is wrong)."""
    if per not in PERIODS:
        raise ValueError(f"--late-per must be one of {', '.join(PERIODS)}")
    if not 0 <= penalty <= 100 or not 0 <= cap <= 100:
        raise ValueError("--late-penalty and --late-cap are percentages between 0 and 100")
    when = parse_time(due)
    extensions = read_extensions(Path(extensions_csv).read_text(encoding="utf-8-sig"), when) if extensions_csv else {}
    return LatePolicy(when, penalty, per, cap, parse_duration(grace), extensions)


def read_extensions(text: str, due: dt.datetime) -> dict[str, dt.datetime]:
    """Student -> own due time, from CSV text with a ``student`` column and ``due`` (a time) or
    ``days`` / ``hours`` (extra time on top of ``due``). ValueError names the bad row."""
    out: dict[str, dt.datetime] = {}
    for n, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        name = (row.get("student") or "").strip()
        if not name:
            continue
        try:
            if (row.get("due") or "").strip():
                out[name] = parse_time(row["due"], due.tzinfo)
            else:
                extra = dt.timedelta(days=float(row.get("days") or 0), hours=float(row.get("hours") or 0))
                out[name] = due + extra
        except ValueError as exc:
            raise ValueError(f"extensions CSV, line {n}: {exc}") from None
    return out


def save_policy(out: Path, policy: LatePolicy) -> None:
    write_atomically(Path(out) / POLICY_FILE, json.dumps(policy.to_dict(), indent=1) + "\n")


def load_policy(out: Path) -> LatePolicy | None:
    """DIR/late-policy.json, or None when there is none (no deadline: nobody is late)."""
    try:
        return LatePolicy.from_dict(json.loads((Path(out) / POLICY_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


# -- the penalty (pure) ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Assessment:
    """What the deadline did to one student's total."""

    submitted: dt.datetime | None
    source: str                     # a key of SOURCES
    due: dt.datetime | None
    late_by: dt.timedelta           # after the grace period; zero when on time
    periods: int                    # days or hours (or part of one) late
    percent: float                  # of the points, after the cap
    penalty: float                  # points taken off
    final: float                    # raw - penalty

    @property
    def late(self) -> bool:
        return self.late_by > dt.timedelta()


def late_by(submitted: dt.datetime, due: dt.datetime, grace: dt.timedelta) -> dt.timedelta:
    """How late ``submitted`` is, counted from the due time once the grace period is over."""
    return max(submitted - due - grace, dt.timedelta()) if submitted > due + grace else dt.timedelta()


def periods_late(late: dt.timedelta, per: str) -> int:
    """Started days (or hours): one second late is one period."""
    return math.ceil(late / PERIODS[per]) if late > dt.timedelta() else 0


def penalty_points(raw: float, max_score: float, percent: float) -> float:
    """``percent`` of ``max_score``, but never more than the student scored (no negative totals)."""
    return round(min(max(raw, 0.0), max_score * percent / 100.0), 4)


def assess(policy: LatePolicy | None, student: str, submitted: dt.datetime | None, source: str,
           raw: float, max_score: float) -> Assessment:
    """The deadline's effect on one total. No policy, or no known submission time: no penalty."""
    if policy is None or submitted is None:
        due = policy.due_for(student) if policy else None
        return Assessment(submitted, source, due, dt.timedelta(), 0, 0.0, 0.0, raw)
    due = policy.due_for(student)
    late = late_by(submitted, due, policy.grace)
    periods = periods_late(late, policy.per)
    percent = min(policy.cap, periods * policy.penalty)
    points = penalty_points(raw, max_score, percent)
    return Assessment(submitted, source, due, late, periods, percent, points, round(raw - points, 4))


# -- when a student submitted ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmittedAt:
    time: dt.datetime | None
    source: str                     # a key of SOURCES
    detail: str = ""                # the commit, the member or the file the time is from

    def to_dict(self) -> dict:
        return {"time": iso(self.time), "source": self.source, "detail": self.detail}

    @classmethod
    def from_dict(cls, data: dict) -> SubmittedAt:
        when = parse_time(data["time"]) if data.get("time") else None
        return cls(when, str(data.get("source", "unknown")), str(data.get("detail", "")))


def submission_time(source: Path, kind: str, zone: dt.tzinfo | None = None) -> SubmittedAt:
    """When the submission at ``source`` (a folder, git checkout or zip) was made; never raises."""
    try:
        if kind != "zip":
            found = gradescope_time(source)
            if found is None and kind == "git":
                found = git_time(source)
            return found or newest_file_time(source)
        return zip_time(source, zone)
    except Exception as exc:  # noqa: BLE001  a time is a bonus: never let it stop the gradebook
        return SubmittedAt(None, "unknown", f"{type(exc).__name__}: {exc}"[:200])


def gradescope_time(folder: Path) -> SubmittedAt | None:
    """``created_at`` of Gradescope's submission_metadata.json at the top of ``folder``."""
    path = Path(folder) / METADATA
    if not os.path.lexists(path):
        return None
    try:
        data = json.loads(read_regular(path, MAX_METADATA_BYTES, name=METADATA, within=folder))
        return SubmittedAt(parse_time(str(data["created_at"]), dt.timezone.utc), "gradescope", METADATA)
    except (NotReadable, ValueError, KeyError, TypeError):
        return None


def newest_file_time(folder: Path) -> SubmittedAt:
    """The newest modification time of a regular file below ``folder`` (links and tool folders
    skipped, the listing bounded by src/lumen_ex/classroom/submission_limits.py's Budget)."""
    budget, newest, name = Budget(), None, ""
    frontier = [Path(folder)]
    try:
        while frontier:
            for entry in list_dir(frontier.pop(), budget):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) and entry.name not in SKIP_DIRS:
                    frontier.append(Path(entry.path))
                elif stat.S_ISREG(st.st_mode) and (newest is None or st.st_mtime > newest):
                    newest, name = st.st_mtime, os.path.relpath(entry.path, folder)
    except (SubmissionRefused, OSError):
        pass                    # the newest of what could be looked at
    if newest is None:
        return SubmittedAt(None, "unknown", "no file in the folder")
    return SubmittedAt(dt.datetime.fromtimestamp(newest, dt.timezone.utc), "folder", name)


def zip_time(path: Path, zone: dt.tzinfo | None = None) -> SubmittedAt:
    """The newest member's time of the zip at ``path`` (opened as src/lumen_ex/classroom/zips.py opens it)."""
    try:
        with open_zip(path) as zf:
            members = [i for i in zf.infolist()[:100_000] if not i.is_dir()
                       and not any(p in SKIP_DIRS for p in i.filename.split("/"))]
    except (SubmissionRefused, OSError, ValueError, EOFError) as exc:
        return SubmittedAt(None, "unknown", f"the zip cannot be read: {exc}"[:200])
    if not members:
        return SubmittedAt(None, "unknown", "the zip has no files")
    newest = max(members, key=lambda i: i.date_time)
    when = dt.datetime(*newest.date_time).replace(tzinfo=zone or local_zone())
    return SubmittedAt(when, "zip", newest.filename)


# -- git: the commit's committer time, read from .git (src/lumen_ex/classroom/git_checkout.py) -------------


def git_time(folder: Path) -> SubmittedAt | None:
    """The committer time of the commit the checkout is at, or None when it cannot be read."""
    try:
        sha = read_git_commit(Path(folder))
    except SubmissionRefused:
        return None
    if len(sha) != 40:
        return None
    body = commit_object(Path(folder) / ".git", sha)
    when = committer_time(body) if body else None
    return SubmittedAt(when, "git", sha[:12]) if when else None


# -- recorded beside the results -----------------------------------------------------------------------------


def record_times(out: Path, subs, zone: dt.tzinfo | None = None) -> None:
    """Write DIR/results/<student>/submitted.json for each submission (src/lumen_ex/classroom/entries.py's
    Submission: ``student``, ``source``, ``kind``). A zip's times are read in ``zone``, else in the
    saved due time's time zone, else in this machine's."""
    policy = load_policy(out)
    zone = zone or (policy.due.tzinfo if policy else None)
    for sub in subs:
        found = submission_time(Path(sub.source), sub.kind, zone)
        target = Path(out) / RESULTS / sub.student / TIME_FILE
        text = json.dumps(found.to_dict()) + "\n"
        try:
            if target.read_text() == text:
                continue                     # unchanged: a rerun leaves the file as it was
        except OSError:
            pass
        write_atomically(target, text)


def recorded_time(out: Path, student: str) -> SubmittedAt:
    try:
        return SubmittedAt.from_dict(json.loads((Path(out) / RESULTS / student / TIME_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return SubmittedAt(None, "unknown")


def assess_class(out: Path, totals: list[tuple[str, float, float]]) -> dict[str, Assessment]:
    """Student -> Assessment, from the recorded times and the saved policy; ``totals`` holds
    (student, raw total, maximum)."""
    policy = load_policy(out)
    found = {}
    for student, raw, max_score in totals:
        when = recorded_time(out, student)
        found[student] = assess(policy, student, when.time, when.source, raw, max_score)
    return found
