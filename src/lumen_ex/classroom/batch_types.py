"""What a ``lumen-ex grade`` batch is asked, the checks it plans, and what it reports.

:class:`GradeRequest` is the command line's options (src/lumen_ex/cli/classroom.py); :class:`Job` one
student x exercise to grade (src/lumen_ex/classroom/planning.py plans them, the scheduler runs them);
:class:`Finished` what a :class:`Progress` display is told as each check is recorded; and
:class:`Outcome` what the run, ``--status`` or ``--collect`` (src/lumen_ex/classroom/k8s.py) ends with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lumen_ex.classroom.entries import Skipped, Submission
from lumen_ex.classroom.store import State
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.results import RunResult


@dataclass
class GradeRequest:
    submissions: Path
    out: Path
    exercises: list[Exercise]
    jobs: int = 1
    sandbox: str = "auto"
    force: bool = False
    unsafe: bool = False
    students: tuple[str, ...] = ()        # only these students (by name); all when empty
    seed: int | None = None               # the class seed; else the recorded one, else a fresh one (store.class_seed)
    device: str = "cpu"
    timeout: float | None = None          # per student x exercise; default: the exercise's limits + a margin
    formats: tuple[str, ...] = ()         # extra views written beside each result document
    status_only: bool = False             # --status: say what is up to date, stale, missing, failed; grade nothing
    roster: Path | None = None            # --roster FILE.csv: the enrolled students (src/lumen_ex/classroom/roster.py)
    # Grade an exercise only for the submissions that hold its file (dev check: each corpus file is a
    # submission of one exercise); a class is graded on every exercise, a missing file a failing row.
    only_submitted: bool = False
    # A seed of its own for some students (dev check: one batch grades each corpus file under several
    # seeds, each (file, seed) a student); the others get the class seed.
    student_seeds: dict[str, int] = field(default_factory=dict)
    # Folders of SUBMISSIONS that are no student's (besides ``out``): a Slurm shard's ``grade`` run
    # writes under the class's DIR, which must not become an entry (src/lumen_ex/classroom/slurm.py).
    exclude: tuple[Path, ...] = ()


@dataclass
class Job:
    id: int
    student: str
    exercise: Exercise
    seed: int
    started: float | None = None
    fingerprint: dict | None = None       # what is graded (src/lumen_ex/classroom/store.py), kept in the record
    reason: str = ""                      # why it is (re)graded
    name: str = ""                        # the student's name as given


@dataclass
class Finished:
    """One check that has just been recorded (what the progress display is told)."""

    student: str
    exercise: Exercise
    result: RunResult
    done: int
    total: int
    failed: int          # checks so far whose status is fail
    errors: int          # checks so far whose status is error
    # How a caller that knows what each check should give words it (``lumen-ex dev check``: a buggy
    # file that fails is as declared, not a failure); empty: the status and score, and the counts.
    verdict: str = ""
    tally: str = ""


class Progress(Protocol):
    """What a batch tells whoever shows its progress (src/lumen_ex/cli/classroom.py ``GradeProgress``),
    in this order: ``planned`` and ``notes`` once the plan is made, ``begin``, then ``started_check``
    and ``finished`` for each check as grading processes take and finish it, and ``end``."""

    def planned(self, regraded: list[tuple[str, str, str]]) -> None:
        """What a rerun regrades and why: (name, exercise folder, reason) for each check."""
    def notes(self, notes: list[str]) -> None:
        """Notes about the submissions and the run (two entries with one name, entries skipped)."""
    def begin(self, total: int, resumed: int, students: int, note: str) -> None: ...
    def started_check(self, student: str, exercise: Exercise) -> None:
        """A grading process began ``student`` x ``exercise``."""
    def finished(self, item: Finished) -> None: ...
    def end(self) -> None: ...


@dataclass
class Outcome:
    students: list[Submission]
    graded: int                   # checks run this time
    resumed: int                  # checks skipped because a document existed
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    sandbox: str = ""
    seed: int = 0                                                   # the class seed
    regraded: list[tuple[str, str, str]] = field(default_factory=list)   # (name, exercise dir, why)
    states: list[tuple[Submission, Exercise, State]] = field(default_factory=list)  # --status
    skipped: list[Skipped] = field(default_factory=list)
