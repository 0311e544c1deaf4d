"""The pre-warm's classes built on pytest and torch (src/lumen_ex/learner/prewarm.py imports this
module only where it first needs one of them, once the session's first worker is on its way: the
two torch imports then overlap, and ``lumen-ex watch`` starts without waiting for either).

- :class:`Gate`: the pytest plugin that holds a prepared session at its run loop until the check
  hands it the worker pool (or cancels it);
- :class:`KeptWorker`: a worker whose ``kill()`` stops it at once and leaves the slow part (waiting
  for its processes, removing its cgroup) to ``Prewarm.reap``, after the result is shown.
"""

from __future__ import annotations

import threading

import pytest

from lumen_ex.harness.client import Worker
from lumen_ex.sandbox.base import Launched


class Gate:
    """A pytest plugin that holds a session at its run loop until it is told to go (or to stop)."""

    def __init__(self) -> None:
        self.collected = threading.Event()
        self.go = threading.Event()
        self.cancelled = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        self.collected.set()
        self.go.wait()
        return True if self.cancelled else None   # None: pytest's own loop runs the tests


class KeptWorker(Worker):
    """harness.client.Worker with a kill() that SIGKILLs the worker's process group and every
    process in its cgroup (:meth:`Launched.stop_now`): from then on nothing of that run executes.
    The launched worker goes to ``graveyard``, where Prewarm.reap waits for it later."""

    def __init__(self, launched: Launched, graveyard: list[Launched]) -> None:
        super().__init__(launched)
        self._graveyard = graveyard
        self._doomed = False

    def kill(self) -> None:
        if self._doomed:
            return
        self._doomed = True
        self.launched.stop_now()
        self._graveyard.append(self.launched)
