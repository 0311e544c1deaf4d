"""The background server's process (``python -I -m lumen_ex.learner.warm_server``): warm checks
answered over the socket, and saves graded before they are asked for.

src/lumen_ex/learner/check_server.py says what it serves and to whom, and is the client's side: the
socket's folder and name, the request, :func:`~lumen_ex.learner.check_server.start`. Here: the
loop that accepts a connection only from its own uid, keeps one
:class:`~lumen_ex.learner.watch_session.WatchSession` for the exercise checked last, watches its
file, and grades a save at once in a thread (:class:`Early`) for the next check of those bytes.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lumen_ex.learner.check_server import IDLE_ENV, IDLE_S, REQUEST_BYTES, peer_uid, runtime_dir

if TYPE_CHECKING:   # imported where first needed at run time (it imports the harness)
    from lumen_ex.core.results import RunResult
    from lumen_ex.learner.prewarm import SharedLauncher
    from lumen_ex.learner.watch_session import WatchSession


class Stopped(Exception):
    """A stop request: the server ends."""


@dataclass
class Early:
    """A grading the server began when the learner saved, before any check asked for it.

    A check that names no seed, made while the file still holds the bytes it graded (and with the
    same sandbox note), is answered with it, once: the file as it was when the check began, graded
    with the seed drawn in advance for that very check. Anything else drops it."""

    saved: float                          # time.time() of the save
    digest: str                           # the content the save left (the bytes graded: graded())
    seed: int
    note: str
    thread: threading.Thread | None = None
    result: RunResult | None = None
    failed: bool = False                  # the grading raised: never served (nor when cancelled)
    cancelled: bool = False
    ending: bool = False                  # its thread's last step has begun (a join returns at once)

    @property
    def saved_at(self) -> str:
        """The save's time of day, for the log."""
        return time.strftime("%H:%M:%S", time.localtime(self.saved))

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def graded(self) -> str | None:
        """The sha256 of the bytes it graded (when it graded any)."""
        if self.result is None or self.failed or self.cancelled:
            return None
        return str((self.result.source or {}).get("sha256") or "") or None


