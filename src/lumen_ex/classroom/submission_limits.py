"""How much of one submission ``lumen-ex grade`` looks at, and the refusal when it asks for more.

Looking through a submission is bounded (:class:`Budget`): at most :data:`MAX_TREE_ENTRIES` files
and folders listed and :data:`PREPARE_SECONDS` seconds per student; going over refuses the
submission (:class:`SubmissionRefused`). Tool folders (:data:`SKIP_DIRS`) are never looked into.
Used by src/lumen_ex/classroom/submissions.py, zips.py, git_checkout.py and late.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

MAX_TREE_ENTRIES = 20_000         # files and folders listed while looking through one submission
PREPARE_SECONDS = 60.0            # time spent unpacking and looking through one submission
SKIP_DIRS = {"__pycache__", "node_modules", "__MACOSX", ".git", ".venv", "venv"}


class SubmissionRefused(Exception):
    """The submission cannot be read at all (a zip that is unsafe or broken, a file that breaks the
    rules of src/lumen_ex/core/bounded.py where the whole submission depends on it, a tree too large)."""


class Budget:
    """How much of one submission the coordinator looks at: entries listed, and time spent.

    Every listing and every unpacked chunk is charged here; going over refuses the submission, so
    that a million files, a very deep tree or a slow zip cannot stall the class's grading."""

    def __init__(self, entries: int = MAX_TREE_ENTRIES, seconds: float = PREPARE_SECONDS):
        self.limit, self.left = entries, entries
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def spend(self, entries: int = 1) -> None:
        self.left -= entries
        if self.left < 0:
            raise SubmissionRefused(f"it holds more than {self.limit} files and folders")
        if time.monotonic() > self.deadline:
            raise SubmissionRefused(f"reading it took longer than {self.seconds:g} s")


def list_dir(folder: Path, budget: Budget) -> list[os.DirEntry]:
    """The entries of ``folder`` (sorted by name), each charged to ``budget``; [] if unreadable."""
    entries = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                budget.spend()
                entries.append(entry)
    except OSError:
        return []
    return sorted(entries, key=lambda e: e.name)


def is_real_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False
