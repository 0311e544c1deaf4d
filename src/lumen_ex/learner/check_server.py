"""A warm ``lumen-ex check`` in the terminal: a background server of the learner's own, per workspace.

A cold ``lumen-ex check`` pays two torch imports (the harness's and its worker's) before its first
test: about 2.5 s on a quiet 2-core machine, every time. After a cold check, the command starts this
server in the background (:func:`start`); the next ``lumen-ex check`` of the same workspace asks it
(:func:`warm_check`) and pays a connection and the hidden tests. The server keeps one
:class:`~lumen_ex.learner.watch_session.WatchSession` for the exercise checked last, exactly as
``lumen-ex watch`` does: the harness and the suite imported, the next worker launched in advance
(under bwrap forked from a warm zygote), a fresh worker for every check, the file snapshotted when
the check begins.

Between checks the server watches the file of that exercise: a save is graded at once, in the
background, with the seed drawn in advance for the next check
(src/lumen_ex/learner/warm_server.py ``Early``). The next
``lumen-ex check`` that names no seed, made while the file still holds those bytes, is answered with
that grading (waiting for it if it is still running) and records it then; anything else (other
bytes, another seed, another exercise) is graded when asked, and a grading of bytes saved over is
stopped. A learner who saves and then types the command finds the answer ready or under way:
the file graded is the file as it was when the check began, as for any check.

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

This module is the client's side and what both sides share; the server's process is
src/lumen_ex/learner/warm_server.py. The server is a trusted process like a grading process:
``python -I`` in a fixed folder, its own session, never importing from the workspace (src/lumen_ex/core/trusted.py). A request is one JSON line
of at most REQUEST_BYTES; the answer is the result record's JSON (``RunResult.to_dict``), the
same record the cold check makes.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

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


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a unix socket, as the kernel gives it."""
    return _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))[1]


# -------------------------------------------------------------------------------------------------
# The client: the `lumen-ex check` command


def warm_check(exercise: str, *, workspace: Path, sandbox: str, note: str, device: str, seed: int | None,
               limit_s: float, meanwhile: Callable[[], object] | None = None) -> tuple[dict, list[str]] | None:
    """The result record (and its warnings) of a check by this workspace's server, or None: then
    check cold. ``sandbox`` is the sandbox the cold check would use (bwrap, none, or docker: then forked in a slot), ``note``
    the warning it would show; ``limit_s`` how long to wait for the answer; ``meanwhile`` is called
    once the request is sent, while the server grades (the caller's own imports: the renderer)."""
    folder = runtime_dir()
    key = server_key(workspace, sandbox, device) if folder is not None else None
    if folder is None or key is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_S)
        sock.connect(str(folder / f"{key}.sock"))
        if peer_uid(sock) != os.getuid():
            return None
        request = {"exercise": str(exercise), "seed": seed, "note": note}
        sock.sendall(json.dumps(request).encode() + b"\n")
        if meanwhile is not None:
            meanwhile()
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
        subprocess.Popen(python_command("lumen_ex.learner.warm_server", key, str(workspace.resolve()), sandbox,
                                        device, exercise),
                         cwd=TRUSTED_CWD, env=child_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True, close_fds=True)
