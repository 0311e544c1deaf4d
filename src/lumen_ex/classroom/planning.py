"""What a ``lumen-ex grade`` run grades, and why: the plan made before any grading process starts.

:class:`Planner` reads SUBMISSIONS (src/lumen_ex/classroom/entries.py, and each submission into its
throwaway workspace through src/lumen_ex/classroom/submissions.py), chooses the sandbox
(src/lumen_ex/classroom/sandbox_choice.py) and the class seed, and compares what each student x
exercise would be graded from now with the stored record (src/lumen_ex/classroom/store.py): only what
is no longer true is planned as a :class:`Job`, with the reason (everything with ``--force``).
``--status`` is this plan alone. The scheduler (src/lumen_ex/classroom/scheduler.py) runs the jobs.
"""

from __future__ import annotations

import shutil
import tempfile
import unicodedata
from pathlib import Path

from lumen_ex.classroom import store as grade_store
from lumen_ex.classroom.batch_types import GradeRequest, Job, Outcome
from lumen_ex.classroom.entries import Submission, discover_entries
from lumen_ex.classroom.leftovers import scratch_prefix, sweep
from lumen_ex.classroom.roster import match_roster
from lumen_ex.classroom.sandbox_choice import choose_sandbox, image_id
from lumen_ex.classroom.submissions import Prepared, prepare
from lumen_ex.core import catalog as catalog_mod
from lumen_ex.core.catalog import Catalog, Exercise
from lumen_ex.core.errors import UsageError
from lumen_ex.core.results import SandboxInfo, base_versions


def select_students(subs: list[Submission], wanted: tuple[str, ...], folder: Path) -> list[Submission]:
    """The submissions ``--student`` names: by the name as given (any Unicode form: an NFD "Zoë"
    matches an NFC one), by the entry's file name, or by the key."""
    def norm(text: str) -> str:
        return unicodedata.normalize("NFC", text)

    asked = {norm(w) for w in wanted}
    chosen = [s for s in subs if asked & {norm(s.name), norm(s.source.name), s.student}]
    known = {norm(n) for s in chosen for n in (s.name, s.source.name, s.student)}
    unknown = sorted(w for w in wanted if norm(w) not in known)
    if unknown:
        raise UsageError(f"no submission for {', '.join(unknown)} in {folder}",
                         "Use the names of the folders or zips (without .zip), as they are written")
    return chosen


def prepare_safely(sub: Submission, exercises: list[Exercise], catalog: Catalog, scratch: Path) -> Prepared:
    """:func:`lumen_ex.classroom.submissions.prepare`, and should it fail unexpectedly, a refused submission
    with the reason: one student's files never end the class's run."""
    try:
        return prepare(sub, exercises, catalog, scratch)
    except Exception as exc:  # noqa: BLE001  a row with the reason, never a crash of the batch
        ws = scratch / "ws" / sub.student
        ws.mkdir(parents=True, exist_ok=True)
        return Prepared(ws, refused=f"the submission {sub.source.name} could not be read: "
                                    f"{type(exc).__name__}: {exc}")