class CheckServer:
    """One workspace's warm checks, one at a time, for its own user only.

    Between checks it watches the file of the exercise checked last: a save is graded at once
    (:class:`Early`), so that the check the learner types next finds it graded or under way."""

    def __init__(self, key: str, workspace: Path, sandbox: str, device: str, folder: Path):
        self.key, self.workspace, self.sandbox, self.device = key, workspace, sandbox, device
        self.socket_path = folder / f"{key}.sock"
        self.session: WatchSession | None = None    # the session of the exercise checked last
        self.shared: SharedLauncher | None = None   # its launcher, kept for the next exercise's session
        self.next_seed: int | None = None   # drawn in advance for the next check that names no seed
        self.note = ""                      # the sandbox note of the last check (a save is graded with it)
        self.early: Early | None = None     # the grading of the last save, if any
        self.listener: socket.socket | None = None
        self._wake_r, self._wake_w = os.pipe()   # an early grading's thread says it is done

    def bind(self) -> bool:
        """Listen on the socket; False when another server of this key holds it."""
        self._lock = open(self.socket_path.with_suffix(".lock"), "w")   # held for the server's life
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        self.socket_path.unlink(missing_ok=True)      # a server that ended without removing it
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)
        try:
            listener.bind(str(self.socket_path))
        finally:
            os.umask(old)
        listener.listen(8)
        self.listener = listener
        return True

    def serve(self, idle_s: float = IDLE_S) -> None:
        """Answer checks, and grade saves as they come, until ``idle_s`` seconds pass without a check."""
        assert self.listener is not None
        last = time.monotonic()
        try:
            while True:
                watch_fd, poll_s = self._watching()
                fds: list = [self.listener, self._wake_r] + ([watch_fd] if watch_fd is not None else [])
                wait = max(0.0, idle_s - (time.monotonic() - last))
                readable, _, _ = select.select(fds, [], [], wait if poll_s is None else min(wait, poll_s))
                if self._wake_r in readable:
                    os.read(self._wake_r, 64)
                    if self.early is not None and self.early.ending:   # (a byte may be a dropped grading's)
                        self._finish_early(self.early)
                if self.listener in readable:
                    self._accept()
                    last = time.monotonic()
                    continue
                if watch_fd in readable or poll_s is not None:   # polling: a look at the file each time
                    self._on_save()
                if time.monotonic() - last >= idle_s:
                    return                              # idle (saves do not count): stop
        except Stopped:
            return
        finally:
            self.close()

    def _accept(self) -> None:
        assert self.listener is not None
        conn, _ = self.listener.accept()
        with conn:
            if peer_uid(conn) != os.getuid():
                return                                  # another user: not a word
            try:
                self._answer(conn)
            except (Stopped, SystemExit):
                raise
            except Exception as exc:  # noqa: BLE001  the next check gets a fresh session
                log(f"the session failed ({type(exc).__name__}: {exc}); the next check starts a new one")
                self._close_session()

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(5.0)
        data = b""
        while b"\n" not in data and len(data) <= REQUEST_BYTES:
            chunk = conn.recv(REQUEST_BYTES)
            if not chunk:
                return
            data += chunk
        try:
            request = json.loads(data.split(b"\n", 1)[0])
            if request.get("stop") is True:
                conn.sendall(b"{}")
                raise Stopped
            exercise, seed, note = str(request["exercise"]), request.get("seed"), str(request.get("note", ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        started = time.monotonic()
        try:
            result, how = self._check(exercise, seed, note)
        except Exception as exc:  # noqa: BLE001  the client then checks cold, and says what is wrong itself
            log(f"not checked warm ({type(exc).__name__}): the check goes cold")
            conn.sendall(json.dumps({"result": None}).encode())
            return
        assert self.session is not None     # _check made it
        log(f"checked {self.session.ex.dir} seed {result.seed}: {result.status.value} in "
            f"{time.monotonic() - started:.2f} s{how}")
        conn.settimeout(60.0)
        try:
            conn.sendall(json.dumps({"result": result.to_dict(), "warnings": list(result.warnings)}).encode())
            conn.shutdown(socket.SHUT_RDWR)   # the client reads to the end: it has its answer now,
        except OSError:                       # not after the next worker is ready below
            pass
        finally:
            self._ready_next()

    def warm(self, exercise: str) -> None:
        """Make the session of ``exercise`` (the one just checked cold) ready before it is asked for."""
        try:
            session = self._session_for(exercise)
            self._ready_next()
            session.watch_fileno()           # saves are seen from now on
            log(f"watching {session.ex.path} for saves")
        except Exception:  # noqa: BLE001  the first request will try again, or go cold
            self._close_session()

    def _ready_next(self) -> None:
        """Draw the seed of the next check that names none, and prepare its worker and pytest
        session while the learner reads (a check that names its seed gets a session made then)."""
        from lumen_ex.core import seeds

        if self.session is not None:
            self.session.seed = self.next_seed = seeds.choose(None)
            self.session.prepare_next()

    def _session_for(self, exercise: str):
        from lumen_ex.core import catalog
        from lumen_ex.learner.watch_session import WatchSession

        ex = catalog.load().find(exercise)
        if self.session is None or self.session.ex.slug != ex.slug:
            self._close_session()            # one exercise at a time: one waiting worker at most
            if self.shared is None:
                from lumen_ex.learner.prewarm import SharedLauncher

                self.shared = SharedLauncher(self.sandbox)
            self.session = WatchSession(ex.slug, workspace=self.workspace, sandbox=self.sandbox, device=self.device,
                                        record=True, watch=False, shared=self.shared)
        return self.session

    def _check(self, exercise: str, seed, note: str) -> tuple[RunResult, str]:
        """The result for a check, and how it was made (for the log): from the grading of the last
        save when that graded these very bytes with this check's seed, else graded now."""
        from lumen_ex.core import catalog, seeds
        from lumen_ex.learner.file_events import file_digest

        self.note = note
        early = self.early
        if early is not None:
            same = (self.session is not None and self.session.ex.slug == catalog.load().find(exercise).slug
                    and seed in (None, early.seed) and note == early.note
                    and file_digest(self.session.file) == early.digest)
            if same:   # it grades what the file holds now (confirmed below); the next worker after the answer
                self._finish_early(early, ready=False)
            graded = early.graded() if same else None
            if graded is not None and self.session is not None and file_digest(self.session.file) == graded:
                self.early = None
                assert early.result is not None
                self.session.record_result(early.result)
                return early.result, f" (graded when saved at {early.saved_at})"
            self._drop_early()
        session = self._session_for(exercise)
        session.seed = self.next_seed if seed is None and self.next_seed is not None else seeds.choose(seed)
        self.next_seed = None
        session.warning = note
        return session.check_once(), ""

    # -- saves graded before they are asked for -----------------------------------------------------

    def _watching(self) -> tuple[int | None, float | None]:
        """What to wait on for a save: a descriptor, or a polling interval (None, None: nothing
        before an exercise has been checked)."""
        session = self.session
        if session is None:
            return None, None
        try:
            fd = session.watch_fileno()
        except OSError:
            return None, None
        return (fd, None) if fd is not None else (None, session.poll_interval)

    def _on_save(self) -> None:
        """A save changed the file: grade it now, with the seed drawn for the next check."""
        from lumen_ex.core import seeds

        session = self.session
        if session is None:
            return
        digest = session.saved()
        if digest is None or (self.early is not None and self.early.digest == digest):
            return
        self._drop_early()                   # a grading of older bytes: stopped
        if self.next_seed is None:
            self.next_seed = seeds.choose(None)
        session.seed, session.warning = self.next_seed, self.note
        early = Early(time.time(), digest, self.next_seed, self.note)

        def grade() -> None:
            try:
                early.result = session.check_once(record=False)
            except BaseException as exc:  # noqa: BLE001  a check asked for later grades the file itself
                early.failed = True
                if not early.cancelled:
                    log(f"could not grade the save ({type(exc).__name__}: {exc}); a check will grade it when asked")
            finally:
                early.ending = True
                os.write(self._wake_w, b".")

        early.thread = threading.Thread(target=grade, name="lumen-ex-early-check", daemon=True)
        self.early = early
        early.thread.start()

    def _finish_early(self, early: Early | None, *, ready: bool = True) -> None:
        """Wait for ``early``'s thread to end (it has ended, or said it is ending, unless a check
        waits for it): then the session takes workers again, and unless ``ready`` is False (a
        check waits: its answer comes first, and the next worker after it) the next one is made
        ready (the seed stays the one drawn for the next check). Once per grading."""
        session = self.session
        if early is None or early.thread is None:
            return
        early.thread.join()
        early.thread = None
        if early.result is not None and not early.cancelled:
            log(f"graded the save of {early.saved_at}: "
                f"{early.result.status.value} in {early.result.duration:.2f} s (kept for the next check)")
        if session is not None:
            session.launcher.refuse = False
            if ready:
                session.prepare_next()

    def _drop_early(self) -> None:
        """Forget the early grading; one still running is stopped (its workers killed, none started)."""
        early, self.early = self.early, None
        if early is None:
            return
        if early.running and self.session is not None:
            early.cancelled = True
            self.session.launcher.refuse = True          # no worker replaces the ones killed now
            for launched in self.session.launcher.launched():
                launched.stop_now()
        self._finish_early(early)

    def _close_session(self) -> None:
        self._drop_early()
        if self.session is not None:
            session, self.session = self.session, None
            session.close()

    def close(self) -> None:
        self._close_session()             # (no early grading's thread is left to write to the pipe)
        if self.shared is not None:
            shared, self.shared = self.shared, None
            shared.close()
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            self.socket_path.unlink(missing_ok=True)
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)


def log(line: str) -> None:
    """One line in the server's log (``<key>.log`` beside its socket: its stdout)."""
    print(f"{time.strftime('%H:%M:%S')} [{os.getpid()}] {line}", flush=True)


def main(argv: list[str]) -> int:
    key, workspace, sandbox, device, exercise = argv
    folder = runtime_dir()
    if folder is None:
        return 1
    server = CheckServer(key, Path(workspace), sandbox, device, folder)
    if not server.bind():
        return 0                                        # another server of this key runs
    from lumen_ex.sandbox import leftovers  # the server's own imports, not its client's

    # What a server or grading run killed with SIGKILL left of its sandboxes (src/lumen_ex/sandbox/leftovers.py)
    for path in leftovers.sweep():
        log(f"removed {path.name}, left by a process that is gone")
    try:
        idle = float(os.environ.get(IDLE_ENV, "") or IDLE_S)
    except ValueError:
        idle = IDLE_S
    for signum in (signal.SIGTERM, signal.SIGHUP):   # a logout or a kill: stop cleanly, workers and all
        signal.signal(signum, lambda *_: sys.exit(0))
    log(f"serving {workspace} ({sandbox}, device {device}); stops after {idle:g} s without a check")
    server.warm(exercise)
    server.serve(idle)
    log("stopped")
    return 0


if __name__ == "__main__":
    from lumen_ex.core.trusted import quick_exit

    quick_exit()
    sys.exit(main(sys.argv[1:]))
