"""``lumen-ex grade``: grade a whole class, N submissions at a time, each in its own sandbox.

    lumen-ex grade SUBMISSIONS (--exercise N ... | --all) --out DIR [--jobs N] [--sandbox ...]

How it works:

- SUBMISSIONS is read by src/lumen_ex/classroom/entries.py and submissions.py: one student per folder
  or zip, each given a throwaway workspace in a scratch folder (DIR/.scratch-*, removed at the end).
  Every file is read through src/lumen_ex/core/bounded.py (regular files only, size caps) and looking
  through a submission has an entry and time budget, so a FIFO, a link to /dev/zero or a zip bomb is that student's ``fail``
  row with the reason, never a hang or a crash of the run.
- The grading processes run isolated (``python -I`` in ``/``, src/lumen_ex/core/trusted.py): a student's
  ``json.py`` in the folder this command was started from is never imported by them.
- Up to ``--jobs`` warm grading processes (src/lumen_ex/classroom/grading_main.py; one per CHECKS_PER_PROCESS
  checks, so a rerun of a few checks starts one) each import torch once and then run
  ``lumen_ex.harness.check.run_check`` for one student x exercise after another, every check against fresh
  sandboxed workers (forked from the process's zygote: in a bwrap sandbox, or under docker in the
  process's one slot container), with the next check's worker started while the current one's
  tests run.
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
  (and its slot container) on the way out; whatever is left after a grace period is killed by
  process group (a slot's zygote then sees its socket close, and its container ends). The
  gradebook and report are written for what was graded, and the command exits with 130.
- The unisolated mode (``--sandbox none``, or ``auto`` finding no sandbox) is refused unless
  ``--unsafe``: a class's code must not run with the instructor's permissions by accident.

The gradebook and the class report are views of the documents on disk (src/lumen_ex/classroom/outputs.py), so
they are rebuilt whole after every run, resumed or not.

This module runs the plan (src/lumen_ex/classroom/planning.py: what to grade and why, the sandbox
and the seed) on the grading processes (src/lumen_ex/classroom/grading_processes.py); each result is
stored at once (src/lumen_ex/classroom/store.py), and a check that could not finish gets its
document from src/lumen_ex/classroom/ungraded.py.
"""

from __future__ import annotations

import select
import shutil
import time
from collections import deque
from contextlib import ExitStack
from dataclasses import replace as with_changes
from pathlib import Path

from lumen_ex.classroom import store as grade_store
from lumen_ex.classroom.batch_types import Finished, GradeRequest, Job, Outcome, Progress
from lumen_ex.classroom.grading_processes import STOP_GRACE_S, GradingProcess
from lumen_ex.classroom.messages import JobDone, Ready, Reply, Started, WorkerPid
from lumen_ex.classroom.planning import Planner
from lumen_ex.classroom.store import describe_submission, record
from lumen_ex.classroom.ungraded import grader_error_result, unpreparable_result
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.errors import LumenError, UsageError
from lumen_ex.core.results import RunResult, Status
from lumen_ex.sandbox.processes import signals_deferred, signals_interrupt

TIMEOUT_MARGIN_S = 60.0          # beyond an exercise's own start-up + run limits
MAX_START_FAILURES = 3
STARTUP_LIMIT_S = 180.0          # a grading process that has not imported torch by then is replaced
# A grading process costs about 3 s of CPU before its first check (two torch imports: its own and its
# zygote's), as much as ten or so checks: a batch starts one per CHECKS_PER_PROCESS checks, up to --jobs.
# On two cores, two processes for four checks of exercise 1 took 4.5 s where one took 3.2 s.
CHECKS_PER_PROCESS = 8


def processes_for(checks: int, jobs: int) -> int:
    """How many grading processes a batch of ``checks`` starts with ``--jobs jobs``: one per
    CHECKS_PER_PROCESS checks (rounded up), at least one, at most ``jobs``."""
    return max(1, min(jobs, -(-checks // CHECKS_PER_PROCESS)))


class GraderUnavailable(LumenError):
    exit_code = 3


class Batch(Planner):
    """One run: the plan (:class:`lumen_ex.classroom.planning.Planner`), graded by up to ``--jobs``
    grading processes (:func:`processes_for`: a small batch does not pay for processes it cannot keep busy)."""

    def __init__(self, req: GradeRequest, progress: Progress | None):
        super().__init__(req)
        self.progress = progress

    def run(self) -> Outcome:
        req = self.req
        self.scratch = None
        try:
            subs, jobs, resumed, notes = self.plan()
        except BaseException:
            if self.scratch is not None:     # made part-way through the plan
                shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        scratch, prepared = self.scratch, self.prepared
        assert scratch is not None           # a plan that returns has made it
        outcome = Outcome(subs, 0, resumed, notes=notes, seed=self.seed, skipped=self.skipped,
                          regraded=[(j.name, j.exercise.dir, j.reason) for j in jobs])
        if self.progress is not None:      # before grading starts (src/lumen_ex/cli/classroom.py)
            self.progress.planned(outcome.regraded)
            self.progress.notes(notes)
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
        handlers = ExitStack()
        handlers.enter_context(signals_interrupt())     # SIGTERM and SIGHUP stop the run as Ctrl-C does
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
                assert running.started is not None     # chosen above only once started
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
            n = processes_for(len(jobs), req.jobs)
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
                        replace(proc, proc.broken or None)
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
            handlers.enter_context(signals_deferred())     # the clean-up below must finish
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
            handlers.close()        # the signal handlers from before the run, its clean-up done
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

    def _handle(self, proc: GradingProcess, msg: Reply, finish) -> None:
        """A result sent before a stop is a real verdict (a process that is told to stop sends none)."""
        if isinstance(msg, Ready):
            proc.ready = True
        elif isinstance(msg, WorkerPid):
            proc.worker_pids.add(msg.pid)
        elif isinstance(msg, Started):
            for queued in proc.queue:
                if queued.id == msg.id:
                    queued.started = time.monotonic()
                    if self.progress is not None:      # "now: alice attention"
                        self.progress.started_check(queued.student, queued.exercise)
        elif isinstance(msg, JobDone):
            job = next((j for j in proc.queue if j.id == msg.id), None)
            if job is None:
                return
            proc.queue.remove(job)
            proc.worker_pids.clear()
            try:
                result = msg.run_result()
            except (KeyError, TypeError, ValueError) as exc:
                result = grader_error_result(job.exercise, f"the grading process sent an invalid result ({exc})",
                                             sandbox=self.sandbox_info, device=self.req.device, seed=job.seed)
            finish(job, result)

    def _timeout(self, ex: Exercise) -> float:
        if self.req.timeout:
            return float(self.req.timeout)
        return ex.times.startup_seconds + ex.times.run_seconds + TIMEOUT_MARGIN_S


def grade_class(req: GradeRequest, progress: Progress | None = None) -> Outcome:
    """Grade every submission of ``req`` whose result is missing or no longer true of it (every one
    with ``req.force``) into ``req.out``'s result documents. The gradebook, the report and the
    feedback files are written from those documents afterwards (src/lumen_ex/classroom/class_run.py)."""
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
    return Planner(with_changes(req, status_only=True)).status()
