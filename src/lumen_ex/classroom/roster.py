"""``--roster FILE.csv``: the enrolled students, matched with the submissions.

The roster is a CSV file with a header row. Each row is one student; the name is in the column
``student`` (or ``name``; else the first column), and any of the columns ``login``, ``github``,
``username``, ``id``, ``email`` may hold another name the student's entry could carry (a GitHub
Classroom repository is usually named after the login). A submission belongs to a roster row when
its name as given, or its key (src/lumen_ex/classroom/entries.py ``student_key``), equals one of the row's
names or their keys, ignoring case and Unicode form (an NFD "Zoë" is the NFC "Zoë").

The gradebook (src/lumen_ex/classroom/gradebook.py) then has one row per roster student, in the roster's order:
``missing`` where nothing was submitted; then the submissions that match no one, flagged.
"""

from __future__ import annotations

import csv
import io
import os
import unicodedata
from pathlib import Path

from lumen_ex.classroom.entries import Submission, student_key
from lumen_ex.core.bounded import NotReadable, read_regular
from lumen_ex.core.errors import UsageError

MAX_ROSTER_BYTES = 4 << 20
NAME_COLUMNS = ("student", "name")
OTHER_COLUMNS = ("login", "github", "username", "id", "email")


def _norm(text: str) -> str:
    return unicodedata.normalize("NFC", text).strip().casefold()


def read_roster(path: Path) -> list[dict]:
    """Each roster row: ``{"name": the name as written, "aliases": [other names]}``."""
    try:
        text = read_regular(Path(os.path.realpath(path)), MAX_ROSTER_BYTES, name=str(path)).decode("utf-8-sig")
    except (NotReadable, UnicodeDecodeError) as exc:
        raise UsageError(f"the roster {path} cannot be read: {exc}", "Pass a UTF-8 CSV file with a header row") from None
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        return []
    columns = {(c or "").strip().lower(): c for c in rows[0].keys()}
    name_col = next((columns[c] for c in NAME_COLUMNS if c in columns), next(iter(rows[0].keys())))
    others = [columns[c] for c in OTHER_COLUMNS if c in columns]
    out = []
    for row in rows:
        name = (row.get(name_col) or "").strip()
        if name:
            out.append({"name": name, "aliases": [row[c].strip() for c in others if (row.get(c) or "").strip()]})
    return out


def _names(text: str) -> set[str]:
    return {_norm(text), _norm(student_key(text))}


def match_roster(path: Path, subs: list[Submission]) -> dict:
    """The roster matched with ``subs``: ``{"file", "students": [{"name", "keys"}], "unmatched": [keys]}``."""
    students = []
    taken: set[str] = set()
    for row in read_roster(path):
        names = set().union(*(_names(n) for n in [row["name"], *row["aliases"]]))
        keys = [s.student for s in subs if _names(s.name) & names or _norm(s.student) in names]
        taken.update(keys)
        students.append({"name": row["name"], "keys": keys})
    return {"file": Path(path).name, "students": students,
            "unmatched": [s.student for s in subs if s.student not in taken]}
