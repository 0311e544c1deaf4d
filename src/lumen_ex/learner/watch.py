"""``lumen-ex watch``: re-check an exercise on every save, answering in a fraction of a second.

A cold ``lumen-ex check`` spends almost all its time importing torch twice (here and in the
worker). Watch mode pays that once:

- the harness is kept warm: torch, pytest, the harness and the hidden suite stay imported in this
  process (after the first check, ``gc.freeze()`` moves all of that out of the garbage collector's
  way, and torch here runs on one thread: on a busy 2-core machine a second OpenMP thread makes
  every small op ~10x slower);
- a worker is kept warm: launched in advance in the sandbox, torch imported, its hello read, waiting
  for its ``load`` request. A check hands it to :func:`lumen_ex.harness.check.check_here`, which loads the
  learner's file into it, runs the suite and kills it. Every check gets a fresh worker (one run
  cannot influence the next); the next one is launched as soon as a result has been shown;
- the next check's pytest session is configured and collected in advance (:class:`PreparedRun`,
  in a thread that waits at pytest's run loop), and runs without the pytest plugins no suite
  needs (``lean``); the used worker is SIGKILLed at once, but waiting for it and removing its
  cgroup happen after the result is shown.

A re-check thus costs the learner's import, the hidden tests themselves and little else (see
bench/watch_latency.py).

Saves are seen through inotify (``IN_CLOSE_WRITE`` / ``IN_MOVED_TO`` on the exercise's folder, so an
editor that saves by writing a temporary file and renaming it over the old one is seen too), or by
polling (mtime, size and inode every 0.1 s, and the content's hash now and then) where inotify is
unavailable or ``--poll`` asks for it (src/lumen_ex/learner/file_events.py). Bursts of events are debounced, and a save that leaves the
content as it was checked last time does not re-check.

The harness here is the ``lumen-ex`` process itself, which never imports from the current folder
or a ``PYTHONPATH`` (src/lumen_ex/core/trusted.py); the only processes it starts are the sandboxed workers,
``python -I`` in a fixed folder with a clean environment (src/lumen_ex/sandbox/base.py).

Docker is not supported here (each docker check is a container run of its own; there is nothing to
keep warm from this side): ``--sandbox docker`` is refused with that explanation, and ``auto`` means
bwrap, else the labelled unisolated mode.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from lumen_ex.core import catalog as catalog_mod
from lumen_ex.core import seeds
from lumen_ex.core.errors import SandboxUnavailable, UsageError
from lumen_ex.core.workspace import Workspace
from lumen_ex.harness.check import DEVICES, worker_spec
from lumen_ex.learner.file_events import POLL_INTERVAL, Change, Inotify, Poller, file_digest
from lumen_ex.sandbox.base import Launcher, WorkerSpec

DEBOUNCE = 0.02         # quiet time after an event before the file is read
MAX_SETTLE = 0.5        # never wait longer than this for a burst of events to end
RESPAWN_FAILURES = 3    # give up pre-launching after this many workers in a row die while idle


# -------------------------------------------------------------------------------------------------
# The session


def watch_launcher(sandbox: str) -> tuple[Launcher, str]:
    """The launcher watch mode uses for ``sandbox``, and a warning to show (empty when none)."""
    from lumen_ex.sandbox.select import best_host_launcher, select_backend

    if sandbox == "docker":   # its checks are container runs: nothing stays warm between saves
        raise SandboxUnavailable(
            "--sandbox docker is not supported in watch mode (every docker check is a container run "
            "of its own, with nothing to keep warm between saves)",
            "Use `lumen-ex watch` with --sandbox bwrap (or auto), and `lumen-ex check --sandbox docker` "
            "for a final check in the container")
    return select_backend(sandbox) if sandbox != "auto" else best_host_launcher()


class WatchStopped(RuntimeError):
    """Watching is ending: no more workers are launched."""


class GuardedLauncher:
    """The session's launcher, which refuses to start workers once watching is being stopped
    (a check interrupted by Ctrl-C would otherwise replace the worker it just lost)."""

    def __init__(self, launcher: Launcher):
        self.inner = launcher
        self.refuse = False

    def launch(self, spec: WorkerSpec):
        if self.refuse:
            raise WatchStopped("watching is stopping: no new worker")
        return self.inner.launch(spec)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


class PoolSlot:
    """Stands in for the WorkerPool of a check not yet started: a prepared session's Submission
    holds this, and the check puts its pool in (or a pool that ends the session)."""

    def __init__(self):
        self.target = None

    def __getattr__(self, name: str):
        if self.target is None:
            raise WatchStopped("no worker pool for this run")
        return getattr(self.target, name)


class _StoppedPool:
    def __getattr__(self, name: str):
        import pytest

        pytest.exit("lumen-ex watch is stopping")


_GATE = None


def _gate_class():
    """A pytest plugin that holds a session at its run loop until it is told to go (or to stop)."""
    global _GATE
    if _GATE is None:
        import pytest

        class Gate:
            def __init__(self):
                self.collected = threading.Event()
                self.go = threading.Event()
                self.cancelled = False

            @pytest.hookimpl(tryfirst=True)
            def pytest_runtestloop(self, session):
                self.collected.set()
                self.go.wait()
                return True if self.cancelled else None   # None: pytest's own loop runs the tests

        _GATE = Gate
    return _GATE


class PreparedRun:
    """The pytest session of the next check, configured and collected in advance.

    It runs in a thread and waits at its run loop; the check hands it the worker pool, lets it go
    and joins it. Configuring pytest and collecting the suite (a fifth of a warm check) then happen
    while the learner is typing, not after the save. Only one session exists at a time: the
    thread runs the tests while the main thread only waits for it, and its output capture is off
    while it waits (so nothing the main thread prints is swallowed).
    """

    def __init__(self, suite: str, module_file: str, *, seed: int, device: str):
        from lumen_ex.harness.proxy import Submission

        self.device, self.seed = device, seed
        self.slot = PoolSlot()
        self.submission = Submission(self.slot, device, module_file)
        self.gate = _gate_class()()
        self.outcome = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, args=(suite,), daemon=True,
                                       name="lumen-ex-watch-suite")
        self.thread.start()

    def _main(self, suite: str) -> None:
        from lumen_ex.harness.runner import run_suite

        try:
            self.outcome = run_suite(suite, self.submission, seed=self.seed, device=self.device,
                                     lean=True, plugins=(self.gate,))
        except BaseException as exc:  # noqa: BLE001  handed to the main thread
            self.error = exc
        finally:
            self.gate.collected.set()   # also when it never reached the run loop

    def wait_collected(self, timeout: float) -> bool:
        return self.gate.collected.wait(timeout) and self.thread.is_alive()

    def run(self, pool):
        """Run the collected tests against ``pool``; return run_suite's (results, errors)."""
        self.slot.target = pool
        self.gate.go.set()
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.outcome

    def abort(self, pool) -> None:
        """End a run interrupted in the main thread (Ctrl-C while joined): the tests left end at
        once, and the pool's worker is killed. The caller keeps its launcher from starting more."""
        self.slot.target = _StoppedPool()
        pool.close()
        self.thread.join(5)
        pool.close()

    def cancel(self) -> None:
        self.gate.cancelled = True
        self.gate.go.set()
        self.thread.join(10)


