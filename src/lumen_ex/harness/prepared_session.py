"""A hidden suite's pytest session, configured and collected before its submission is there, then run
once per submission.

A fresh pytest session per check spends about half of the harness's time on itself: registering
plugins, parsing fixtures, collecting the suite; none of that needs the submission. A
:class:`PreparedSession` does it ahead: its session runs in a daemon thread and waits at pytest's
run loop; each check hands it the submission's worker pool (:meth:`PreparedSession.run`), and the
loop runs every collected test for it, as pytest's own loop would (setup, call, teardown, each
report through the hooks), with the last test's teardown finishing every fixture, so that nothing
set up for one submission is seen by the next. Each run gets a new LearnerModule and clean records
(GradingPlugin ``begin``). The verdicts are those of a fresh session (tests/unit/test_kept_session.py
grades the same files both ways; bench/grade_throughput.py compares a whole class with the naive loop).

A session serves one exercise, file name, seed and device (:func:`session_key`). Its users keep it
for as long as their checks have that key:

- a grading process, for a whole class (src/lumen_ex/harness/kept_session.py ``KeptSessions``);
- watch mode, the playground and the terminal's check server, from one check to the next
  (src/lumen_ex/learner/prewarm.py ``Prewarm``): prepared while the learner types, and kept while
  the seed stays (the check server draws a new one for every check: a new session each time).

A run that raises (``pytest.exit``: a cancelled playground check, a run stopped by
:meth:`PreparedSession.abort`; an interrupt; an error of the harness) ends the session as a fresh
session ends: pytest's end hooks run and every fixture is finished. :meth:`PreparedSession.run`
then gives the tests run so far, as a fresh session would, and ``error`` says what ended it; the
owner drops the session (a grading process fails that check with the error, as a grader error) and
the next check gets a new one. :meth:`PreparedSession.close` ends a session between runs.

While it waits at its run loop, pytest's output capture is off (it is on while the session collects
and while each test runs), so nothing another thread prints is swallowed. Watch mode imports this
module only where it first makes a session (it imports pytest and torch, which ``lumen-ex watch``
imports after its first worker is launched).
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from lumen_ex.harness.plugin import GradingPlugin
from lumen_ex.harness.proxy import LearnerModule
from lumen_ex.harness.runner import SuiteOutcome, outcome, run_suite

if TYPE_CHECKING:
    from lumen_ex.core.catalog import Exercise
    from lumen_ex.harness.client import WorkerPool

# What a session serves: the suite's folder, the learner's file name, the seed and the device.
SessionKey = tuple[Path, str, int, str]


def session_key(ex: Exercise, module_file: str, *, seed: int, device: str) -> SessionKey:
    return (ex.suite_dir, module_file, seed, device)


class _RunPool:
    """A run's worker pool as its tests reach it (through the LearnerModule): the check's own pool,
    until :meth:`PreparedSession.abort` stops it; from then on any use of it ends the session
    (``pytest.exit``), so that the tests left end at once."""

    def __init__(self, pool: WorkerPool) -> None:
        object.__setattr__(self, "_target", pool)

    def _pool(self) -> WorkerPool:
        pool: WorkerPool | None = object.__getattribute__(self, "_target")
        if pool is None:
            pytest.exit("the check was stopped")
        return pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool(), name)

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self._pool(), name, value)

    def stop(self) -> None:
        object.__setattr__(self, "_target", None)


class _Run:
    """One submission's run: its LearnerModule and what came of it."""

    def __init__(self, pool: WorkerPool, device: str, module_file: str):
        self.pool = _RunPool(pool)
        self.learner = LearnerModule(cast("WorkerPool", self.pool), device, module_file)
        self.done = threading.Event()
        self.outcome: SuiteOutcome | None = None     # set before ``done`` unless it raised
        self.error: BaseException | None = None


