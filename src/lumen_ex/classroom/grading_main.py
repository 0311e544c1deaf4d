"""One warm grading process of ``lumen-ex grade``: many checks, one torch import.

    python -I -m lumen_ex.classroom.grading_main REQUEST_FD REPLY_FD SANDBOX TAG

The batch coordinator (src/lumen_ex/classroom/scheduler.py) starts ``--jobs`` of these. Each imports torch and pytest
once, then runs ``lumen_ex.harness.check.run_check`` for one student x exercise after another, each against
freshly sandboxed workers, exactly as ``lumen-ex check`` does (the verdicts are the same; only the
harness's start-up is saved). Jobs arrive as JSON lines on REQUEST_FD; replies go out as JSON lines
on REPLY_FD (learner code never runs in this process and cannot reach either pipe), both framed and
typed by src/lumen_ex/classroom/messages.py:

    {"ready": true}                      jobs may start (torch is imported with the first one)
    {"start": ID}                        job ID is being graded from now on (its time limit starts)
    {"pid": PID}                         a sandboxed worker was started (its process group is PID)
    {"done": ID, "result": {...}}        the result document (RunResult.to_dict())

The coordinator keeps up to two jobs queued here. While the first is graded, the sandboxed worker
of the second is already started. Workers are forked from a zygote of this process's own, which
imported torch once: in a bwrap sandbox (src/lumen_ex/sandbox/zygote.py), or under docker in one
container of this process's own, its slot (src/lumen_ex/sandbox/docker_slot.py), the harness staying
here. No check waits for a torch import.

SANDBOX is ``bwrap``, ``none`` or ``docker:<image>`` (already chosen, and refused or allowed, by the
coordinator). TAG only labels the process (the output folder), so that it can be found in ``ps``.
It is started isolated (src/lumen_ex/core/trusted.py: ``-I``, working folder ``/``, no PYTHON* variables), so
that a student's ``json.py`` or ``sitecustomize.py`` in the folder the instructor ran ``lumen-ex
grade`` from is never imported here; the workspaces it is sent are absolute paths.
SIGTERM (and SIGHUP) raise KeyboardInterrupt (src/lumen_ex/sandbox/processes.py), so the check in
progress kills its workers (or its container) on the way out.
"""

from __future__ import annotations

import dataclasses
import gc
import select
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from lumen_ex.classroom.messages import (
    QUIT,
    JobDone,
    JobRequest,
    LineReader,
    Ready,
    Reply,
    Request,
    Started,
    WorkerPid,
    parse_request,
    write_message,
)
from lumen_ex.core import catalog
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.errors import LumenError
from lumen_ex.core.results import SandboxInfo, grader_error, join_notes, one_line
from lumen_ex.harness.check import run_check
from lumen_ex.harness.check import worker_spec as check_worker_spec
from lumen_ex.sandbox.base import Availability, Launcher
from lumen_ex.sandbox.processes import ignore_stop_signals, signals_interrupt
from lumen_ex.sandbox.select import forking, from_spec
from lumen_ex.sandbox.zygote import ZygoteLauncher

STOPPING = False
_HOLD = 0           # > 0 while a worker is being started (see _signals_held)
_PENDING = False


def _interrupt(signum, frame):
    global STOPPING, _PENDING
    STOPPING = True     # a check cut short is no verdict: nothing more is sent after this
    ignore_stop_signals()   # once: the cleanup that follows must not be interrupted
    if _HOLD:
        _PENDING = True
        return
    raise KeyboardInterrupt(f"signal {signum}")