class WatchSession:
    """Grade one exercise again and again, with the harness and the next worker kept warm.

    ``check_once()`` grades the file as it is now; ``wait_for_change()`` yields a :class:`Change`
    each time the file's content differs from what was last checked. ``close()`` (or leaving a
    ``with`` block) kills the worker kept in advance, with its cgroup.
    """

    def __init__(self, exercise: str | int, *, workspace: Path | None = None, sandbox: str = "auto",
                 seed: int | None = None, device: str = "auto", poll: bool = False,
                 poll_interval: float = POLL_INTERVAL, debounce: float = DEBOUNCE, record: bool = True,
                 prepare: bool = True):
        if device not in DEVICES:
            raise UsageError(f"unknown device {device!r}", "Use --device cpu, cuda or auto")
        self.ex = catalog_mod.load().find(exercise)
        self.workspace = Workspace.find(workspace)
        self.file = self.workspace.exercise_file(self.ex)
        self.seed = seeds.choose(seed)   # checked once, the same way for every sandbox
        self.wanted_device = device
        self.record = record
        self.debounce, self.poll_interval = debounce, poll_interval
        launcher, self.warning = watch_launcher(sandbox)
        self.launcher = GuardedLauncher(launcher)
        # The same spec check_here() builds for this exercise, so that the worker made in advance is the
        # worker it would have launched itself.
        self.spec = worker_spec(self.ex, self.workspace.root, self.file, device)
        self.checked: str | None = None     # digest of the content the last check graded
        self.checks = 0
        self.worker_pids: list[int | None] = []   # the kept worker each check used (None: launched then)
        self.last_result = None
        self._next = None                   # the Worker launched for the next check
        self._dead: list = []               # Launched workers killed, not yet waited for
        self._closed = False
        self.stopping = False               # set by serve() on Ctrl-C: end after this check
        self.prepare = prepare              # collect the next check's pytest session in advance
        self._prepared: PreparedRun | None = None
        self._failures = 0
        self._frozen = False
        self._watcher = None
        self.polling = poll
        try:
            self.spawn()   # first, so that its torch import overlaps with ours below
            # Watching starts now, so that a save made during the first check is not missed.
            self._watcher = self._open_watcher()
            self._warm_harness()
        except BaseException:
            self.close()
            raise

    # -- the worker kept in advance ------------------------------------------------------------

    def spawn(self) -> None:
        """Launch the worker for the next check, unless one is waiting already."""
        if self._next is not None or self._failures >= RESPAWN_FAILURES or self._closed:
            return
        with deferred_interrupts():   # a Ctrl-C here would orphan the worker and its cgroup
            self._next = _kept_worker_class()(self.launcher.launch(self.spec), self._dead)

    def prepare_next(self) -> None:
        """After a check (and once its result is shown): finish off the used worker, and launch
        the next one so that it imports torch while the learner reads."""
        self.reap()
        self.spawn()
        self._prepare_suite()

    def _prepare_suite(self) -> None:
        if not self.prepare or self._prepared is not None or self._closed or not self.checks:
            return   # (not before the first check: that one imports the suite the usual way)
        with deferred_interrupts():   # close() must know of every session thread to end it
            self._prepared = PreparedRun(self.ex.suite, self.file.name, seed=self.seed,
                                         device=self.spec.device)
        # Wait for it to be collected: pytest's output capture is on while it collects.
        if not self._prepared.wait_collected(60):
            prepared, self._prepared = self._prepared, None
            prepared.cancel()

    def _run_tests(self, ex, pool, learner_file, *, seed, device, select, lean):
        """check_here()'s run_tests: the prepared session when it fits, else a session made now."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared.device == device and prepared.seed == seed and not select:
            try:
                return prepared.run(pool)
            except BaseException:
                self.launcher.refuse = True   # the suite's thread must not replace the killed worker
                prepared.abort(pool)
                self.launcher.refuse = self.stopping or self._closed
                raise
        if prepared is not None:
            prepared.cancel()
        from lumen_ex.harness.proxy import Submission
        from lumen_ex.harness.runner import run_suite

        return run_suite(ex.suite, Submission(pool, device, learner_file.name), seed=seed, device=device,
                         select=select, lean=lean)

    def reap(self) -> None:
        """Wait for the killed workers and remove their cgroups (the slow part of killing)."""
        with deferred_interrupts():
            while self._dead:
                self._dead[-1].kill()
                self._dead.pop()

    def _take_hello(self) -> None:
        """Read the waiting worker's hello (it is there: its pipe is readable)."""
        from lumen_ex.harness.client import WorkerFailure

        worker = self._next
        if worker is None or worker.hello is not None:
            return
        try:
            worker.wait_hello(time.monotonic() + self.ex.times.startup_seconds)
            self._failures = 0
        except WorkerFailure:   # it died while starting: try another, a few times at most
            self._discard_next()
            self._failures += 1
            self.prepare_next()

    def _discard_next(self) -> None:
        if self._next is not None:
            worker, self._next = self._next, None
            worker.kill()

    def _take_worker(self):
        """The waiting worker for a check, or None (check_here() then launches one itself)."""
        worker, self._next = self._next, None
        if worker is not None and not worker.alive():
            worker.kill()
            worker = None
        return worker

    @property
    def worker_ready(self) -> bool:
        """Whether a worker waits with its hello read (torch imported): the next check is fast."""
        if self._next is not None and self._next.hello is None:
            readable, _, _ = select.select([self._next.launched.reply_fd], [], [], 0)
            if readable:
                self._take_hello()
        return self._next is not None and self._next.hello is not None

    def wait_worker(self, timeout: float = 120.0) -> bool:
        """Launch the next worker if needed and block until it is ready (benchmarks and tests:
        watching itself never waits for it)."""
        self.prepare_next()
        deadline = time.monotonic() + timeout
        while not self.worker_ready and self._next is not None and time.monotonic() < deadline:
            select.select([self._next.launched.reply_fd], [], [], 0.1)
        return self.worker_ready

    # -- the harness kept warm -------------------------------------------------------------------

    def _warm_harness(self) -> None:
        import pytest  # noqa: F401
        import torch

        from lumen_ex.harness import client, plugin, proxy, runner  # noqa: F401

        # The harness's own tensors are small: a second OpenMP thread only waits for a core
        # (10x slower ops on a busy 2-core machine). The worker runs on one thread already.
        torch.set_num_threads(1)

    def _freeze(self) -> None:
        """After the first check, everything imported so far is permanent: keep the garbage
        collector off it."""
        if not self._frozen:
            gc.collect()
            gc.freeze()
            self._frozen = True

    # -- checking ----------------------------------------------------------------------------------

    def check_once(self):
        """Grade the file as it is now, with the worker launched in advance; return the RunResult.

        The used worker is killed at once; waiting for it and launching the next one are left to
        :meth:`prepare_next` (which wait_for_change calls), so that the result comes first.
        """
        from lumen_ex.harness.check import check_here

        started = time.monotonic()
        digest = file_digest(self.file)
        if digest is None:
            raise UsageError(f"{self.ex.path} is missing from the workspace {self.workspace.root}",
                             f"Restore it, or lumen-ex init a new folder and copy {self.ex.path}")
        worker = self._take_worker()
        self.worker_pids.append(worker.launched.proc.pid if worker is not None else None)
        collecting = gc.isenabled()
        gc.disable()   # a check allocates little; collections would only add to its latency
        try:
            result = check_here(self.ex, self.workspace.root, self.file, self.launcher, seed=self.seed,
                           device=self.wanted_device, started=started, warning=self.warning,
                           first=worker, lean=True, run_tests=self._run_tests)
        finally:
            if collecting:
                gc.enable()
            if worker is not None:
                worker.kill()      # check_here() has closed it already, unless it was interrupted early
        if self.stopping:          # pytest turns a Ctrl-C in its own thread into a short result
            raise KeyboardInterrupt
        self.checked = digest
        self.checks += 1
        self.last_result = result
        self._freeze()
        if self.record and result.status.value != "error":
            self.workspace.record_check(self.ex.slug, result.status.value, result.score, result.max_score)
        return result

    # -- waiting for saves ---------------------------------------------------------------------------

    def _open_watcher(self):
        if not self.polling:
            try:
                return Inotify(self.file.parent, self.file.name)
            except OSError:
                self.polling = True
        return Poller(self.file, self.poll_interval)

    def wait_for_change(self, timeout: float | None = None) -> Iterator[Change]:
        """Yield a Change each time the file's content differs from the content last checked.

        The caller checks (and shows the result) before asking for the next one; resuming then
        kills off the used worker and launches the next (:meth:`prepare_next`). Between changes
        it reads the waiting worker's hello (so that a check finds it ready) and replaces it
        should it die. Ends after ``timeout`` seconds without a change (never when None).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._watcher is None:
            self._watcher = self._open_watcher()
        self.prepare_next()
        while True:
            watcher = self._watcher
            if isinstance(watcher, Inotify) and watcher.broken:   # its folder went away
                watcher.close()
                self.polling = True
                self._watcher = watcher = Poller(self.file, self.poll_interval)
                watcher.last = None   # compare the content at its first look
            fds = [watcher.fileno()] if watcher.fileno() is not None else []
            waiting = self._next if self._next is not None and self._next.hello is None else None
            if waiting is not None:
                fds.append(waiting.launched.reply_fd)
            wait = watcher.interval if isinstance(watcher, Poller) else 1.0
            if deadline is not None:
                if time.monotonic() >= deadline:
                    return
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            readable, _, _ = select.select(fds, [], [], wait)
            if waiting is not None and waiting.launched.reply_fd in readable:
                self._take_hello()
            if self._next is None or (self._next.hello is not None and not self._next.alive()):
                self._discard_next()
                self.prepare_next()
            if isinstance(watcher, Inotify) and watcher.fd not in readable:
                continue
            if not watcher.read():
                continue
            seen = time.monotonic()
            self._settle(watcher)
            digest = file_digest(self.file)
            if digest is None or digest == self.checked:
                continue
            yield Change(digest, seen, "poll" if isinstance(watcher, Poller) else "inotify")
            self.prepare_next()   # the caller has checked (and shown) the new content

    def _settle(self, watcher) -> None:
        """Wait until events stop for ``debounce`` seconds (at most MAX_SETTLE in all)."""
        end = time.monotonic() + MAX_SETTLE
        if isinstance(watcher, Poller):
            while time.monotonic() < end:
                time.sleep(self.debounce)
                before = watcher.last
                watcher.read()
                if watcher.last == before:
                    return
            return
        while time.monotonic() < end:
            readable, _, _ = select.select([watcher.fd], [], [], self.debounce)
            if not readable or not watcher.read():
                return

    # -- the end ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill the waiting worker (and its cgroup) and stop watching; idempotent."""
        self._closed = True   # no more launches from here on
        self.launcher.refuse = True
        if self._prepared is not None:
            prepared, self._prepared = self._prepared, None
            prepared.cancel()
        self._discard_next()
        self.reap()
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None

    def __enter__(self) -> WatchSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def footer(self) -> str:
        return f"watching {self.ex.path} (Ctrl-C to stop)"


