"""One exercise's pytest session, configured and collected once, run again for every submission.

A fresh pytest session per check spends about half of the harness's time on itself: registering
plugins, parsing fixtures, collecting the suite. A grading process grades one exercise for a whole
class with one seed on one device, so :class:`KeptSession` does that work once: its session runs in
a thread and waits at pytest's run loop; each check hands it the submission's worker pool, and the
loop runs every collected test for it, as pytest's own loop would (setup, call, teardown, each
report through the hooks), with the last test's teardown finishing every fixture, so that nothing
set up for one submission is seen by the next. The verdicts are those of a fresh session
(tests/unit/test_kept_session.py grades the same files both ways; bench/grade_throughput.py compares
a whole class with the naive loop).

Each run gets a new LearnerModule and clean records (GradingPlugin ``begin``). A run that raises
(an interrupt, pytest.exit) ends the session: the error goes to the caller, and the next check
starts a new session.

The thread that holds the session at its run loop is shared with watch mode's prepared session
(src/lumen_ex/harness/session_thread.py, which says why the two stay two kinds): a kept session
outlives its checks and runs them with its own loop, a prepared one is one check's, run by
pytest's own loop.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lumen_ex.harness.check import fresh_session
from lumen_ex.harness.plugin import GradingPlugin
from lumen_ex.harness.proxy import LearnerModule
from lumen_ex.harness.runner import SuiteOutcome, outcome
from lumen_ex.harness.session_thread import SessionThread

if TYPE_CHECKING:
    from lumen_ex.core.catalog import Exercise
    from lumen_ex.harness.client import WorkerPool

COLLECT_S = 120.0       # how long configuring and collecting the suite may take


class _Run:
    def __init__(self, learner: LearnerModule):
        self.learner = learner
        self.done = threading.Event()
        self.outcome: SuiteOutcome | None = None     # set before ``done`` unless it failed
        self.error: BaseException | None = None


class _Loop:
    """The plugin that holds the session at its run loop and runs the tests once per submission."""

    def __init__(self, grading: GradingPlugin, suite_dir: Path):
        self.grading, self.suite_dir = grading, suite_dir
        self.runs: queue.Queue[_Run | None] = queue.Queue()
        self.collected = threading.Event()

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
            except BaseException as exc:  # noqa: BLE001  handed to the check; the session ends
                run.error = exc
                run.done.set()
                raise
            run.done.set()
        return True


class KeptSession(SessionThread):
    """The pytest session of one exercise (with one seed, one device and one file name), kept for
    every submission: :meth:`run` grades one, :meth:`close` ends it.

    It is a :class:`~lumen_ex.harness.session_thread.SessionThread` held by :class:`_Loop`, which
    runs the collected tests once per submission; watch mode's ``PreparedRun`` is the other kind
    (one check's session, run once by pytest's own loop: see session_thread.py for why both)."""

    def __init__(self, ex: Exercise, module_file: str, *, seed: int, device: str):
        self.module_file, self.device = module_file, device
        self.grading = GradingPlugin(None, seed=seed, device=device, exercise=ex)
        self.loop = _Loop(self.grading, ex.suite_dir)
        super().__init__(ex, None, seed=seed, device=device, hold=self.loop, grading=self.grading,
                         name="lumen-ex-kept-suite")
        if not self.loop.collected.wait(COLLECT_S):
            self.close()
            raise RuntimeError("the hidden suite was not collected in time")

    def alive(self) -> bool:
        return self.thread.is_alive() and self.error is None

    def run(self, pool: WorkerPool) -> SuiteOutcome:
        """Run every test against ``pool``; run_suite's (results, collection errors)."""
        if not self.alive():
            raise self.error or RuntimeError("the kept pytest session has ended")
        run = _Run(LearnerModule(pool, self.device, self.module_file))
        self.loop.runs.put(run)
        while not run.done.wait(0.5):
            if not self.thread.is_alive():
                raise self.error or RuntimeError("the kept pytest session has ended")
        if run.error is not None:
            raise run.error
        assert run.outcome is not None     # a run that is done without an error has its outcome
        return run.outcome

    def close(self) -> None:
        self.loop.runs.put(None)
        self.thread.join(10)


class KeptSessions:
    """The kept sessions of one grading process, one per exercise (and seed, device, file name),
    as ``check_here``'s ``run_tests`` (src/lumen_ex/harness/check.py). A check with ``select``
    runs a session of its own, as it would anywhere. A kept session that fails is dropped (its
    check fails with that error, as a grader error) and the next check starts a new one."""

    def __init__(self) -> None:
        self.sessions: dict[tuple[Path, str, int, str], KeptSession] = {}

    def __call__(self, ex: Exercise, pool: WorkerPool, learner_file: Path, *, seed: int, device: str,
                 select: str | None, lean: bool = True) -> SuiteOutcome:
        if select or not lean:
            return fresh_session(ex, pool, learner_file, seed=seed, device=device, select=select, lean=lean)
        key = (ex.suite_dir, learner_file.name, seed, device)
        session = self.sessions.get(key)
        if session is not None and not session.alive():
            self.sessions.pop(key).close()
            session = None
        if session is None:
            session = self.sessions[key] = KeptSession(ex, learner_file.name, seed=seed, device=device)
        try:
            return session.run(pool)
        except BaseException:
            self.sessions.pop(key, None)
            raise

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()
