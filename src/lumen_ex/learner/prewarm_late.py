"""The pre-warm's class built on torch (src/lumen_ex/learner/prewarm.py imports this module only
where it first needs it, once the session's first worker is on its way: the two torch imports then
overlap, and ``lumen-ex watch`` starts without waiting for either): :class:`KeptWorker`, a worker
whose ``kill()`` stops it at once and leaves the slow part (waiting for its processes, removing its
cgroup) to ``Prewarm.reap``, after the result is shown. (The next check's pytest session is
src/lumen_ex/harness/prepared_session.py's, imported the same way.)
"""

from __future__ import annotations

from lumen_ex.harness.client import Worker
from lumen_ex.sandbox.base import Launched


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
