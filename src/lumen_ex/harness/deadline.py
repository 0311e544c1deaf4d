"""A request's deadline, and the time the machine's load (not the learner's code) takes from it.

A call's time limit (10 s by default) is counted on the wall clock. On a busy machine (a class
graded on every core, CI running three test processes on two cores) a worker can spend most of
that time runnable but not running: waiting for a CPU that other processes hold. Then the same
file could pass on a quiet machine and time out on a busy one, which is what "same bytes, same
verdict" forbids. Linux counts that wait for each thread: the second field of
``/proc/<pid>/task/<tid>/schedstat`` is the nanoseconds it has spent on a run queue, waiting.

So a ``StretchedDeadline`` moves itself later by the time the worker's threads waited for a CPU
during the request (the thread that waited longest; a worker runs one thread, see ``OMP_NUM_THREADS``
in src/lumen_ex/sandbox/base.py). Time the worker spends running, sleeping or blocked still counts:
an infinite loop or a ``time.sleep(100)`` runs out of time as before. The learner's code can make
that wait itself (processes of its own that keep the CPU busy), so two bounds hold whatever the
load: never later than ``STRETCH`` times the limit, and never past the run's own deadline. Where
schedstat cannot be read, nothing is added and the limit is plain wall time.

The threads are read only for calls still running after ``MARK_AFTER`` seconds (almost every call
returns sooner and never pays for reading ``/proc``); a wait before that is not added.
"""

from __future__ import annotations

import os
import time

from lumen_ex.harness.memory import process_tree

STRETCH = 3.0        # a call's wall time is at most this many times its limit, however busy the machine
MARK_AFTER = 0.25    # seconds into a call before its threads' waits are first read


def run_queue_waits(root: int) -> dict[int, int]:
    """Nanoseconds each thread of ``root``'s process tree has waited for a CPU since it started
    (threads whose schedstat cannot be read are left out)."""
    waits: dict[int, int] = {}
    for pid in process_tree(root):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    waits[int(tid)] = int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return waits


class Deadline:
    """A fixed point on the monotonic clock."""

    def __init__(self, at: float):
        self.at = at

    def left(self) -> float:
        """Seconds until the deadline (zero or less: reached)."""
        return self.at - time.monotonic()

    def tick(self) -> None:
        """Called while waiting for the worker, at least every half second."""

    def stretch(self) -> bool:
        """Called when the deadline is reached: True if it moved later (wait again)."""
        return False


class StretchedDeadline(Deadline):
    """``limit`` seconds from now, plus what the worker rooted at ``root`` waited for a CPU
    meanwhile; never past ``STRETCH`` x ``limit`` from now, nor past ``latest`` when given."""

    def __init__(self, root: int, limit: float, latest: float | None = None):
        self.started = time.monotonic()
        super().__init__(self.started + limit)
        self.root, self.limit = root, limit
        self.latest = self.started + limit * STRETCH
        if latest is not None:
            self.latest = max(min(self.latest, latest), self.at)
        self.base: dict[int, int] | None = None
        self.waited = 0.0          # seconds added to the limit so far

    def tick(self) -> None:
        if self.base is None and time.monotonic() - self.started >= MARK_AFTER:
            self.base = run_queue_waits(self.root)

    def stretch(self) -> bool:
        if self.base is None:
            return False
        now = run_queue_waits(self.root)
        waited = max((ns - self.base.get(tid, 0) for tid, ns in now.items()), default=0) / 1e9
        at = min(self.started + self.limit + max(waited, 0.0), self.latest)
        if at <= self.at + 0.01:
            return False
        self.at, self.waited = at, at - self.started - self.limit
        return True

    def note(self) -> str:
        """What the timeout message adds when the load moved the deadline."""
        if self.waited < 0.05:
            return ""
        return f" of its own time (it also waited {self.waited:.1f} s for a CPU on this busy machine)"
