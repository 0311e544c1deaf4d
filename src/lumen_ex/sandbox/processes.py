"""Killing, reaping and signal handling for the processes lumen-ex starts, written once.

Every process lumen-ex starts for a check (a sandboxed worker, a docker client, a grading process)
leads its own process group, so one ``killpg`` reaches everything it started. The helpers here
never raise for a process that is already gone, and never wait forever:

- :func:`signal_group` / :func:`kill_group`: a signal to a whole group, quietly;
- :func:`signal_process`: a signal to one process (one that left its group), quietly;
- :func:`reap`: wait for a child, within a bound;
- :func:`terminate`: SIGTERM (and SIGCONT, so a stopped process can run its clean-up), no wait;
- :func:`stop`: :func:`terminate`, a grace period, then SIGKILL, then reap;
- :class:`signals_interrupt`: while a check runs, SIGTERM and SIGHUP raise KeyboardInterrupt, so
  the same clean-up as Ctrl-C runs (its workers or container are killed) before the process exits;
- :class:`signals_deferred`: during a clean-up that must finish, SIGINT, SIGTERM and SIGHUP are
  ignored (:func:`ignore_stop_signals`: from a handler on, for good).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Literal, NoReturn, Protocol, Self

REAP_S = 10.0      # how long a killed process may take to be reaped
Handler = Callable[[int, FrameType | None], Any] | int | None   # what signal.signal takes and returns


class Process(Protocol):
    """What these helpers use of a process: a subprocess.Popen, or a worker forked from a zygote
    (src/lumen_ex/sandbox/forked_process.py)."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...


def signal_group(pid: int, sig: int) -> bool:
    """Send ``sig`` to the process group ``pid`` leads; False when it is gone (or not ours)."""
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def signal_process(pid: int, sig: int) -> bool:
    """Send ``sig`` to the one process ``pid``; False when it is gone (or not ours)."""
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def kill_group(pid: int) -> bool:
    """SIGKILL the process group ``pid`` leads; False when it is gone (or not ours)."""
    return signal_group(pid, signal.SIGKILL)


def reap(proc: Process, timeout: float = REAP_S) -> int | None:
    """Wait up to ``timeout`` seconds for ``proc``; its exit code, or None if it is still running."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def kill(proc: Process, timeout: float = REAP_S) -> int | None:
    """SIGKILL ``proc``'s process group (it leads one), then reap it."""
    kill_group(proc.pid)
    return reap(proc, timeout)


def terminate(proc: Process) -> None:
    """Ask ``proc``'s group to stop, if ``proc`` still runs: SIGTERM, then SIGCONT so that a stopped
    process can run its clean-up. Nothing is waited for (:func:`stop` waits)."""
    if proc.poll() is None:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            signal_group(proc.pid, sig)


def stop(proc: Process, grace: float, timeout: float = REAP_S) -> int | None:
    """Ask ``proc``'s group to stop (:func:`terminate`), give it ``grace`` seconds, then SIGKILL the
    group and reap it."""
    if proc.poll() is None:
        terminate(proc)
        reap(proc, grace)
    return kill(proc, timeout)


def _raise_interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt(f"signal {signum}")


class _Handlers:
    """Install handlers for some signals on entry, put the old ones back on exit (main thread only:
    Python lets no other thread set a handler, and there the block changes nothing). ``handler``
    replaces the class's own."""

    SIGNALS: tuple[signal.Signals, ...] = ()
    HANDLER: Handler = signal.SIG_DFL   # what signal.signal takes

    def __init__(self, handler: Handler = None) -> None:
        self.handler = self.HANDLER if handler is None else handler

    def __enter__(self) -> Self:
        self.saved: dict[signal.Signals, Handler] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self.saved[sig] = signal.signal(sig, self.handler)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
        return False


class signals_interrupt(_Handlers):
    """SIGTERM and SIGHUP raise KeyboardInterrupt inside the block, as Ctrl-C does (or go to the
    ``handler`` given, one that decides when to raise it)."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)
    HANDLER = staticmethod(_raise_interrupt)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class signals_deferred(_Handlers):
    """SIGINT, SIGTERM and SIGHUP are ignored inside the block: a clean-up that must finish."""

    SIGNALS = STOP_SIGNALS
    HANDLER = signal.SIG_IGN


def ignore_stop_signals() -> None:
    """Ignore SIGINT, SIGTERM and SIGHUP from now on, in a signal handler that has begun a clean-up
    the process ends with (so nothing is put back: :class:`signals_deferred` is the block form)."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):     # the ones a handler is for first
        signal.signal(sig, signal.SIG_IGN)
