"""The pre-warm of ``lumen-ex watch``: what is made ready for the next check while the learner types.

A cold check spends most of its time starting things: a sandboxed worker that imports torch, and a
pytest session that is configured and collects the hidden suite. Between two saves watch mode
prepares both in advance, so that a re-check costs the learner's import, the hidden tests and
little else:

- the next worker (:class:`Prewarm`): launched in the sandbox as soon as a result has been shown
  (under bwrap forked from the session's zygote, which imported torch once), it sends its hello and
  waits for its ``load`` request. A forked worker holds a copy of the workspace made when it was
  forked; one whose copy is no longer the workspace's when the check begins is replaced
  (``Launcher.up_to_date``). Every check gets a fresh
  one (one run cannot influence the next). The used worker is SIGKILLed at once (``KeptWorker``,
  src/lumen_ex/learner/prewarm_late.py); waiting for it and removing its cgroup (:meth:`Prewarm.reap`)
  happen after the result is shown. A worker that dies while starting is replaced, at most
  RESPAWN_FAILURES times in a row;
- the next check's pytest session (:meth:`Prewarm.prepare_suite`): a
  :class:`~lumen_ex.harness.prepared_session.PreparedSession`, configured and collected in a thread
  that then waits at pytest's run loop until the check hands it the worker pool, the same session
  type a grading process keeps for a whole class. It is kept from one check to the next while it
  fits them (the same seed and device: watch mode's and the playground's seed stays, the check
  server draws a new one for every check), and ends with a run that raises (a cancelled or stopped
  check: the check gets the tests run so far) or with :meth:`Prewarm.close`.

:func:`watch_launcher` chooses the launcher (the session's and the playground's);
:class:`GuardedLauncher` refuses to launch once watching is stopping, so that a check interrupted
by Ctrl-C does not replace the worker it just lost. When to prepare is decided by the session
(src/lumen_ex/learner/watch_session.py); this module only knows how.

``harness.client``, ``harness.proxy``, ``harness.runner`` and ``harness.prepared_session`` import torch
and pytest, which ``lumen-ex watch`` must import only after its first worker is launched (the two
torch imports then overlap): they are imported where first needed, never at the top of this module;
the class built on them is in prewarm_late.py, imported the same way.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from lumen_ex.core.errors import SandboxUnavailable
from lumen_ex.sandbox.base import Backend, Launched, Launcher, WorkerSpec
from lumen_ex.sandbox.select import best_host_launcher, forking, select_backend

if TYPE_CHECKING:   # for annotations only: they import torch and pytest (see above)
    from lumen_ex.core.catalog import Exercise
    from lumen_ex.harness.prepared_session import PreparedSession
    from lumen_ex.learner.prewarm_late import KeptWorker

RESPAWN_FAILURES = 3    # give up pre-launching after this many workers in a row die while idle


class WatchStopped(RuntimeError):
    """Watching is ending: no more workers are launched."""


def watch_launcher(sandbox: str) -> tuple[Launcher, str]:
    """The launcher watch mode uses for ``sandbox``, and a warning to show (empty when none)."""
    backend: Backend
    if sandbox == "auto":
        backend, warning = best_host_launcher()
    else:
        backend, warning = select_backend(sandbox)
    # Each check's fresh worker forked from a warm zygote: bwrap's of this process, docker's in one
    # container of this process kept for the session (its slot): a fork, not a torch import.
    launcher = forking(backend)
    if not isinstance(launcher, Launcher):   # docker where no slot can run: every check a container of its own
        raise SandboxUnavailable(
            "--sandbox docker cannot be kept warm here (its workers are forked in a container, which "
            "needs seccomp filters and SO_PASSCRED on x86_64 Linux)",
            "Use --sandbox bwrap (or auto), and `lumen-ex check --sandbox docker` for a check in the container")
    return launcher, warning


class SharedLauncher:
    """One launcher for every session of a process that grades one exercise after another (the
    check server, src/lumen_ex/learner/warm_server.py; the playground, src/lumen_ex/playground/checks.py).

    Its zygote (or docker slot) imports torch once, for all of them: opening another exercise then
    costs a pytest session, not a torch import (about 1.8 s down to 0.05 s on a 2-core machine).
    The zygote never runs a learner's code, and every worker forked from it gets the sandbox, the
    limits and the copy of the workspace of its own check, as the grading processes of `lumen-ex
    grade` fork every exercise's workers from one zygote. A session made with it leaves it running
    when it closes (killing the workers it started itself); :meth:`close` stops it."""

    def __init__(self, sandbox: str):
        self.launcher, self.warning = watch_launcher(sandbox)

    def close(self) -> None:
        self.launcher.close()


class GuardedLauncher:
    """The session's launcher, which refuses to start workers once watching is being stopped
    (a check interrupted by Ctrl-C would otherwise replace the worker it just lost).

    It also keeps a spare for a check that asks for a fresh worker in the middle of its suite
    (exercise 5's memory test, src/lumen_ex/harness/proxy.py ``fresh_worker``: a worker without the
    warm-up, whose memory baseline is torch alone). Once a check of this session has asked for one,
    :meth:`keep_spare` launches the next while the learner reads, and :meth:`launch` hands it out
    instead of starting one then: the check no longer waits for a torch import. A spare no check
    used (the suite failed before it needed one) is kept for the next check: no learner code ran in it.
    """

    def __init__(self, launcher: Launcher, *, owned: bool = True):
        self.inner = launcher
        self.owned = owned           # False: a SharedLauncher's, which other sessions go on using
        self.refuse = False
        self._launched: list = []    # what this launcher started and may still be running
        self.spare: Launched | None = None   # a worker without the warm-up, its hello not read
        self.spare_spec: WorkerSpec | None = None   # ... and the spec it was launched with
        self.wants_spare = False     # a check of this session asked for such a worker

    def launch(self, spec: WorkerSpec):
        if self.refuse:
            raise WatchStopped("watching is stopping: no new worker")
        if not spec.warm:
            self.wants_spare = True
            if (self.spare is not None and self.spare_spec == spec and self.spare.alive()
                    and self.inner.up_to_date(self.spare)):
                spare, self.spare = self.spare, None
                return spare
            self.drop_spare()
        launched = self.inner.launch(spec)
        self._launched = [w for w in self._launched if w.proc.poll() is None] + [launched]
        return launched

    def keep_spare(self, spec: WorkerSpec) -> None:
        """After a check: launch a spare (``spec`` without the warm-up) if checks here ask for one."""
        if self.spare is not None and not self.spare.alive():   # it died while waiting
            self.drop_spare()
        if self.wants_spare and self.spare is None and not self.refuse:
            cold = replace(spec, warm=False)
            self.spare, self.spare_spec = self.inner.launch(cold), cold
            self._launched.append(self.spare)

    def drop_spare(self) -> None:
        """Kill the spare, if any, and wait for it (its cgroup removed)."""
        spare, self.spare = self.spare, None
        if spare is not None:
            spare.kill()

    def launched(self) -> list:
        """The workers launched here that are still running (a cancelled check kills them)."""
        return [w for w in self._launched if w.proc.returncode is None]

    def start(self, spec: WorkerSpec) -> bool:
        return False if self.refuse else self.inner.start(spec)

    def close(self) -> None:
        """Stop what the wrapped launcher keeps (its zygote, with any worker it forked); when it is
        shared (not ``owned``), only the workers launched here are killed, and it keeps running."""
        if self.owned:
            self.inner.close()
            return
        for launched in self._launched:
            launched.kill()              # idempotent: most are killed already
        self._launched = []

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold Ctrl-C (and SIGTERM) until the block ends, then raise KeyboardInterrupt."""
    pending: list[int] = []
    saved = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            saved[signum] = signal.signal(signum, lambda n, f: pending.append(n))
    except ValueError:   # not the main thread: signals are not ours to handle
        pass
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        if pending:   # delivered now, to whatever handles it outside the block
            signal.raise_signal(pending[0])


