"""``lumen-ex grade``: grade a whole class, N submissions at a time, each in its own sandbox.

    lumen-ex grade SUBMISSIONS (--exercise N ... | --all) --out DIR [--jobs N] [--sandbox ...]

How it works:

- SUBMISSIONS is read by src/lumen_ex/classroom/submissions.py: one student per folder or zip, each given a
  throwaway workspace in a scratch folder (DIR/.scratch-*, removed at the end). Every file is read
  through src/lumen_ex/core/bounded.py (regular files only, size caps) and looking through a submission has
  an entry and time budget, so a FIFO, a link to /dev/zero or a zip bomb is that student's ``fail``
  row with the reason, never a hang or a crash of the run.
- The grading processes run isolated (``python -I`` in ``/``, src/lumen_ex/core/trusted.py): a student's
  ``json.py`` in the folder this command was started from is never imported by them.
- ``--jobs`` warm grading processes (src/lumen_ex/classroom/grading_main.py) each import torch once and then run
  ``lumen_ex.harness.check.run_check`` for one student x exercise after another, every check against fresh
  sandboxed workers (or a fresh container), with the next check's worker started while the current
  one's tests run.
- Nothing is lost: each result document is written to DIR/results/<key>/<exercise>.json
  (temporary file, fsync, rename) the moment it arrives, with its record of exactly what was graded
  (src/lumen_ex/classroom/store.py: the sha256 of the files, the entry, lumen-ex, the catalogue, the
  grader image, the seed). A check whose grading process dies or runs past ``--timeout`` still gets
  a document (status ``error``, with the reason), the process is replaced, and the batch goes on.
- A rerun regrades what is no longer true: a file that changed, another entry under the same key,
  a new lumen-ex, catalogue or image, a new seed, a grader error; it says what and why, and keeps
  the rest. ``--force`` regrades everything, into a staging folder that replaces the old results
  only once the run is complete. ``--status`` says where each check stands and grades nothing.
- One class seed (``--seed``, else the one recorded in DIR/class.json, else a fresh one) grades
  every check, so grading the same class twice gives the same gradebook.
- Ctrl-C (SIGINT) or SIGTERM stops every grading process, whose check in progress kills its workers
  or container on the way out; whatever is left after a grace period is killed by process group. The
  gradebook and report are written for what was graded, and the command exits with 130.
- The unisolated mode (``--sandbox none``, or ``auto`` finding no sandbox) is refused unless
  ``--unsafe``: a class's code must not run with the instructor's permissions by accident.

The gradebook and the class report are views of the documents on disk (src/lumen_ex/classroom/gradebook.py), so
they are rebuilt whole after every run, resumed or not.
"""

from __future__ import annotations

import json
import select
import shutil
import signal
import tempfile
import time
import unicodedata
from collections import deque
from dataclasses import dataclass, field
from dataclasses import replace as with_changes
from pathlib import Path
from typing import Protocol

from lumen_ex.classroom import store as grade_store
from lumen_ex.classroom.grading_processes import STOP_GRACE_S, GradingProcess
from lumen_ex.classroom.submissions import Prepared, Skipped, Submission, discover_entries, prepare
from lumen_ex.core import catalog as catalog_mod
from lumen_ex.core.atomic import write_atomically
from lumen_ex.core.catalog import Catalog, Exercise
from lumen_ex.core.errors import LumenError, UsageError
from lumen_ex.core.results import (
    Diagnosis,
    RunResult,
    SandboxInfo,
    Status,
    TestResult,
    base_versions,
    grader_error,
    not_graded,
)

RESULTS = "results"
SUBMISSION_INFO = "submission.json"
TIMEOUT_MARGIN_S = 60.0          # beyond an exercise's own start-up + run limits
MAX_START_FAILURES = 3
STARTUP_LIMIT_S = 180.0          # a grading process that has not imported torch by then is replaced


class GraderUnavailable(LumenError):
    exit_code = 3


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
    seed: int | None = None               # one seed for the class; a fresh one per check when None
    device: str = "cpu"
    timeout: float | None = None          # per student x exercise; default: the exercise's limits + a margin
    formats: tuple[str, ...] = ()         # extra views written beside each result document
    status_only: bool = False             # --status: say what is up to date, stale, missing, failed; grade nothing
    roster: Path | None = None            # --roster FILE.csv: the enrolled students (src/lumen_ex/classroom/roster.py)


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


