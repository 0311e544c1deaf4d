"""The host's process table, read from /proc, for tests that prove a command leaves nothing behind.

A process counts as running until it is gone or a zombie (dead, only waiting for its parent to reap
it: a killed sandbox's inner process is reparented to init, which reaps it later). A pid can be
reused, so a process seen earlier is the same one now only if its start time is the same.

Under load a process that was told to end can take a moment to do so: a test that asserts "nothing
left" waits for it (``still_running_after``) instead of looking once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    """One process as /proc showed it at one moment."""

    pid: int
    ppid: int
    state: str      # one letter as /proc/<pid>/stat has it: R, S, D, T, t, Z, X, ...
    start: int      # clock ticks after boot at which it started
    name: bytes     # the kernel's short name (comm)
    cmdline: bytes  # arguments separated by NUL bytes; empty for a zombie

    @property
    def running(self) -> bool:
        return self.state not in ("Z", "X")

    def shows(self, text: str) -> bool:
        """Whether ``text`` is in its name or its command line."""
        return text.encode() in self.name + self.cmdline

    def __str__(self) -> str:
        shown = (self.cmdline or b"[" + self.name + b"]").replace(b"\0", b" ").decode(errors="replace")
        return f"{self.pid} ({self.state}): {shown[:200]}"


def read(pid: int) -> Proc | None:
    """The process ``pid`` now, or None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    head, _, rest = stat.rpartition(b")")            # the name may hold spaces and parentheses
    fields = rest.split()
    try:
        return Proc(pid, int(fields[1]), fields[0].decode(), int(fields[19]), head.partition(b"(")[2], cmdline)
    except (IndexError, ValueError):
        return None


def table() -> dict[int, Proc]:
    """Every process on the host (containers' included), but the one asking."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and (proc := read(int(entry))) is not None:
            found[proc.pid] = proc
    return found


def descendants(pid: int) -> dict[int, Proc]:
    """Every process below ``pid``, zombies included, keyed by pid."""
    children: dict[int, list[Proc]] = {}
    for proc in table().values():
        children.setdefault(proc.ppid, []).append(proc)
    found: dict[int, Proc] = {}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child.pid not in found:
                found[child.pid] = child
                todo.append(child.pid)
    return found


def running_with(text: str) -> list[Proc]:
    """Running processes whose name or command line holds ``text`` (a marker, a workspace's path)."""
    return [proc for proc in table().values() if proc.running and proc.shows(text)]


def still_running(seen: Iterable[Proc]) -> list[Proc]:
    """Those of ``seen`` that were running then and are the same process, still running, now."""
    now = [(proc, read(proc.pid)) for proc in seen if proc.running]
    return [later for proc, later in now if later is not None and later.running and later.start == proc.start]


def still_running_after(seen: Iterable[Proc], timeout: float = 10) -> list[Proc]:
    """``still_running(seen)`` once they have all ended or ``timeout`` seconds have passed."""
    seen = list(seen)
    wait_until(lambda: not still_running(seen), timeout)
    return still_running(seen)


def wait_until(predicate: Callable[[], object], timeout: float, step: float = 0.1) -> bool:
    """Whether ``predicate()`` became true within ``timeout`` seconds (asked every ``step``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())