class Channel:
    """This end of the two pipes: jobs in, replies out (src/lumen_ex/classroom/messages.py)."""

    def __init__(self, request_fd: int, reply_fd: int):
        self.requests = LineReader(request_fd, chunk=1 << 16)
        self.reply_fd = reply_fd

    def send(self, message: Reply) -> None:
        write_message(self.reply_fd, message)

    def receive(self, block: bool) -> list[Request]:
        """Requests that have arrived (waiting for at least one when ``block``); QUIT at end of input."""
        out: list[Request] = []
        while True:
            ready, _, _ = select.select([self.requests.fd], [], [], None if block and not out else 0)
            if not ready:
                return out
            lines = self.requests.read()
            if self.requests.eof:
                out.append(QUIT)
                return out
            out += [parse_request(line) for line in lines if line.strip()]
            if out:
                block = False


def job_worker_spec(job: JobRequest):
    """The WorkerSpec that ``lumen_ex.harness.check.check_here`` will ask for this job (so it can be started early)."""
    ex = catalog.load().find(job.exercise)
    root = Path(job.workspace).resolve()          # the workspace's root, as run_check finds it
    return check_worker_spec(ex, root, root / ex.dir / ex.file, job.device)


class _signals_held:
    """Defer a stop signal until the block ends (a worker being started must be recorded first).

    Not a signal mask: a started process inherits the mask, and the learner's worker must not."""

    def __enter__(self):
        global _HOLD
        _HOLD += 1

    def __exit__(self, *exc):
        global _HOLD, _PENDING
        _HOLD -= 1
        if _HOLD == 0 and _PENDING and exc[0] is None:
            _PENDING = False
            raise KeyboardInterrupt("stop signal (deferred)")
        return False


def make_prelauncher(inner, on_launch):
    """A launcher that hands out a worker started ahead of time when the spec matches."""

    class Prelauncher(Launcher):
        name = inner.name
        isolated = inner.isolated

        def __init__(self) -> None:
            self.ready: dict = {}
            self.started: list = []     # every worker started for the jobs in hand, for discard()

        @classmethod
        def availability(cls) -> Availability:
            return Availability(True)

        def command(self, spec, fds):
            return inner.command(spec, fds)

        def note(self) -> str:
            return inner.note()

        def enforcement(self, spec):
            return inner.enforcement(spec)

        def prelaunch(self, spec) -> None:
            if spec not in self.ready:
                with _signals_held():
                    # started ahead, so it loads what a check would otherwise wait for (WorkerSpec.warm);
                    # kept under the spec the check will ask for (equal whatever its ``warm``)
                    launched = inner.launch(dataclasses.replace(spec, warm=True))
                    self.ready[spec] = launched
                    self.started.append(launched)
                    on_launch(launched.proc.pid)

        def keep(self, specs) -> None:
            """Kill the workers started ahead of time for any spec but these."""
            for spec in [s for s in self.ready if s not in specs]:
                self.ready.pop(spec).kill()
            kept = set(map(id, self.ready.values()))
            self.started = [w for w in self.started if id(w) in kept]   # the others are the checks' own

        def discard(self) -> None:
            """Kill every worker this process started that may still run (Launched.kill is idempotent),
            and the zygote they were forked from."""
            for launched in [*self.ready.values(), *self.started]:
                launched.kill()
            self.ready.clear()
            self.started.clear()
            if isinstance(inner, ZygoteLauncher):
                inner.close()

        def launch(self, spec):
            launched = self.ready.pop(spec, None)
            if launched is not None and launched.alive():
                return launched
            if launched is not None:
                launched.kill()
            with _signals_held():   # a stop signal now would leave a worker nobody knows about
                launched = inner.launch(spec)
                self.started.append(launched)
                on_launch(launched.proc.pid)
            return launched

    return Prelauncher()


def _warm_up(inner, job: JobRequest) -> None:
    """Before the first job: start the zygote (if any), then import the harness here (torch and
    pytest with it) while the zygote imports its own torch."""
    if isinstance(inner, ZygoteLauncher):
        try:
            inner.start(job_worker_spec(job))
        except Exception:  # noqa: BLE001  a job that cannot be described fails in its check instead
            pass
    from lumen_ex.harness import client, plugin, proxy, runner  # noqa: F401  (they import torch and pytest)