_KEPT = None


def _kept_worker_class():
    """harness.client.Worker (imported late: it imports torch), with a kill() that stops the
    worker at once and leaves the slow part for later.

    kill() sends SIGKILL to the worker's process group and to every process in its cgroup: from
    then on nothing of that run executes. Waiting for the processes to go and removing the cgroup
    (tens of milliseconds of polling) happen in WatchSession.reap(), after the result is shown.
    """
    global _KEPT
    if _KEPT is None:
        from lumen_ex.harness.client import Worker

        class KeptWorker(Worker):
            def __init__(self, launched, graveyard: list):
                super().__init__(launched)
                self._graveyard = graveyard
                self._doomed = False

            def kill(self) -> None:
                if self._doomed:
                    return
                self._doomed = True
                launched = self.launched
                try:
                    os.killpg(launched.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                cgroup = getattr(launched.enforcement, "cgroup", None)
                for pid in cgroup.pids() if cgroup is not None else ():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                self._graveyard.append(launched)

        _KEPT = KeptWorker
    return _KEPT


@contextmanager
def deferred_interrupts():
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


def serve(session: WatchSession, show: Callable[[object, WatchSession], None],
          on_change: Callable[[Change], None] | None = None) -> int:
    """Check now, then again after every change, calling ``show(result, session)`` each time,
    until Ctrl-C (or SIGTERM); then clean up (no worker, no cgroup left) and return 0."""

    def stop(signum, frame):
        session.stopping = True
        session.launcher.refuse = True
        raise KeyboardInterrupt

    saved = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            if signal.getsignal(signum) is not signal.SIG_IGN:   # ignored (nohup, `&`): leave it so
                saved[signum] = signal.signal(signum, stop)
        except ValueError:   # not the main thread: the caller stops us with session.close()
            pass
    try:
        show(session.check_once(), session)
        for change in session.wait_for_change():
            if on_change is not None:
                on_change(change)
            show(session.check_once(), session)
    except KeyboardInterrupt:
        pass
    finally:
        # A second Ctrl-C must not interrupt the clean-up that leaves no worker behind.
        for signum in saved:
            signal.signal(signum, signal.SIG_IGN)
        try:
            session.close()
        finally:
            for signum, handler in saved.items():
                signal.signal(signum, handler)
    return 0