class Progress(Protocol):
    def begin(self, total: int, resumed: int, students: int, note: str) -> None: ...
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
    states: list[tuple[Submission, Exercise, grade_store.State]] = field(default_factory=list)  # --status
    skipped: list[Skipped] = field(default_factory=list)


def result_path(out: Path, student: str, ex: Exercise) -> Path:
    return Path(out) / RESULTS / student / f"{ex.dir}.json"


def load_document(path: Path) -> dict | None:
    """A stored result document, or None when absent or not a valid one."""
    try:
        doc = json.loads(path.read_text())
        RunResult.from_dict(doc)
        return doc
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record(out: Path, student: str, ex: Exercise, result: RunResult, fingerprint: dict | None = None,
           run: str = "") -> None:
    """Store a result document, and with ``fingerprint`` its record of what was graded
    (src/lumen_ex/classroom/store.py), which a rerun compares with the submission as it is then."""
    grade_store.write_result(out, student, ex.dir, result.to_json() + "\n", fingerprint, run)


def describe_submission(out: Path, sub: Submission, prepared: Prepared) -> None:
    """DIR/results/<student>/submission.json: what was graded, from where (and the git commit,
    read by :func:`lumen_ex.classroom.submissions.prepare` through the bounded reader)."""
    info = {"student": sub.student, "name": sub.name, "source": sub.source.name, "kind": sub.kind,
            "commit": prepared.commit,
            "graded": prepared.found, "missing": prepared.missing, "refused": prepared.refused,
            "ambiguous": prepared.ambiguous}
    write_atomically(Path(out) / RESULTS / sub.student / SUBMISSION_INFO,
                     json.dumps(info, indent=1) + "\n")


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


# -- documents for checks that could not run ----------------------------------------------------


def _versions() -> dict[str, str]:
    return {**base_versions(), "catalog": catalog_mod.load().version}


def submission_result(ex: Exercise, reason: str, *, status: Status, sandbox: SandboxInfo, device: str,
                      seed: int = 0) -> RunResult:
    """The document of an exercise that could not be graded because of the submission itself
    (``fail``, 0 points: the file is not there, or the submission broke a rule of
    src/lumen_ex/classroom/submissions.py), with the reason."""
    test = TestResult("submission", f"{ex.path} was submitted", "submission", Status.ERROR,
                      max_score=ex.max_score, message=reason,
                      diagnosis=Diagnosis("missing", reason, hint=f"Submit your file as {ex.path}."))
    return not_graded(ex.summary(), test, status=status, max_score=ex.max_score, sandbox=sandbox, device=device,
                      seed=seed, versions=_versions())


def unpreparable_result(ex: Exercise, refused: str, missing: dict[str, str], *, sandbox: SandboxInfo,
                        device: str, seed: int = 0) -> RunResult | None:
    """The document of an exercise the submission itself keeps from being graded (the whole
    submission refused, or this exercise's file missing or unreadable: fail, with the reason; the
    submission is charged, not the grader), or None when it can be graded."""
    if refused:
        return submission_result(ex, refused, status=Status.FAIL, sandbox=sandbox, device=device, seed=seed)
    if ex.slug in missing:
        return submission_result(ex, missing[ex.slug], status=Status.FAIL, sandbox=sandbox, device=device,
                                 seed=seed)
    return None


def grader_error_result(ex: Exercise, reason: str, *, sandbox: SandboxInfo, device: str, seed: int,
                        duration: float = 0.0) -> RunResult:
    """The document of a check whose grading process died or hung: status ``error``, the reason."""
    return grader_error(ex.summary(), reason, sandbox=sandbox, device=device, seed=seed, duration=duration,
                        versions=_versions())


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


# -- the sandbox ---------------------------------------------------------------------------------


def choose_sandbox(name: str, unsafe: bool) -> tuple[str, SandboxInfo, str]:
    """The grading processes' SANDBOX argument, what it is, and a note; refuses unisolated without --unsafe."""
    from lumen_ex.sandbox.select import select_backend

    launcher, note = select_backend(name)
    if not launcher.keeps_workers:    # docker: each check is a container run, its image named in the spec
        return launcher.spec(), SandboxInfo(launcher.name, True, {}, note), note
    if not launcher.isolated and not unsafe:
        why = ("--sandbox none runs every student's code with your permissions" if name == "none" else
               f"no sandbox is available here ({note.strip()})")
        raise UsageError(f"batch grading refuses the unisolated mode: {why}",
                         "Use --sandbox bwrap or --sandbox docker (see `lumen-ex doctor`), "
                         "or pass --unsafe if you trust every submission")
    info = SandboxInfo(launcher.name, launcher.isolated, {}, " ".join(filter(None, [launcher.note(), note])))
    return launcher.name, info, note


