"""Reading a file that a learner may have crafted: regular files only, never more than a cap.

Trusted code (the ``lumen-ex grade`` coordinator, src/lumen_ex/classroom/submissions.py; the platform entry
point, src/lumen_ex/classroom/platforms.py) reads files out of submissions: the exercise files, a checkout's
``.git/HEAD`` and refs, zips. Any of them may be a symbolic link to ``/dev/zero`` or
``/etc/shadow``, a FIFO that blocks the first ``read`` forever, a socket, a device file, or simply
enormous. Every such read goes through :func:`open_regular` / :func:`read_regular`, which

1. look at the entry itself (``lstat``, links not followed) and refuse anything that is not a
   regular file, before opening it (opening some device files has effects of its own);
2. refuse a file larger than the caller's cap;
3. refuse a file whose real location is outside the folder it must lie in (``within``: a parent
   folder that is a link pointing elsewhere);
4. open it with ``O_NOFOLLOW | O_NONBLOCK`` (a link or FIFO swapped in after step 1 neither is
   followed nor blocks), check again with ``fstat`` that it is the same regular file, and read at
   most ``cap + 1`` bytes, so a file that grows meanwhile is refused too.

Each refusal is a :class:`NotReadable` whose message says what the file is and why it was not read,
written for the instructor's gradebook.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_OPEN_FLAGS = (os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_NOCTTY", 0))


class NotReadable(Exception):
    """A submission's file that trusted code will not read; the message is the reason."""


class NotRegular(NotReadable):
    """The entry is a link, a FIFO, a socket, a device or a folder: only regular files are read."""


class TooLarge(NotReadable):
    """The file is larger than the reader's cap."""


def describe_kind(mode: int) -> str:
    """What a non-regular entry is, in words: 'a symbolic link', 'a FIFO (named pipe)' ..."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def size_text(n: int) -> str:
    """A byte count for a message: '512 B', '48 KiB', '50 MiB'."""
    if n < 1 << 10:
        return f"{n} B"
    if n < 1 << 20:
        return f"{n >> 10} KiB"
    return f"{n >> 20} MiB"


def check_regular(path: Path, cap: int, *, name: str | None = None, within: Path | None = None) -> os.stat_result:
    """The ``lstat`` of ``path`` if it is a regular file of at most ``cap`` bytes inside ``within``.

    Raises :class:`NotRegular`, :class:`TooLarge` or :class:`NotReadable` (missing, outside).
    ``name`` is how the messages call the file (default: the path)."""
    label = name or str(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise NotReadable(f"{label} does not exist") from None
    except OSError as exc:
        raise NotReadable(f"{label} cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(f"{label} is {describe_kind(st.st_mode)}: only regular files are read")
    if st.st_size > cap:
        raise TooLarge(f"{label} is {size_text(st.st_size)} (at most {size_text(cap)})")
    if within is not None and not _inside(path, within):
        raise NotRegular(f"{label} lies outside the submission (a folder on its way is a symbolic link)")
    return st


def open_regular(path: Path, cap: int, *, name: str | None = None, within: Path | None = None) -> int:
    """A read-only descriptor of ``path``, after :func:`check_regular`; the caller closes it."""
    label = name or str(path)
    st = check_regular(path, cap, name=name, within=within)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise NotReadable(f"{label} cannot be opened ({exc.strerror or exc})") from None
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise NotRegular(f"{label} changed while it was being read: only regular files are read")
        if now.st_size > cap:
            raise TooLarge(f"{label} is {size_text(now.st_size)} (at most {size_text(cap)})")
        os.set_blocking(fd, True)      # a regular file: reads never wait anyway
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, cap: int, *, name: str | None = None, within: Path | None = None) -> bytes:
    """The contents of the regular file ``path``: at most ``cap`` bytes, else :class:`TooLarge`."""
    fd = open_regular(path, cap, name=name, within=within)
    try:
        return read_capped(fd, cap, name or str(path))
    finally:
        os.close(fd)


def read_capped(fd: int, cap: int, label: str) -> bytes:
    """Read ``fd`` to its end, refusing (:class:`TooLarge`) once more than ``cap`` bytes arrive."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(1 << 20, cap + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > cap:
            raise TooLarge(f"{label} grew past {size_text(cap)} while it was being read")


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path``'s real location (parent links resolved) is inside ``folder``'s."""
    real = Path(os.path.realpath(path))
    return real.is_relative_to(Path(os.path.realpath(folder)))
