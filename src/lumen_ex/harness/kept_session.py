"""A grading process's pytest sessions: one per exercise, configured and collected once, run again
for every submission.

A grading process grades one exercise for a whole class with one seed on one device, so
:class:`KeptSessions` keeps one :class:`~lumen_ex.harness.prepared_session.PreparedSession` per
exercise (and seed, device and file name) for all of its checks: the session is configured and
collected with the first check and runs the suite again for each later one, with every fixture torn
down between two. The verdicts are those of a fresh session (tests/unit/test_kept_session.py grades
the same files both ways; bench/grade_throughput.py compares a whole class with the naive loop).

The session type is the one watch mode keeps between two saves (src/lumen_ex/harness/prepared_session.py
says how it runs and how a run that raises ends it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lumen_ex.harness.check import fresh_session
from lumen_ex.harness.prepared_session import PreparedSession, SessionKey, session_key
from lumen_ex.harness.runner import SuiteOutcome

if TYPE_CHECKING:
    from lumen_ex.core.catalog import Exercise
    from lumen_ex.harness.client import WorkerPool

COLLECT_S = 120.0       # how long configuring and collecting the suite may take


class KeptSessions:
    """The kept sessions of one grading process, one per exercise (and seed, device, file name),
    as ``check_here``'s ``run_tests`` (src/lumen_ex/harness/check.py). A check with ``select``
    runs a session of its own, as it would anywhere. A kept session that fails is dropped (its
    check fails with that error, as a grader error) and the next check starts a new one."""

    def __init__(self) -> None:
        self.sessions: dict[SessionKey, PreparedSession] = {}

    def __call__(self, ex: Exercise, pool: WorkerPool, learner_file: Path, *, seed: int, device: str,
                 select: str | None, lean: bool = True) -> SuiteOutcome:
        if select or not lean:
            return fresh_session(ex, pool, learner_file, seed=seed, device=device, select=select, lean=lean)
        key = session_key(ex, learner_file.name, seed=seed, device=device)
        session = self.sessions.get(key)
        if session is not None and not session.alive():
            self.sessions.pop(key).close()
            session = None
        if session is None:
            session = self.sessions[key] = PreparedSession(ex, learner_file.name, seed=seed, device=device)
            if not session.wait_collected(COLLECT_S) and session.alive():   # (one that ended: its run says why)
                self.sessions.pop(key).close()
                raise RuntimeError("the hidden suite was not collected in time")
        try:
            results = session.run(pool)
        except BaseException:
            self.sessions.pop(key, None)
            raise
        if session.error is not None:     # the run raised, and its session has ended
            self.sessions.pop(key, None)
            raise session.error
        return results

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()
