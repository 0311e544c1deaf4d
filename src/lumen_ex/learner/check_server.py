"""A warm ``lumen-ex check`` in the terminal: a background server of the learner's own, per workspace.

A cold ``lumen-ex check`` pays two torch imports (the harness's and its worker's) before its first
test: about 2.5 s on a quiet 2-core machine, every time. After a cold check, the command starts this
server in the background (:func:`start`); the next ``lumen-ex check`` of the same workspace asks it
(:func:`warm_check`) and pays a connection and the hidden tests. The server keeps one
:class:`~lumen_ex.learner.watch_session.WatchSession` for the exercise checked last, exactly as
``lumen-ex watch`` does: the harness and the suite imported, the next worker launched in advance
(under bwrap forked from a warm zygote), a fresh worker for every check, the file snapshotted when
the check begins.

It serves one user, one workspace and this very lumen-ex, and nothing else:

- **the user**: the socket lives in a folder only that user can open (:func:`runtime_dir`:
  ``$XDG_RUNTIME_DIR/lumen-ex``, else ``/tmp/lumen-ex-<uid>``; refused when it is a link, another
  user's, or open to anyone else), and the server answers a connection only when the kernel says
  (SO_PEERCRED) that its peer has the server's own uid; the client checks the server's uid the same way;
- **this lumen-ex, its exercises and the workspace**: the socket's name is a hash of the files of the
  lumen_ex package and of every exercise pack in use (each by its path, size and modification time),
  the Python interpreter, the workspace folder, the sandbox and the device (:func:`server_key`). An
  edit to any of them (a version bump or not) names another server; the old one is never asked
  again and stops when idle;
- **time**: a server stops itself after IDLE_S seconds without a check.

Under docker the server keeps one container of the grader image, its slot (src/lumen_ex/sandbox/docker_slot.py),
and forks each check's worker in it, the harness staying in the server, as ``lumen-ex grade`` does;
the slot stops with the server. Anything the warm path cannot serve (docker where no slot can run, a sandbox that is not there, a server that does not
answer, dies mid-check or refuses) is graded the cold way, as before: a learner never sees the
difference but in the time. ``LUMEN_EX_CHECK_SERVER=off`` turns the server off (the tests do, but
for those of the server itself).

The server is a trusted process like a grading process: ``python -I`` in a fixed folder, its own
session, never importing from the workspace (src/lumen_ex/core/trusted.py). A request is one JSON line
of at most REQUEST_BYTES; the answer is the result record's JSON (``RunResult.to_dict``), the
same record the cold check makes.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # imported where first needed at run time (it imports the harness)
    from lumen_ex.learner.watch_session import WatchSession

SWITCH_ENV = "LUMEN_EX_CHECK_SERVER"     # "off": every check is cold, and no server is started
IDLE_ENV = "LUMEN_EX_CHECK_SERVER_IDLE"  # seconds: how long a server waits for a check before it stops
IDLE_S = 600.0              # ... when that is not set
CONNECT_S = 0.5             # how long the client waits to be accepted
REQUEST_BYTES = 4096        # a request's size limit (one JSON line)
ANSWER_BYTES = 64 << 20     # an answer's size limit
HASHED_FILES = 20_000       # more files than this in the package and packs: no server (too slow to hash)
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "").strip().lower() not in ("off", "0", "no", "false")


# -------------------------------------------------------------------------------------------------
# Where, and for what


def runtime_dir(create: bool = False) -> Path | None:
    """The user's private folder for servers' sockets, or None where none is safe to use."""
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    folder = Path(base) / "lumen-ex" if base.startswith("/") else Path(f"/tmp/lumen-ex-{os.getuid()}")
    if create:
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
        except OSError:
            return None
    try:
        info = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None      # a link, someone else's, or open to others: never used
    return folder


def _hash_tree(digest, root: Path, budget: list[int]) -> None:
    """Each file under ``root`` (but __pycache__) by its path, size and modification time: what an
    edit changes, at a few milliseconds for the whole package (reading every byte took ten times that)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            budget[0] -= 1
            if budget[0] < 0:
                raise OverflowError("too many files")
            path = os.path.join(folder, name)
            try:
                info = os.stat(path)
                digest.update(f"{os.path.relpath(path, root)}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
            except OSError:
                digest.update(f"{os.path.relpath(path, root)}\0?\0".encode())


def server_key(workspace: Path, sandbox: str, device: str) -> str | None:
    """What a server is for, as a name: None when it cannot be computed (too many files)."""
    from lumen_ex.core.packs import pack_roots

    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    digest.update(f"{sys.executable}\0{workspace.resolve()}\0{sandbox}\0{device}\0{os.getuid()}\0".encode())
    budget = [HASHED_FILES]
    try:
        _hash_tree(digest, package, budget)
        for root in pack_roots():
            root = Path(root).resolve()
            if not root.is_relative_to(package):
                digest.update(f"\0pack {root}\0".encode())
                _hash_tree(digest, root, budget)
    except OverflowError:
        return None
    return digest.hexdigest()[:32]


def _peer_uid(sock: socket.socket) -> int:
    return _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))[1]


# -------------------------------------------------------------------------------------------------
# The client: the `lumen-ex check` command