# -------------------------------------------------------------------------------------------------
# The next worker


class Prewarm:
    """The worker for the next check, launched in advance, and the next check's pytest session.

    ``next`` is the waiting worker (a KeptWorker, its hello read or not yet), ``prepared`` the
    collected session; a check takes the worker with :meth:`take_worker` and runs in the session
    that :meth:`prepared_for` gives it, which stays prepared for the next check.
    :meth:`close` ends both and launches nothing more.
    """

    def __init__(self, launcher: GuardedLauncher, spec: WorkerSpec, *, startup_seconds: float):
        self.launcher, self.spec = launcher, spec
        self.startup_seconds = startup_seconds
        self.next: KeptWorker | None = None   # the worker launched for the next check
        self.dead: list = []                # Launched workers killed, not yet waited for
        self.prepared: PreparedSession | None = None
        self.failures = 0                   # workers in a row that died while starting
        self.closed = False

    def spawn(self) -> None:
        """Launch the worker for the next check, unless one is waiting already."""
        if self.next is not None or self.failures >= RESPAWN_FAILURES or self.closed:
            return
        with deferred_interrupts():   # a Ctrl-C here would orphan the worker and its cgroup
            from lumen_ex.learner.prewarm_late import KeptWorker  # lazy: imports torch

            self.next = KeptWorker(self.launcher.launch(self.spec), self.dead)
            self.launcher.keep_spare(self.spec)

    def take_hello(self) -> bool:
        """Read the waiting worker's hello (it is there: its pipe is readable). False when the
        worker died while starting: it is discarded and counted, and the caller launches another."""
        # lazy: imports torch
        from lumen_ex.harness.client import WorkerFailure

        worker = self.next
        if worker is None or worker.hello is not None:
            return True
        try:
            worker.wait_hello(time.monotonic() + self.startup_seconds)
            self.failures = 0
        except WorkerFailure:   # it died while starting: try another, a few times at most
            self.discard_next()
            self.failures += 1
            return False
        return True

    def discard_next(self) -> None:
        if self.next is not None:
            worker, self.next = self.next, None
            worker.kill()

    def take_worker(self):
        """The waiting worker for a check, or None (check_here() then launches one itself)."""
        worker, self.next = self.next, None
        # A forked worker holds a copy of the workspace made when it was forked: one that a save of
        # a helper module has left behind is replaced (a fork), as a dead one is.
        if worker is not None and (not worker.alive() or not self.launcher.inner.up_to_date(worker.launched)):
            worker.kill()
            worker = None
        return worker

    def reap(self) -> None:
        """Wait for the killed workers and remove their cgroups (the slow part of killing)."""
        with deferred_interrupts():
            while self.dead:
                self.dead[-1].kill()
                self.dead.pop()

    def prepare_suite(self, ex: Exercise, module_file: str, *, seed: int, device: str, plugins: tuple = ()) -> None:
        """Have the next check's pytest session configured and collected: the one of the last check
        while it lives and fits (the same exercise, file, seed and device), else a new one."""
        if self.closed or (self.prepared is not None and self.prepared.fits(ex, module_file, seed=seed, device=device)):
            return
        self.end_prepared()
        from lumen_ex.harness.prepared_session import PreparedSession  # lazy: imports pytest and torch

        with deferred_interrupts():   # close() must know of every session thread to end it
            self.prepared = PreparedSession(ex, module_file, seed=seed, device=device, plugins=plugins)
        # Wait for it to be collected: pytest's output capture is on while it collects.
        if not self.prepared.wait_collected(60):
            self.end_prepared()

    def prepared_for(self, ex: Exercise, module_file: str, *, seed: int, device: str) -> PreparedSession | None:
        """The prepared session when it fits this check (it stays prepared, for the next check
        too); else None, and it is ended (one session at a time: the check makes its own)."""
        if self.prepared is not None and self.prepared.fits(ex, module_file, seed=seed, device=device):
            return self.prepared
        self.end_prepared()
        return None

    def abort_prepared(self, pool) -> None:
        """End the prepared session's run, interrupted in this thread (Ctrl-C while it ran): the
        tests left end at once and the pool's worker is killed (PreparedSession.abort)."""
        prepared, self.prepared = self.prepared, None
        if prepared is not None:
            prepared.abort(pool)

    def end_prepared(self) -> None:
        if self.prepared is not None:
            prepared, self.prepared = self.prepared, None
            prepared.close()

    def close(self) -> None:
        """End the prepared session, kill the waiting worker and reap; launch nothing more."""
        self.closed = True   # no more launches from here on
        self.launcher.refuse = True
        self.end_prepared()
        self.discard_next()
        self.launcher.drop_spare()
        self.reap()
        self.launcher.close()
