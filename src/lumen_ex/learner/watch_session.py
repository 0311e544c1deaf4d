"""The watch session: wait for a save, debounce, check, show the result, again, until Ctrl-C.

:class:`WatchSession` grades one exercise again and again in this process:

1. wait for a save (:meth:`WatchSession.wait_for_change`): inotify on the exercise's folder, or
   polling where inotify is unavailable or ``--poll`` asks for it (src/lumen_ex/learner/file_events.py);
2. debounce: wait until the events stop for DEBOUNCE seconds (MAX_SETTLE at most), then hash the
   file; a save that leaves the content as it was checked last time does not re-check;
3. check (:meth:`WatchSession.check_once`): :func:`lumen_ex.harness.check.check_here` snapshots the
   file and grades it, with the worker and the pytest session prepared in advance
   (src/lumen_ex/learner/prewarm.py);
4. the caller shows the result; when it asks for the next change, the used worker is reaped and
   the next one launched (:meth:`WatchSession.prepare_next`), while the learner reads.

:func:`serve` is that loop for the ``lumen-ex watch`` command: it calls ``show(result, session)``
after every check and ends on Ctrl-C (or SIGTERM) with exit code 0, leaving no worker and no cgroup.

The harness stays warm in this process: torch, pytest, the harness and the hidden suite stay
imported; after the first check ``gc.freeze()`` moves all of that out of the garbage collector's
way, and torch here runs on one thread (on a busy 2-core machine a second OpenMP thread makes
every small op ~10x slower). The harness modules that import torch or pytest are imported late
(after the zygote, or the first worker, is started, so that its torch import overlaps with ours).
Under bwrap, workers are forked from that zygote (src/lumen_ex/sandbox/select.py ``forking``).

Under ``--sandbox docker`` the harness stays here and the workers are forked in one container of
the grader image kept for the session, its slot (src/lumen_ex/sandbox/docker_slot.py, as in
``lumen-ex grade``); where no slot can run, docker is refused with the reason. ``auto`` means bwrap,
else the labelled unisolated mode.
"""

from __future__ import annotations

import gc
import select
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, cast

from lumen_ex.core import catalog as catalog_mod
from lumen_ex.core import seeds
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.errors import UsageError
from lumen_ex.core.options import check_device
from lumen_ex.core.workspace import Workspace
from lumen_ex.harness.check import CheckOptions, check_here, worker_spec
from lumen_ex.learner.file_events import POLL_INTERVAL, Change, Inotify, Poller, file_digest
from lumen_ex.learner.prewarm import GuardedLauncher, Prewarm, SharedLauncher, watch_launcher
from lumen_ex.sandbox.base import Launcher
from lumen_ex.sandbox.processes import signals_deferred

if TYPE_CHECKING:
    from lumen_ex.core.results import RunResult

DEBOUNCE = 0.02         # quiet time after an event before the file is read
MAX_SETTLE = 0.5        # never wait longer than this for a burst of events to end