class PreparedSession:
    """The pytest session of one exercise (with one seed, one device and one file name), configured
    and collected in a thread as soon as it is made: :meth:`wait_collected` waits for that,
    :meth:`run` grades one submission, :meth:`close` ends it. It is its own pytest plugin: the one
    that holds the session at its run loop and runs the tests there, once per submission.
    ``plugins``: more plugin objects for the session (the playground's progress)."""

    def __init__(self, ex: Exercise, module_file: str, *, seed: int, device: str,
                 plugins: tuple[object, ...] = ()):
        self.key = session_key(ex, module_file, seed=seed, device=device)
        self.module_file, self.device, self.suite_dir = module_file, device, ex.suite_dir
        self.grading = GradingPlugin(None, seed=seed, device=device, exercise=ex)
        self.runs: queue.Queue[_Run | None] = queue.Queue()
        self.collected = threading.Event()     # set at the run loop, or when the session ended before it
        self.error: BaseException | None = None   # what ended the session (not set by close())
        self._current: _Run | None = None
        self.thread = threading.Thread(target=self._main, args=(ex, seed, device, plugins), daemon=True,
                                       name="lumen-ex-prepared-suite")
        self.thread.start()

    def _main(self, ex: Exercise, seed: int, device: str, plugins: tuple[object, ...]) -> None:
        try:
            run_suite(ex, None, seed=seed, device=device, lean=True, plugins=(self, *plugins), grading=self.grading)
        except BaseException as exc:  # noqa: BLE001  handed to the thread that waits on this session
            self.error = self.error or exc
        finally:
            self.collected.set()   # also when it never reached the run loop

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        self.collected.set()
        # pytest's own loop runs nothing after a collection error (unless told to go on)
        broken = bool(session.testsfailed) and not session.config.option.continue_on_collection_errors
        while (run := self.runs.get()) is not None:
            try:
                self.grading.begin(run.learner)
                items = [] if broken else session.items
                for i, item in enumerate(items):
                    item._report_sections = []      # what the capture plugin adds, per run
                    nextitem = items[i + 1] if i + 1 < len(items) else None   # None: every fixture ends
                    item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
                    if session.shouldfail or session.shouldstop:
                        raise session.Interrupted(str(session.shouldfail or session.shouldstop))
                run.outcome = outcome(self.grading, self.suite_dir)
            except BaseException as exc:  # noqa: BLE001  the session ends with it (pytest's end hooks)
                run.error = self.error = exc
                raise
            finally:
                run.done.set()
        return True

    def fits(self, ex: Exercise, module_file: str, *, seed: int, device: str) -> bool:
        """Whether this session still lives and serves these checks."""
        return self.alive() and self.key == session_key(ex, module_file, seed=seed, device=device)

    def wait_collected(self, timeout: float) -> bool:
        """Wait until the suite is collected and the session waits at its run loop (False: it ended
        before that, or ``timeout`` seconds passed)."""
        return self.collected.wait(timeout) and self.alive()

    def alive(self) -> bool:
        return self.thread.is_alive() and self.error is None

    def run(self, pool: WorkerPool) -> SuiteOutcome:
        """Run every collected test against ``pool``; run_suite's (results, collection errors).
        A run that raises ends the session: its tests so far, once the session has ended, and
        ``error`` is what it raised (see the module docstring)."""
        if not self.alive():
            raise self.error or RuntimeError("the prepared pytest session has ended")
        run = self._current = _Run(pool, self.device, self.module_file)
        self.runs.put(run)
        while not run.done.wait(0.5):
            if not self.thread.is_alive():
                raise self.error or RuntimeError("the prepared pytest session has ended")
        if run.error is not None:
            self.thread.join()      # pytest's end hooks, as for a fresh session
            return outcome(self.grading, self.suite_dir)
        assert run.outcome is not None     # a run that is done without an error has its outcome
        return run.outcome

    def abort(self, pool: WorkerPool) -> None:
        """End a run interrupted in the caller's thread (Ctrl-C while it waited): the tests left end
        at once, the pool's worker is killed, and the session ends. The caller keeps its launcher
        from starting more workers."""
        if self._current is not None:
            self._current.pool.stop()
        self.runs.put(None)          # (ends the session should the run be over already)
        pool.close()
        self.thread.join(5)
        pool.close()

    def close(self) -> None:
        self.runs.put(None)
        self.thread.join(10)