class Planner:
    """The plan of one run (its state is kept for the run: the scratch folder, the prepared workspaces)."""

    def __init__(self, req: GradeRequest):
        self.req = req
        self.catalog: Catalog = catalog_mod.load()
        self.out = Path(req.out)
        self._exercise_files: dict[str, dict[str, str]] = {}    # by exercise folder, hashed once a run
        self.scratch: Path | None = None        # the run's scratch folder, made by plan()

    def plan(self) -> tuple[list[Submission], list[Job], int, list[str]]:
        """Which student x exercise to grade, and why: everything whose stored result is no
        longer true of the submission as it is now (src/lumen_ex/classroom/store.py), or all with --force.

        Every submission is read into its throwaway workspace here (so that its files can be
        hashed); the workspaces of students with nothing to grade are removed at once."""
        req = self.req
        if not Path(req.submissions).is_dir():
            raise UsageError(f"{req.submissions} is not a folder", "Pass the folder holding one entry per student")
        notes = [] if req.status_only else grade_store.recover(self.out)
        subs, self.skipped, found_notes = discover_entries(Path(req.submissions), exclude=(self.out, *req.exclude))
        notes += found_notes
        self.all_subs = subs
        if req.students:
            subs = select_students(subs, req.students, req.submissions)
        if not subs:
            raise UsageError(f"no submissions in {req.submissions}", "It must hold one folder or .zip per student")
        self.seed, seed_note = grade_store.class_seed(self.out, req.seed)
        notes += [seed_note] if seed_note else []
        self._choose_sandbox()
        versions = self._fingerprint_versions()
        scratch = self.scratch = self._make_scratch()
        self.prepared: dict[str, Prepared] = {}
        self.states: list[tuple[Submission, Exercise, grade_store.State]] = []
        jobs: list[Job] = []
        resumed = 0
        for sub in subs:
            prepared = prepare_safely(sub, req.exercises, self.catalog, scratch)
            wanted = 0
            for ex in req.exercises:
                if req.only_submitted and ex.slug in prepared.missing:
                    continue
                fp = self._fingerprint(sub, ex, prepared, versions)
                state = (grade_store.State("stale", "--force") if req.force else
                         grade_store.state_of(self.out, sub.student, ex.dir, fp))
                self.states.append((sub, ex, state))
                if state.current:
                    resumed += 1
                    continue
                wanted += 1
                jobs.append(Job(len(jobs), sub.student, ex, self._seed_of(sub), fingerprint=fp, reason=state.reason,
                                name=sub.name))
            if wanted and not req.status_only:
                self.prepared[sub.student] = prepared
            else:
                shutil.rmtree(prepared.workspace, ignore_errors=True)
        if not req.status_only:
            self.save_class()
        return subs, jobs, resumed, notes

    def _fingerprint(self, sub: Submission, ex: Exercise, prepared: Prepared, versions: dict) -> dict:
        """What this student x exercise is graded from (src/lumen_ex/classroom/store.py ``fingerprint``)."""
        problem = prepared.refused or prepared.missing.get(ex.slug, "")
        files = {} if problem else grade_store.hash_files(prepared.workspace / ex.dir)
        if ex.dir not in self._exercise_files:
            self._exercise_files[ex.dir] = grade_store.exercise_files(ex)
        return grade_store.fingerprint(name=sub.name, entry=sub.source.name, kind=sub.kind, files=files,
                                       problem=problem, versions=versions, seed=self._seed_of(sub),
                                       device=self.req.device, exercise=self._exercise_files[ex.dir])

    def _seed_of(self, sub: Submission) -> int:
        """The class seed, unless the request gives this student a seed of its own."""
        return self.req.student_seeds.get(sub.student, self.seed)

    def _fingerprint_versions(self) -> dict[str, str]:
        """lumen-ex, the catalogue and, under docker, the grader image's id."""
        versions = {"lumen_ex": base_versions()["lumen_ex"], "catalog": self.catalog.version}
        if self.sandbox.startswith("docker:"):
            versions["image"] = image_id(self.sandbox.split(":", 1)[1])
        return versions

    def _choose_sandbox(self) -> None:
        """The sandbox (refused unisolated without --unsafe); --status only needs to know if it is docker."""
        try:
            self.sandbox, self.sandbox_info, self.note = choose_sandbox(self.req.sandbox, self.req.unsafe)
        except UsageError:
            if not self.req.status_only:
                raise
            self.sandbox, self.sandbox_info, self.note = "none", SandboxInfo("none", False), ""

    def _make_scratch(self) -> Path:
        if self.req.status_only:
            return Path(tempfile.mkdtemp(prefix="lumen-ex-status-")).absolute()
        sweep(self._ensure_out())       # what a run killed by SIGKILL left (src/lumen_ex/classroom/leftovers.py)
        return Path(tempfile.mkdtemp(prefix=scratch_prefix(), dir=self.out)).absolute()

    def save_class(self) -> None:
        """DIR/class.json: the class seed, every entry found and skipped, the roster's match."""
        data = grade_store.load_class(self.out)
        data.update({
            "seed": self.seed,
            "entries": [{"key": s.student, "name": s.name, "entry": s.source.name, "kind": s.kind}
                        for s in self.all_subs],
            "skipped": [{"entry": k.entry, "reason": k.reason} for k in self.skipped],
        })
        if self.req.roster is not None:
            data["roster"] = match_roster(Path(self.req.roster), self.all_subs)
        self._ensure_out()
        grade_store.save_class(self.out, data)

    def status(self) -> Outcome:
        """``--status``: where every student x exercise stands; nothing is graded or written."""
        try:
            subs, jobs, resumed, notes = self.plan()
        finally:
            if self.scratch is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)
        return Outcome(subs, 0, resumed, notes=notes, seed=self.seed, states=self.states, skipped=self.skipped,
                       regraded=[(j.name, j.exercise.dir, j.reason) for j in jobs])

    def _ensure_out(self) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        return self.out