def grade_one(job: JobRequest, launcher, sessions=None) -> dict:
    """One job's result document; ``sessions``: the process's kept pytest sessions, if it keeps them."""
    started = time.monotonic()
    try:
        result = run_check(job.exercise, workspace=Path(job.workspace), seed=job.seed,
                           device=job.device, record=False, launcher=launcher, run_tests=sessions)
    except LumenError as exc:
        return job_error_document(catalog.load().find(job.exercise), str(exc), job, launcher, started)
    except Exception as exc:  # noqa: BLE001  every job gets a document
        return job_error_document(catalog.load().find(job.exercise),
                              f"the grader failed: {type(exc).__name__}: {exc}", job, launcher, started)
    if job.note:
        result.sandbox.note = join_notes(result.sandbox.note, job.note)
    return result.to_dict()


def job_error_document(ex: Exercise, message: str, job: JobRequest, launcher, started: float) -> dict:
    return grader_error(ex.summary(), one_line(message, "the grader failed"),
                        sandbox=SandboxInfo(launcher.name, launcher.isolated, {}, job.note),
                        device=job.device, seed=job.seed, duration=time.monotonic() - started).to_dict()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    request_fd, reply_fd, sandbox = int(args[0]), int(args[1]), args[2]
    with signals_interrupt(_interrupt):     # SIGTERM, SIGHUP: stop (see _interrupt)
        return serve(Channel(request_fd, reply_fd), sandbox)


def serve(channel: Channel, sandbox: str) -> int:
    """Grade the jobs sent on ``channel`` until it ends; the exit code."""
    launcher: Any = None   # the Prelauncher when workers are ours (warm), else the backend itself
    warm = False        # whether this backend's workers can be started in advance (not docker's)
    queue: deque[Request] = deque()
    frozen = False
    sessions = None     # the kept pytest sessions (src/lumen_ex/harness/kept_session.py), when workers are ours
    try:
        inner = forking(from_spec(sandbox))
        warm = inner.keeps_workers
        launcher = make_prelauncher(inner, lambda pid: channel.send(WorkerPid(pid))) if warm else inner
        channel.send(Ready())   # torch is imported with the first job, while its worker starts
        while True:
            if not queue:
                queue.extend(channel.receive(block=True))
            queue.extend(channel.receive(block=False))
            job = queue.popleft()
            if not isinstance(job, JobRequest):
                return 0
            channel.send(Started(job.id))
            if not frozen:
                _warm_up(inner, job)
            upcoming = next((j for j in queue if isinstance(j, JobRequest)), None)
            upcoming_spec = None
            if warm:
                # this job's worker (already started, unless it is the first) and the next one's
                for j in filter(None, (job, upcoming)):
                    try:
                        spec = job_worker_spec(j)
                        launcher.prelaunch(spec)
                    except Exception:  # noqa: BLE001  started normally later instead
                        continue
                    if j is upcoming:
                        upcoming_spec = spec
            if warm and sessions is None:
                from lumen_ex.harness.kept_session import KeptSessions  # lazy: imports pytest and torch

                sessions = KeptSessions()
            document = grade_one(job, launcher, sessions)
            if not frozen:      # torch, pytest, the harness and the suites are imported now, for good:
                gc.collect()    # keep the garbage collector off them for every later job
                gc.freeze()
                frozen = True
            if warm:
                launcher.keep({upcoming_spec} if upcoming_spec is not None else set())
            if STOPPING:    # pytest turns an interrupt into a short run: never report it as a result
                return 130
            channel.send(JobDone(job.id, document))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    finally:
        if launcher is not None and warm:
            launcher.discard()
        if sessions is not None:
            sessions.close()


if __name__ == "__main__":
    from lumen_ex.core.trusted import quick_exit

    quick_exit()
    sys.exit(main())
