"""The entries of SUBMISSIONS: one student each, with the name as given and a unique key.

``SUBMISSIONS`` holds one entry per student: a folder (a lumen-ex workspace, a git checkout, or just
the exercise files), or a ``.zip`` of one. The student's name is the entry's name as given
(``José García.zip`` -> ``José García``); its key, the folder of its results, is a file-system-safe
form of it (``Jose_Garcia``), unique in the class (:func:`discover_entries`). Any other entry (a
``.tar.gz``, a loose ``.py``, a notebook, a hidden folder) is :class:`Skipped`, with the reason.
What is read of an entry is src/lumen_ex/classroom/submissions.py's.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from lumen_ex.classroom.submission_limits import SKIP_DIRS

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._@+-]")


@dataclass
class Submission:
    student: str                  # the key: safe for a file name, unique in the class (results/<key>/)
    source: Path                  # the entry in SUBMISSIONS
    kind: str                     # "folder", "git" or "zip"
    name: str = ""                # the name as given (the entry's, without .zip): what people read

    def __post_init__(self):
        self.name = self.name or self.student


@dataclass
class Skipped:
    """An entry of SUBMISSIONS that is not graded, and why (it still gets a gradebook row)."""

    entry: str
    reason: str


def given_name(raw: str) -> str:
    """The student's name as the entry gives it: ``José García.zip`` -> ``José García``."""
    return raw[:-4] if raw.lower().endswith(".zip") else raw


def student_key(raw: str) -> str:
    """A file-system-safe form of a name (accents folded, other characters ``_``): the folder
    name under DIR/results. ``José García`` -> ``Jose_Garcia``; an NFD ``Zoë`` -> ``Zoe``."""
    folded = "".join(c for c in unicodedata.normalize("NFKD", raw) if not unicodedata.combining(c))
    name = _UNSAFE_NAME.sub("_", folded).lstrip(".")[:100]
    return name or "student"


def student_name(raw: str) -> str:
    """The key of an entry (``alice.zip`` -> ``alice``)."""
    return student_key(given_name(raw))


SKIP_REASONS = (
    ((".tar.gz", ".tgz", ".tar", ".7z", ".rar", ".gz", ".bz2", ".xz"),
     "an archive lumen-ex does not unpack: only folders and .zip files are graded (unpack it into a folder)"),
    ((".ipynb",), "a Jupyter notebook: export the exercise's code to its .py file, in a folder or a .zip"),
    ((".py",), "a loose .py file: put the student's files in a folder (or a .zip) named after the student"),
)


def skip_reason(entry: Path) -> str:
    """Why an entry that is neither a folder nor a .zip (or is hidden) is not graded."""
    lower = entry.name.lower()
    if entry.name.startswith("."):
        return "a hidden entry (its name starts with a dot): rename it if it is a submission"
    for suffixes, reason in SKIP_REASONS:
        if lower.endswith(suffixes):
            return reason
    return "not a folder or a .zip"


def discover(folder: Path, *, exclude: tuple[Path, ...] = ()) -> tuple[list[Submission], list[str]]:
    """One :class:`Submission` per entry of ``folder`` (sorted by name), and notes on what was ignored."""
    subs, skipped, notes = discover_entries(folder, exclude=exclude)
    return subs, [f"ignored {s.entry}: {s.reason}" for s in skipped] + notes


def discover_entries(folder: Path, *, exclude: tuple[Path, ...] = ()
                     ) -> tuple[list[Submission], list[Skipped], list[str]]:
    """The submissions of ``folder``, the entries skipped (with the reason), and notes.

    Keys never depend on the order of the entries or on which came first: an entry whose key is
    unique gets it; entries whose keys collide (``lee/`` and ``lee.zip``, ``José`` and ``Jose``)
    are keyed by their whole entry name (``lee``, ``lee.zip``) and, if that still collides, by a
    short hash of it. A result stored under a key also records which entry it is of
    (src/lumen_ex/classroom/store.py), so no entry ever inherits another's result."""
    folder = Path(folder)
    excluded = {p.resolve() for p in exclude}
    found: list[tuple[Path, str]] = []
    skipped: list[Skipped] = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.resolve() in excluded or entry.name in SKIP_DIRS:
            continue        # the output folder, a .git or __pycache__ of SUBMISSIONS itself
        hidden = entry.name.startswith(".")
        if entry.is_dir() and not hidden:
            found.append((entry, "git" if (entry / ".git").exists() else "folder"))
        elif entry.name.lower().endswith(".zip") and not hidden:
            found.append((entry, "zip"))    # even if it is no regular file: then it is refused, with a row
        elif not hidden or entry.is_dir():  # hidden files (.DS_Store) are no one's submission
            skipped.append(Skipped(entry.name, skip_reason(entry)))
    subs, notes = _keyed(found)
    return subs, skipped, notes


def _keyed(found: list[tuple[Path, str]]) -> tuple[list[Submission], list[str]]:
    """A unique key for every entry (see :func:`discover_entries`)."""
    base = {entry: student_name(entry.name) for entry, _ in found}
    counts: dict[str, int] = {}
    for key in base.values():
        counts[key] = counts.get(key, 0) + 1
    keys = {e: (k if counts[k] == 1 else student_key(e.name)) for e, k in base.items()}
    seen: dict[str, int] = {}
    for key in keys.values():
        seen[key] = seen.get(key, 0) + 1
    subs, notes = [], []
    for entry, kind in found:
        key = keys[entry]
        if seen[key] > 1:
            key = f"{key[:90]}-{hashlib.sha256(entry.name.encode(errors='surrogateescape')).hexdigest()[:8]}"
        if counts[base[entry]] > 1:
            notes.append(f"{entry.name} and another entry have the same name: its results are under {key}")
        subs.append(Submission(key, entry, kind, name=given_name(entry.name)))
    return subs, notes