def warm_check(exercise: str, *, workspace: Path, sandbox: str, note: str, device: str, seed: int | None,
               limit_s: float) -> tuple[dict, list[str]] | None:
    """The result record (and its warnings) of a check by this workspace's server, or None: then
    check cold. ``sandbox`` is the sandbox the cold check would use (bwrap, none, or docker: then forked in a slot), ``note``
    the warning it would show; ``limit_s`` how long to wait for the answer."""
    folder = runtime_dir()
    key = server_key(workspace, sandbox, device) if folder is not None else None
    if folder is None or key is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_S)
        sock.connect(str(folder / f"{key}.sock"))
        if _peer_uid(sock) != os.getuid():
            return None
        request = {"exercise": str(exercise), "seed": seed, "note": note}
        sock.sendall(json.dumps(request).encode() + b"\n")
        sock.settimeout(limit_s)
        chunks, size = [], 0
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > ANSWER_BYTES:
                return None
            chunks.append(chunk)
        answer = json.loads(b"".join(chunks) or b"null")
        if not isinstance(answer, dict) or not isinstance(answer.get("result"), dict):
            return None
        return answer["result"], [str(w) for w in answer.get("warnings") or []]
    except (OSError, ValueError):
        return None
    finally:
        sock.close()


def _ask_to_stop(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.settimeout(CONNECT_S)
            sock.connect(str(path))
            sock.sendall(b'{"stop": true}\n')
            sock.settimeout(60.0)
            sock.recv(16)
        except OSError:
            return False
    return True


def stop_all(folder: Path | None = None) -> int:
    """Ask every server whose socket is in ``folder`` (default: the user's runtime folder) to stop,
    and wait until their sockets are gone (a minute at most); how many were asked."""
    folder = folder if folder is not None else runtime_dir()
    if folder is None or not folder.is_dir():
        return 0
    asked = sum(_ask_to_stop(path) for path in sorted(folder.glob("*.sock")))
    deadline = time.monotonic() + 60
    while list(folder.glob("*.sock")) and time.monotonic() < deadline:
        time.sleep(0.05)
    return asked


def start(workspace: Path, sandbox: str, device: str, exercise: str) -> None:
    """Start this workspace's server in the background, warming ``exercise`` (the one just
    checked); it stays only if no other server of the same key runs."""
    folder = runtime_dir(create=True)
    key = server_key(workspace, sandbox, device) if folder is not None else None
    if folder is None or key is None:
        return
    from lumen_ex.core.trusted import TRUSTED_CWD, child_env, python_command

    with open(folder / f"{key}.log", "ab") as log:
        subprocess.Popen(python_command("lumen_ex.learner.check_server", key, str(workspace.resolve()), sandbox,
                                        device, exercise),
                         cwd=TRUSTED_CWD, env=child_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True, close_fds=True)


# -------------------------------------------------------------------------------------------------
# The server


class Stopped(Exception):
    """A stop request: the server ends."""


class CheckServer:
    """One workspace's warm checks, one at a time, for its own user only."""

    def __init__(self, key: str, workspace: Path, sandbox: str, device: str, folder: Path):
        self.key, self.workspace, self.sandbox, self.device = key, workspace, sandbox, device
        self.socket_path = folder / f"{key}.sock"
        self.session: WatchSession | None = None    # the session of the exercise checked last
        self.next_seed: int | None = None   # drawn in advance for the next check that names no seed
        self.listener: socket.socket | None = None

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
        assert self.listener is not None
        try:
            while True:
                readable, _, _ = select.select([self.listener], [], [], idle_s)
                if not readable:
                    return                              # idle: stop
                conn, _ = self.listener.accept()
                with conn:
                    if _peer_uid(conn) != os.getuid():
                        continue                        # another user: not a word
                    try:
                        self._answer(conn)
                    except (Stopped, SystemExit):
                        raise
                    except Exception as exc:  # noqa: BLE001  the next check gets a fresh session
                        log(f"the session failed ({type(exc).__name__}: {exc}); the next check starts a new one")
                        self._close_session()
        except Stopped:
            return
        finally:
            self.close()

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
            result = self._check(exercise, seed, note)
        except Exception as exc:  # noqa: BLE001  the client then checks cold, and says what is wrong itself
            log(f"not checked warm ({type(exc).__name__}): the check goes cold")
            conn.sendall(json.dumps({"result": None}).encode())
            return
        assert self.session is not None     # _check made it
        log(f"checked {self.session.ex.dir} seed {result.seed}: {result.status.value} in "
            f"{time.monotonic() - started:.2f} s")
        conn.settimeout(60.0)
        try:
            conn.sendall(json.dumps({"result": result.to_dict(), "warnings": list(result.warnings)}).encode())
        except OSError:
            pass
        finally:
            self._ready_next()

    def warm(self, exercise: str) -> None:
        """Make the session of ``exercise`` (the one just checked cold) ready before it is asked for."""
        try:
            self._session_for(exercise)
            self._ready_next()
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
            self.session = WatchSession(ex.slug, workspace=self.workspace, sandbox=self.sandbox, device=self.device,
                                        record=True, watch=False)
        return self.session

    def _check(self, exercise: str, seed, note: str):
        from lumen_ex.core import seeds

        session = self._session_for(exercise)
        session.seed = self.next_seed if seed is None and self.next_seed is not None else seeds.choose(seed)
        self.next_seed = None
        session.warning = note
        return session.check_once()

    def _close_session(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            session.close()

    def close(self) -> None:
        self._close_session()
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            self.socket_path.unlink(missing_ok=True)


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
    sys.exit(main(sys.argv[1:]))
