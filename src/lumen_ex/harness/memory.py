"""How much memory one call of the learner's code used, measured by the harness, never reported by
the worker.

A hidden suite asks for it with ``submission.call(..., measure_memory=True)``; the reply then
carries a :class:`MemoryUse`. It is the peak memory of everything the worker is, over the call,
minus what the worker held when it said hello (torch imported, the learner's module not yet):

    extra = peak during the call - usage at hello

so memory the learner's module holds between calls (ballast allocated at import, freed during the
call to make room) counts as the call's, and so does every process the call forks.

Where it comes from, best first:

1. The worker's own cgroup (src/lumen_ex/sandbox/cgroups.py ``PeakWindow``), when it has one (the
   harness runs as root, or has a delegated subtree): v1 ``memory.max_usage_in_bytes`` reset by the
   harness before the call, or v2 ``memory.peak`` (reset per open file on Linux >= 6.12). It covers
   every process in the cgroup, and the sandboxed worker can neither read nor write it.
2. Without one (the docker backend's workers, a normal user's laptop), /proc: the harness writes
   "5" to /proc/PID/clear_refs of every process of the worker's tree (resetting its VmHWM), and
   reads VmHWM while the call runs and after it. This is weaker: a process that lives and dies
   between two samples escapes, and code that resets its own VmHWM hides its peak. Where the reset
   is refused, VmHWM is the lifetime peak, an upper bound.

``MemoryUse.mechanism`` says which one measured; ``exact`` False means ``extra_bytes`` is only an
upper bound; ``extra_bytes`` None means nothing could measure it (a suite must then not pass).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from lumen_ex.sandbox.base import Launched

PAGE = os.sysconf("SC_PAGE_SIZE")
SAMPLE_SECONDS = 0.002     # /proc mode: how often VmHWM is read while the call runs
RESCAN_SAMPLES = 10        # ... and the process tree looked for again every this many samples


@dataclass(frozen=True)
class MemoryUse:
    """The memory one call used beyond what the worker held at hello, as the harness measured it."""

    extra_bytes: int | None     # None: no mechanism could measure it
    exact: bool                 # False: extra_bytes is an upper bound
    mechanism: str              # what measured it
    peak_bytes: int | None = None
    baseline_bytes: int | None = None
    before_call_bytes: int | None = None   # held just before the call (since hello: before - baseline)

    @property
    def extra_mib(self) -> float:
        return (self.extra_bytes or 0) / 2**20

    def to_dict(self) -> dict[str, int | bool | str | None]:
        return {"extra_bytes": self.extra_bytes, "exact": self.exact, "mechanism": self.mechanism,
                "peak_bytes": self.peak_bytes, "baseline_bytes": self.baseline_bytes,
                "before_call_bytes": self.before_call_bytes}


NOT_MEASURED = "none: the worker has no memory cgroup and its processes could not be read from /proc"


# -------------------------------------------------------------------------------------------------
# The baseline, taken when a worker says hello


@dataclass(frozen=True)
class Baseline:
    cgroup_bytes: int | None
    tree_rss: dict[int, int]      # pid -> VmRSS in bytes


def baseline(launched: Launched) -> Baseline:
    """What the worker holds now (called once, at its hello, for every worker: cheap). The process
    tree is read only where /proc may be needed: no cgroup, or a v2 one (its peak may not reset)."""
    cgroup = launched.enforcement.cgroup
    usage = cgroup.memory_usage() if cgroup is not None else None
    if usage is not None and cgroup is not None and cgroup.version == 1:
        return Baseline(usage, {})
    try:
        return Baseline(usage, {p: _status(p).get("VmRSS", 0) for p in process_tree(launched.proc.pid)})
    except (OSError, ValueError):    # the worker is gone already: its call will fail on its own
        return Baseline(usage, {})


# -------------------------------------------------------------------------------------------------
# One measured call


class MemoryProbe:
    """Opened just before a request is sent, finished when its reply has been read."""

    def __init__(self, launched: Launched, base: Baseline | None):
        self.launched = launched
        self.base = base or baseline(launched)
        cgroup = launched.enforcement.cgroup
        self.before = cgroup.memory_usage() if cgroup is not None else None
        self.window = cgroup.peak_window() if cgroup is not None else None
        self.tree: _TreeSampler | None = None
        self.tree_base = self.base.tree_rss
        if self.window is None or not self.window.exact:
            if not self.tree_base:     # not read at hello (a v1 cgroup whose peak would not reset): now
                self.tree_base = {pid: _status(pid).get("VmRSS", 0) for pid in process_tree(launched.proc.pid)}
            self.tree = _TreeSampler(launched.proc.pid)
            self.tree.start()

    def cancel(self) -> None:
        if self.tree is not None:
            self.tree.stop()
        if self.window is not None:
            self.window.finish()

    def finish(self) -> MemoryUse:
        readings: list[MemoryUse] = []
        if self.window is not None:
            peak, exact = self.window.finish()
            base = self.base.cgroup_bytes if self.base.cgroup_bytes is not None else self.before
            if peak is not None and base is not None:
                readings.append(MemoryUse(max(peak - base, 0), exact, self.window.how, peak, base, self.before))
        if self.tree is not None:
            readings.append(self.tree.stop().against(self.tree_base))
        exactly = [r for r in readings if r.exact and r.extra_bytes is not None]
        if exactly:
            return exactly[0]
        bounds = [r for r in readings if r.extra_bytes is not None]
        if bounds:
            return min(bounds, key=_extra_bytes)
        return MemoryUse(None, False, NOT_MEASURED)


def _extra_bytes(use: MemoryUse) -> int:
    return use.extra_bytes or 0     # (never None where it is asked)


class _TreeResult:
    def __init__(self, hwm: dict[int, int], start: dict[int, int], reset: dict[int, bool], how: str):
        self.hwm, self.start, self.reset, self.how = hwm, start, reset, how

    def against(self, base_rss: dict[int, int]) -> MemoryUse:
        if not self.hwm:
            return MemoryUse(None, False, NOT_MEASURED)
        # A process whose VmHWM could not be reset reports its lifetime peak, an upper bound, unless
        # the call raised it (then the peak was reached during the call). New processes count whole.
        exact = all(self.reset.get(pid, True) or self.hwm[pid] > self.start.get(pid, 0) for pid in self.hwm)
        peak = sum(self.hwm.values())
        base = sum(base_rss.get(pid, 0) for pid in self.hwm)
        return MemoryUse(max(peak - base, 0), exact, self.how, peak, base, None)


class _TreeSampler(threading.Thread):
    """/proc mode: reset VmHWM of the worker's processes, then sample it until stopped. Processes
    that appear during the call count whole (their VmHWM includes what they share with their
    parent: an over-count, on the side of failing)."""

    def __init__(self, root: int):
        super().__init__(daemon=True, name="lumen-ex memory probe")
        self.root = root
        self.hwm: dict[int, int] = {}
        self.reset: dict[int, bool] = {}
        self._done = threading.Event()
        for pid in process_tree(root):
            self.reset[pid] = _clear_refs(pid)
            self._sample(pid)
        self.at_start = dict(self.hwm)

    def _sample(self, pid: int) -> None:
        hwm = _status(pid).get("VmHWM")
        if hwm is not None and hwm > self.hwm.get(pid, 0):
            self.hwm[pid] = hwm

    def run(self) -> None:
        pids = list(self.hwm) or [self.root]
        n = 0
        while not self._done.wait(SAMPLE_SECONDS):
            n += 1
            if n % RESCAN_SAMPLES == 0:
                pids = process_tree(self.root)
            for pid in pids:
                self._sample(pid)

    def stop(self) -> _TreeResult:
        self._done.set()
        if self.is_alive():
            self.join()
        for pid in process_tree(self.root):
            self._sample(pid)
        how = "/proc VmHWM of the worker's process tree (reset by the grader through clear_refs before the call)"
        if not all(self.reset.values()):
            how = "/proc VmHWM of the worker's process tree (lifetime peak: clear_refs was refused; an upper bound)"
        return _TreeResult(dict(self.hwm), self.at_start, dict(self.reset), how)


# -------------------------------------------------------------------------------------------------
# /proc


def process_tree(root: int) -> list[int]:
    """``root``, its descendants, and every process of a session one of them leads (an orphan
    reparented away from the tree keeps its session unless it makes a new one)."""
    if not os.path.exists(f"/proc/{root}"):    # gone (or a test double's pid): no tree, without reading /proc
        return []
    parent: dict[int, int] = {}
    session: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            parent[int(entry)], session[int(entry)] = int(fields[1]), int(fields[3])
        except (OSError, IndexError, ValueError):
            continue
    if root not in parent:
        return []
    found, frontier = {root}, [root]
    while frontier:
        children = [p for p, pp in parent.items() if pp in frontier and p not in found]
        found.update(children)
        frontier = children
    leaders = {p for p in found if session.get(p) == p}
    found.update(p for p, s in session.items() if s in leaders)
    return sorted(found)


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in bytes (empty for a zombie or a process that is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def _clear_refs(pid: int) -> bool:
    """Reset the peak resident size of ``pid`` to its current one (writes "5" to clear_refs)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