def image_id(ref: str) -> str:
    """The id (sha256) of the grader image ``ref``, '' when docker cannot say: results graded under
    another image are regraded (src/lumen_ex/classroom/store.py)."""
    from lumen_ex.image import engine

    answer = engine.docker("image", "inspect", "--format", "{{.Id}}", ref, timeout=30)
    return answer.out.strip() if answer.ok else ""


# -- the batch -----------------------------------------------------------------------------------


class Batch:
    def __init__(self, req: GradeRequest, progress: Progress | None):
        self.req = req
        self.progress = progress
        self.catalog: Catalog = catalog_mod.load()
        self.out = Path(req.out)

    # planning ----------------------------------------------------------------------------------

    def plan(self) -> tuple[list[Submission], list[Job], int, list[str]]:
        """Which student x exercise to grade, and why: everything whose stored result is no
        longer true of the submission as it is now (src/lumen_ex/classroom/store.py), or all with --force.

        Every submission is read into its throwaway workspace here (so that its files can be
        hashed); the workspaces of students with nothing to grade are removed at once."""
        req = self.req
        if not Path(req.submissions).is_dir():
            raise UsageError(f"{req.submissions} is not a folder", "Pass the folder holding one entry per student")
        notes = [] if req.status_only else grade_store.recover(self.out)
        subs, self.skipped, found_notes = discover_entries(Path(req.submissions), exclude=(self.out,))
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
        self.scratch = self._make_scratch()
        self.prepared: dict[str, Prepared] = {}
        self.states: list[tuple[Submission, Exercise, grade_store.State]] = []
        jobs: list[Job] = []
        resumed = 0
        for sub in subs:
            prepared = prepare_safely(sub, req.exercises, self.catalog, self.scratch)
            wanted = 0
            for ex in req.exercises:
                fp = self._fingerprint(sub, ex, prepared, versions)
                state = (grade_store.State("stale", "--force") if req.force else
                         grade_store.state_of(self.out, sub.student, ex.dir, fp))
                self.states.append((sub, ex, state))
                if state.current:
                    resumed += 1
                    continue
                wanted += 1
                jobs.append(Job(len(jobs), sub.student, ex, self.seed, fingerprint=fp, reason=state.reason,
                                name=sub.name))
            if wanted and not req.status_only:
                self.prepared[sub.student] = prepared
            else:
                shutil.rmtree(prepared.workspace, ignore_errors=True)
        if not req.status_only:
            self._save_class()
        return subs, jobs, resumed, notes

    def _fingerprint(self, sub: Submission, ex: Exercise, prepared: Prepared, versions: dict) -> dict:
        """What this student x exercise is graded from (src/lumen_ex/classroom/store.py ``fingerprint``)."""
        problem = prepared.refused or prepared.missing.get(ex.slug, "")
        files = {} if problem else grade_store.hash_files(prepared.workspace / ex.dir)
        return grade_store.fingerprint(name=sub.name, entry=sub.source.name, kind=sub.kind, files=files,
                                       problem=problem, versions=versions, seed=self.seed, device=self.req.device)

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
        from lumen_ex.classroom.leftovers import scratch_prefix, sweep

        sweep(self._ensure_out())       # what a run killed by SIGKILL left (src/lumen_ex/classroom/leftovers.py)
        return Path(tempfile.mkdtemp(prefix=scratch_prefix(), dir=self.out)).absolute()

    def _save_class(self) -> None:
        """DIR/class.json: the class seed, every entry found and skipped, the roster's match."""
        from lumen_ex.classroom.roster import match_roster

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
            if getattr(self, "scratch", None) is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)
        return Outcome(subs, 0, resumed, notes=notes, seed=self.seed, states=self.states, skipped=self.skipped,
                       regraded=[(j.name, j.exercise.dir, j.reason) for j in jobs])

    # running -----------------------------------------------------------------------------------

    def run(self) -> Outcome:
        req = self.req
        self.scratch = None
        try:
            subs, jobs, resumed, notes = self.plan()
        except BaseException:
            if self.scratch is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        scratch, prepared = self.scratch, self.prepared
        outcome = Outcome(subs, 0, resumed, notes=notes, seed=self.seed, skipped=self.skipped,
                          regraded=[(j.name, j.exercise.dir, j.reason) for j in jobs])
        planned = getattr(self.progress, "planned", None)
        if planned is not None:
            planned(outcome.regraded)
        show_notes = getattr(self.progress, "notes", None)     # before grading starts (src/lumen_ex/cli/classroom.py)
        if show_notes is not None:
            show_notes(notes)
        if not jobs:
            shutil.rmtree(scratch, ignore_errors=True)
            if self.progress:
                self.progress.begin(0, resumed, len(subs), "")
                self.progress.end()
            return outcome
        sandbox, note = self.sandbox, self.note
        outcome.sandbox = sandbox.split(":")[0]
        by_student = {s.student: s for s in subs}
        run_id = grade_store.new_run_id()
        # --force: the new results wait in a staging folder until the whole run is done
        dest = grade_store.staging_dir(self.out, run_id) if req.force else self.out
        procs: list[GradingProcess] = []
        pending: deque[Job] = deque(jobs)
        remaining = {s: sum(j.student == s for j in jobs) for s in by_student}
        counts = {"done": 0, "fail": 0, "error": 0}
        described: set[str] = set()
        start_failures = 0
        saved = {}
        if threading_main():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                saved[sig] = signal.signal(sig, _raise_interrupt)
        if self.progress:
            self.progress.begin(len(jobs), resumed, len(subs), note)

        def finish(job: Job, result: RunResult) -> None:
            record(dest, job.student, job.exercise, result, job.fingerprint, run_id)
            counts["done"] += 1
            if result.status is Status.FAIL:
                counts["fail"] += 1
            elif result.status is Status.ERROR:
                counts["error"] += 1
            outcome.graded += 1
            remaining[job.student] -= 1
            if remaining[job.student] == 0:
                done = prepared.pop(job.student, None)
                if done is not None:
                    shutil.rmtree(done.workspace, ignore_errors=True)
            if self.progress:
                self.progress.finished(Finished(job.student, job.exercise, result, counts["done"], len(jobs),
                                                counts["fail"], counts["error"]))

        def workspace_for(job: Job) -> Path | None:
            """The student's throwaway workspace, or None after recording why this job cannot run."""
            if job.student not in described:
                described.add(job.student)
                describe_submission(dest, by_student[job.student], prepared[job.student])
            p = prepared[job.student]
            unpreparable = unpreparable_result(job.exercise, p.refused, p.missing, sandbox=self.sandbox_info,
                                               device=req.device, seed=job.seed)
            if unpreparable is not None:
                finish(job, unpreparable)
                return None
            return p.workspace

        def replace(proc: GradingProcess, reason: str | None) -> None:
            """Stop ``proc``; its running job gets an error document, its queued jobs go back."""
            nonlocal start_failures
            proc.stop(grace=5.0 if reason else STOP_GRACE_S)
            running = proc.queue[0] if proc.queue and proc.queue[0].started is not None else None
            requeue = [j for j in proc.queue if j is not running]
            for j in reversed(requeue):
                j.started = None
                pending.appendleft(j)
            if running is not None:
                why = reason or f"the grading process died ({proc.exit_description()}) while grading this submission"
                finish(running, grader_error_result(running.exercise, why, sandbox=self.sandbox_info,
                                                    device=req.device, seed=running.seed,
                                                    duration=time.monotonic() - running.started))
            elif not proc.ready:
                start_failures += 1
                if start_failures >= MAX_START_FAILURES:
                    raise GraderUnavailable(
                        f"the grading processes keep failing to start ({proc.exit_description()}; log: "
                        f"{proc.log_tail() or 'empty'})", f"See {proc.log}, and run `lumen-ex doctor`")
            procs[procs.index(proc)] = GradingProcess(sandbox, proc.log, str(self.out))

        try:
            n = max(1, min(req.jobs, len(jobs)))
            logs = self.out / ".logs"
            procs.extend(GradingProcess(sandbox, logs / f"grader-{i}.log", str(self.out)) for i in range(n))
            while pending or any(p.queue for p in procs):
                # hand out work: one running and one queued per process (no queueing near the end,
                # so that a slow check does not hold back the one behind it)
                for proc in procs:
                    while pending and (not proc.queue or (len(proc.queue) < 2 and len(pending) > len(procs))):
                        job = pending.popleft()
                        ws = workspace_for(job)
                        if ws is not None:
                            proc.send(job, ws, req.device, note)
                fds = {p.reply_fd: p for p in procs if not p.closed}
                readable, _, _ = select.select(list(fds), [], [], 0.5)
                for fd in readable:
                    proc = fds[fd]
                    messages, eof = proc.receive()
                    for msg in messages:
                        self._handle(proc, msg, finish)
                    if eof:
                        replace(proc, None)
                now = time.monotonic()
                for proc in list(procs):
                    head = proc.queue[0] if proc.queue else None
                    if head is not None and head.started is not None:
                        limit = self._timeout(head.exercise)
                        if now - head.started > limit:
                            replace(proc, f"grading ran past its time limit of {limit:g} s and was stopped "
                                          "(the submission may hang or stall the grader)")
                    elif proc.proc.poll() is not None:
                        replace(proc, None)
                    elif not proc.ready and now - proc.spawned > STARTUP_LIMIT_S:
                        replace(proc, None)
            for proc in procs:
                proc.stop(polite=True)
            if req.force:
                grade_store.commit_staging(self.out, dest)
        except KeyboardInterrupt:
            outcome.interrupted = True
            signal.signal(signal.SIGINT, signal.SIG_IGN)     # the clean-up below must finish
            for sig in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
            for proc in procs:      # all at once: each gets its SIGTERM before anyone's grace period
                proc.terminate()
            for proc in procs:
                self._drain(proc, finish)
                proc.stop()
        finally:
            for proc in procs:
                if not proc.closed:
                    proc.stop(grace=5.0)
            shutil.rmtree(scratch, ignore_errors=True)
            if req.force and Path(dest).is_dir():     # an interrupted --force keeps the results before it
                shutil.rmtree(dest, ignore_errors=True)
                outcome.notes.append("--force was interrupted: none of its new results were kept, the results "
                                     "from before it stand (run it again to regrade)")
            if threading_main():
                for sig, handler in saved.items():
                    signal.signal(sig, handler)
                if outcome.interrupted:
                    signal.signal(signal.SIGINT, signal.default_int_handler)
            if self.progress:
                self.progress.end()
        return outcome

    def _drain(self, proc: GradingProcess, finish) -> None:
        """Record any result a stopping process still managed to send."""
        deadline = time.monotonic() + STOP_GRACE_S
        while not proc.closed and proc.proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.reply_fd], [], [], 0.2)
            if ready:
                messages, eof = proc.receive()
                for msg in messages:
                    self._handle(proc, msg, finish)
                if eof:
                    break
        messages, _ = proc.receive() if not proc.closed else ([], True)
        for msg in messages:
            self._handle(proc, msg, finish)

    def _handle(self, proc: GradingProcess, msg: dict, finish) -> None:
        """A result sent before a stop is a real verdict (a process that is told to stop sends none)."""
        if msg.get("ready"):
            proc.ready = True
        elif "pid" in msg and isinstance(msg["pid"], int):
            proc.worker_pids.add(msg["pid"])
        elif "start" in msg:
            for job in proc.queue:
                if job.id == msg["start"]:
                    job.started = time.monotonic()
                    began = getattr(self.progress, "started_check", None)    # "now: alice attention"
                    if began is not None:
                        began(job.student, job.exercise)
        elif "done" in msg:
            job = next((j for j in proc.queue if j.id == msg["done"]), None)
            if job is None:
                return
            proc.queue.remove(job)
            proc.worker_pids.clear()
            try:
                result = RunResult.from_dict(msg["result"])
            except (KeyError, TypeError, ValueError) as exc:
                result = grader_error_result(job.exercise, f"the grading process sent an invalid result ({exc})",
                                             sandbox=self.sandbox_info, device=self.req.device, seed=job.seed)
            finish(job, result)

    def _timeout(self, ex: Exercise) -> float:
        if self.req.timeout:
            return float(self.req.timeout)
        return ex.times.startup_seconds + ex.times.run_seconds + TIMEOUT_MARGIN_S

    def _ensure_out(self) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        return self.out


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def grade_class(req: GradeRequest, progress: Progress | None = None) -> Outcome:
    """Grade every submission of ``req`` that has no result yet, then write the gradebook and report."""
    if not req.exercises:
        raise UsageError("no exercise chosen", "Pass --exercise N (repeatable) or --all")
    if req.jobs < 1:
        raise UsageError("--jobs must be at least 1", "Pass --jobs 1 or more")
    outcome = Batch(req, progress).run()
    return outcome


def class_status(req: GradeRequest) -> Outcome:
    """``lumen-ex grade --status``: what is up to date, stale, missing or failed, without grading."""
    if not req.exercises:
        raise UsageError("no exercise chosen", "Pass --exercise N (repeatable) or --all")
    return Batch(with_changes(req, status_only=True), None).status()
