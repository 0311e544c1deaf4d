"""Seeing a learner save a file: inotify where it works, polling where it does not.

:class:`Inotify` watches the file's folder (``IN_CLOSE_WRITE`` / ``IN_MOVED_TO``), so an editor that
saves by writing a temporary file and renaming it over the old one is seen too; :class:`Poller`
looks at mtime, size and inode every :data:`POLL_INTERVAL` seconds and hashes the content now and
then. Both answer ``read() -> bool`` ("something may have changed"); :func:`file_digest` then says
whether the content really did. Used by ``lumen-ex watch`` (src/lumen_ex/learner/watch_session.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

POLL_INTERVAL = 0.1     # seconds between two looks at the file when polling
HASH_EVERY = 10         # polling: hash the content every N polls even when stat() did not change


@dataclass(frozen=True)
class Change:
    """The learner's file has new content (``digest``), seen at ``seen`` (time.monotonic())."""

    digest: str
    seen: float
    source: str             # "inotify" or "poll"


def file_digest(path: Path) -> str | None:
    """The content's sha256, or None while the file is missing (a save by rename in progress)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return None


class Inotify:
    """inotify on one folder through ctypes, reporting events that concern one file name."""

    IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_TO = 0x2, 0x8, 0x80
    IN_DELETE_SELF, IN_MOVE_SELF, IN_Q_OVERFLOW, IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
    IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
    MASK = IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF
    HEADER = struct.Struct("iIII")   # wd, mask, cookie, len (then len bytes of name)

    def __init__(self, folder: Path, name: str):
        self.name = os.fsencode(name)
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        try:
            init, add = libc.inotify_init1, libc.inotify_add_watch
        except AttributeError:
            raise OSError(errno.ENOSYS, "inotify is not available on this system") from None
        add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        fd = init(self.IN_NONBLOCK | self.IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        if add(fd, os.fsencode(str(folder)), self.MASK) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"inotify_add_watch({folder}) failed")
        self.fd = fd
        self.broken = False   # the folder itself went away: the caller falls back to polling

    def fileno(self) -> int:
        return self.fd

    def read(self) -> bool:
        """Consume pending events; True when one may concern the file."""
        relevant = False
        while True:
            try:
                data = os.read(self.fd, 64 * 1024)
            except BlockingIOError:
                return relevant
            except OSError:
                self.broken = True
                return True
            if not data:
                return relevant
            offset = 0
            while offset + self.HEADER.size <= len(data):
                _wd, mask, _cookie, length = self.HEADER.unpack_from(data, offset)
                name = data[offset + self.HEADER.size: offset + self.HEADER.size + length].rstrip(b"\0")
                offset += self.HEADER.size + length
                if mask & (self.IN_DELETE_SELF | self.IN_MOVE_SELF | self.IN_IGNORED):
                    self.broken, relevant = True, True
                elif mask & self.IN_Q_OVERFLOW:
                    relevant = True
                elif mask & (self.IN_CLOSE_WRITE | self.IN_MOVED_TO) and name == self.name:
                    relevant = True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Poller:
    """The fallback: look at the file every ``interval`` seconds."""

    def __init__(self, path: Path, interval: float = POLL_INTERVAL):
        self.path, self.interval = path, interval
        self.last = self._stat()
        self.ticks = 0

    def _stat(self):
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)

    def fileno(self) -> None:
        return None

    def read(self) -> bool:
        """True when the file's metadata changed, and every HASH_EVERY looks in any case (some
        file systems keep whole-second times: two saves of the same size within a second)."""
        now = self._stat()
        self.ticks += 1
        changed = now != self.last
        self.last = now
        return changed or self.ticks % HASH_EVERY == 0

    def close(self) -> None:
        pass