class WatchSession:
    """Grade one exercise again and again, with the harness and the next worker kept warm.

    ``check_once()`` grades the file as it is now; ``wait_for_change()`` yields a :class:`Change`
    each time the file's content differs from what was last checked. ``close()`` (or leaving a
    ``with`` block) kills the worker kept in advance, with its cgroup. ``shared``: a process that
    opens one exercise after another keeps one launcher (its zygote) for all of their sessions.
    """

    def __init__(self, exercise: str | int, *, workspace: Path | None = None, sandbox: str = "auto",
                 seed: int | None = None, device: str = "auto", poll: bool = False,
                 poll_interval: float = POLL_INTERVAL, debounce: float = DEBOUNCE, record: bool = True,
                 prepare: bool = True, watch: bool = True, plugins: tuple = (), shared: SharedLauncher | None = None):
        check_device(device)
        self.ex = catalog_mod.load().find(exercise)
        self.workspace = Workspace.find(workspace)
        self.file = self.workspace.exercise_file(self.ex)
        self.seed = seeds.choose(seed)   # checked once, the same way for every sandbox
        self.wanted_device = device
        self.record = record
        self.debounce, self.poll_interval = debounce, poll_interval
        # The launcher of the process's sessions, when it has several in turn (its sandbox is chosen
        # already), else one of this session's own, stopped with it.
        launcher, self.warning = (shared.launcher, shared.warning) if shared is not None else watch_launcher(sandbox)
        self.launcher = GuardedLauncher(launcher, owned=shared is None)
        # The spec check_here() builds for this exercise, so that the worker made in advance is the
        # worker it would have launched itself; warm: it loads what a check would wait for before its hello.
        self.spec = worker_spec(self.ex, self.workspace.root, self.file, device, warm=True)
        self.checked: str | None = None     # digest of the content the last check graded
        self.checks = 0
        self.worker_pids: list[int | None] = []   # the kept worker each check used (None: launched then)
        self.last_result: RunResult | None = None
        self.prewarm = Prewarm(self.launcher, self.spec, startup_seconds=self.ex.times.startup_seconds)
        self.stopping = False               # set by serve() on Ctrl-C: end after this check
        self.prepare = prepare              # collect the next check's pytest session in advance
        self.plugins = plugins              # more pytest plugins for every check (the playground's progress)
        self._frozen = False
        self._watcher = None
        self.polling = poll
        try:
            # First, so that its torch import overlaps with ours below: the zygote the workers are
            # forked from, or else the first worker itself.
            if not self.launcher.start(self.spec):
                self.spawn()
            # Watching starts now, so that a save made during the first check is not missed.
            # (Not for the playground, watch=False: its checks come from the page, not from saves.)
            if watch:
                self._watcher = self._open_watcher()
            self._warm_harness()
            self.spawn()   # (a worker forked from the zygote; nothing when one was launched above)
        except BaseException:
            self.close()
            raise

    # -- what is prepared between saves (src/lumen_ex/learner/prewarm.py) ---------------------------

    @property
    def _prepared(self):
        """The next check's pytest session, collected in advance (None when there is none)."""
        return self.prewarm.prepared

    def spawn(self) -> None:
        """Launch the worker for the next check, unless one is waiting already."""
        self.prewarm.spawn()

    def reap(self) -> None:
        """Wait for the killed workers and remove their cgroups (the slow part of killing)."""
        self.prewarm.reap()

    def prepare_next(self) -> None:
        """After a check (and once its result is shown): finish off the used worker, and launch
        the next one so that it imports torch while the learner reads."""
        self.prewarm.reap()
        self.prewarm.spawn()
        if self.prepare and self.checks:   # (not before the first check: that one imports the suite the usual way)
            self.prewarm.prepare_suite(self.ex, self.file.name, seed=self.seed, device=self.spec.device,
                                       plugins=self.plugins)

    def _take_hello(self) -> None:
        """Read the waiting worker's hello; launch another if it died while starting."""
        if not self.prewarm.take_hello():
            self.prepare_next()

    @property
    def worker_ready(self) -> bool:
        """Whether a worker waits with its hello read (torch imported): the next check is fast."""
        waiting = self.prewarm.next
        if waiting is not None and waiting.hello is None:
            readable, _, _ = select.select([waiting.launched.reply_fd], [], [], 0)
            if readable:
                self._take_hello()
        return self.prewarm.next is not None and self.prewarm.next.hello is not None

    def wait_worker(self, timeout: float = 120.0) -> bool:
        """Launch the next worker if needed and block until it is ready (benchmarks and tests:
        watching itself never waits for it)."""
        self.prepare_next()
        deadline = time.monotonic() + timeout
        while not self.worker_ready and self.prewarm.next is not None and time.monotonic() < deadline:
            select.select([self.prewarm.next.launched.reply_fd], [], [], 0.1)
        return self.worker_ready

    def _run_tests(self, ex: Exercise, pool, learner_file, *, seed, device, select, lean):
        """check_here()'s run_tests: the prepared session when it fits, else a session made now."""
        prepared = None if select or not lean else self.prewarm.prepared_for(ex, learner_file.name, seed=seed,
                                                                              device=device)
        if prepared is not None:
            try:
                return prepared.run(pool)
            except BaseException:
                self.launcher.refuse = True   # the suite's thread must not replace the killed worker
                self.prewarm.abort_prepared(pool)
                self.launcher.refuse = self.stopping or self.prewarm.closed
                raise
        self.prewarm.end_prepared()   # one pytest session at a time
        # lazy: proxy and runner import torch and pytest
        from lumen_ex.harness.proxy import LearnerModule
        from lumen_ex.harness.runner import run_suite

        return run_suite(ex, LearnerModule(pool, device, learner_file.name), seed=seed, device=device,
                         select=select, lean=lean, plugins=self.plugins)

    # -- the harness kept warm -------------------------------------------------------------------

    def _warm_harness(self) -> None:
        import pytest  # noqa: F401
        import torch  # noqa: F401

        # Imported here, after the first worker is launched: the point of this method.
        from lumen_ex.harness import client, plugin, proxy, runner  # noqa: F401

        runner.one_thread()

    def _freeze(self) -> None:
        """After the first check, everything imported so far is permanent: keep the garbage
        collector off it."""
        if not self._frozen:
            gc.collect()
            gc.freeze()
            self._frozen = True

    # -- checking ----------------------------------------------------------------------------------

    def check_once(self, record: bool = True) -> RunResult:
        """Grade the file as it is now, with the worker launched in advance; return the RunResult.

        The used worker is killed at once; waiting for it and launching the next one are left to
        :meth:`prepare_next` (which wait_for_change calls), so that the result comes first. With
        ``record`` False the result is not written to the learner's progress (:meth:`record_result`
        does that later, when it is asked for).
        """
        started = time.monotonic()
        digest = file_digest(self.file)
        if digest is None:
            raise UsageError(f"{self.ex.path} is missing from the workspace {self.workspace.root}",
                             f"Restore it, or lumen-ex init a new folder and copy {self.ex.path}")
        worker = self.prewarm.take_worker()
        self.worker_pids.append(worker.launched.proc.pid if worker is not None else None)
        collecting = gc.isenabled()
        gc.disable()   # a check allocates little; collections would only add to its latency
        try:
            result = check_here(self.ex, self.workspace.root, self.file, cast(Launcher, self.launcher), seed=self.seed,
                                device=self.wanted_device,
                                options=CheckOptions(started=started, warning=self.warning, first=worker,
                                                     lean=True, run_tests=self._run_tests))
        finally:
            if collecting:
                gc.enable()
            if worker is not None:
                worker.kill()      # check_here() has closed it already, unless it was interrupted early
        if self.stopping:          # pytest turns a Ctrl-C in its own thread into a short result
            raise KeyboardInterrupt
        graded = (result.source or {}).get("sha256")   # the bytes the check snapshotted (a save may land
        self.checked = graded if isinstance(graded, str) else digest   # between the hash above and it)
        self.checks += 1
        self.last_result = result
        self._freeze()
        if record:
            self.record_result(result)
        return result

    def record_result(self, result: RunResult) -> None:
        """Write ``result`` to the learner's progress, when this session records and it graded anything."""
        if self.record and result.status.value != "error":
            self.workspace.record_result(self.ex.slug, result)

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
        self.prepare_next()
        prewarm = self.prewarm
        while True:
            watcher = self._watching()
            fd = watcher.fileno()
            fds: list[int] = [fd] if fd is not None else []
            waiting = prewarm.next if prewarm.next is not None and prewarm.next.hello is None else None
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
            if prewarm.next is None or (prewarm.next.hello is not None and not prewarm.next.alive()):
                prewarm.discard_next()
                self.prepare_next()
            found = self._new_content(watcher, readable)
            if found is None:
                continue
            digest, seen = found
            yield Change(digest, seen, "poll" if isinstance(watcher, Poller) else "inotify")
            self.prepare_next()   # the caller has checked (and shown) the new content

    def _watching(self):
        """The watcher, opened if need be; polling from now on once inotify's folder went away."""
        if self._watcher is None:
            self._watcher = self._open_watcher()
        watcher = self._watcher
        if isinstance(watcher, Inotify) and watcher.broken:   # its folder went away
            watcher.close()
            self.polling = True
            self._watcher = watcher = Poller(self.file, self.poll_interval)
            watcher.last = None   # compare the content at its first look
        return watcher

    def watch_fileno(self) -> int | None:
        """A descriptor that becomes readable on a save (inotify), or None: then call :meth:`saved`
        every ``poll_interval`` seconds."""
        return self._watching().fileno()

    def saved(self) -> str | None:
        """Without blocking (but for the debounce): the digest of the file's content when a save
        since the last look changed it from what was checked last, else None."""
        watcher = self._watching()
        readable = select.select([watcher.fd], [], [], 0)[0] if isinstance(watcher, Inotify) else []
        found = self._new_content(watcher, readable)
        return found[0] if found is not None else None

    def _new_content(self, watcher, readable: list) -> tuple[str, float] | None:
        """After a wait on the watcher (``readable``: the descriptors ready; a poller looks itself):
        the new content's digest and when the save was seen, once its events have settled; None
        when nothing changed or the content is what was checked last."""
        if isinstance(watcher, Inotify) and watcher.fd not in readable:
            return None
        if not watcher.read():
            return None
        seen = time.monotonic()
        self._settle(watcher)
        digest = file_digest(self.file)
        return None if digest is None or digest == self.checked else (digest, seen)

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
        self.prewarm.close()   # no more launches from here on
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
        with signals_deferred() as deferred:
            deferred.saved.update(saved)   # on leaving it, the handlers from before serve() come back
            session.close()
    return 0
