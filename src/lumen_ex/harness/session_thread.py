"""A hidden suite's pytest session run in a thread of its own and held at pytest's run loop: the part
that the two sessions prepared before their submission is there have in common.

Configuring pytest and collecting a suite cost a large part of a check's time, and neither needs
the submission. Two kinds of session do that work ahead of it, and both are a :class:`SessionThread`:

- a grading process's :class:`~lumen_ex.harness.kept_session.KeptSession`: one session of one
  exercise kept for a whole class; its own run loop runs the collected tests once per submission;
- watch mode's ``PreparedRun`` (src/lumen_ex/learner/prewarm.py): the next check's session,
  collected while the learner types, run once by pytest's own loop when the check hands it the
  worker pool, and then ended like any session.

They share this thread, not a type: a kept session outlives its checks and gives a check its
pytest failure as an error (the check fails as a grader error, the next one gets a new session),
while a prepared run is one check's session, made before its worker pool exists, and ends as a
fresh session ends (a ``pytest.exit`` from a cancelled playground check or a stopping watch gives
the tests run so far, and the session's end hooks run for every check).

This module imports neither pytest nor torch (run_suite is imported in the thread), so that watch
mode can define its prepared run before it imports them.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:   # for annotations only: they import torch and pytest
    from lumen_ex.core.catalog import Exercise
    from lumen_ex.harness.plugin import GradingPlugin
    from lumen_ex.harness.proxy import LearnerModule
    from lumen_ex.harness.runner import SuiteOutcome


class RunLoopHold(Protocol):
    """The pytest plugin that holds a session at ``pytest_runtestloop``: it sets ``collected`` when
    the session gets there, and decides there what runs."""

    collected: threading.Event


class SessionThread:
    """A suite's pytest session (src/lumen_ex/harness/runner.py ``run_suite``, lean), run in a daemon
    thread with ``hold`` as its first plugin. What the session raises is kept in ``error`` for the
    thread that waits on it, and ``hold.collected`` is set however the session ends, so that
    nobody waits for a collection that will not come."""

    def __init__(self, ex: Exercise, learner: LearnerModule | None, *, seed: int, device: str,
                 hold: RunLoopHold, name: str, plugins: tuple[object, ...] = (),
                 grading: GradingPlugin | None = None):
        self.hold = hold
        self.outcome: SuiteOutcome | None = None     # run_suite's, once the session has ended
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, args=(ex, learner, seed, device, plugins, grading),
                                       daemon=True, name=name)
        self.thread.start()

    def _main(self, ex: Exercise, learner: LearnerModule | None, seed: int, device: str,
              plugins: tuple[object, ...], grading: GradingPlugin | None) -> None:
        from lumen_ex.harness.runner import run_suite  # lazy: imports pytest and torch

        try:
            self.outcome = run_suite(ex, learner, seed=seed, device=device, lean=True,
                                     plugins=(self.hold, *plugins), grading=grading)
        except BaseException as exc:  # noqa: BLE001  handed to the thread that waits on this session
            self.error = exc
        finally:
            self.hold.collected.set()   # also when it never reached the run loop
