"""What ``lumen-ex grade`` reads of a submission's ``.git``, without running git: the commit it is
at (:func:`read_git_commit`) and that commit's committer time (:func:`commit_object`, :func:`committer_time`).

Every file is read through src/lumen_ex/core/bounded.py: small regular files inside ``.git`` only
(``HEAD`` linked to ``/dev/zero`` refuses the submission), each with a size cap; a pack file is never
read whole, only one object at an offset.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import stat
import struct
import zlib
from pathlib import Path

from lumen_ex.classroom.submission_limits import Budget, SubmissionRefused, list_dir
from lumen_ex.core.bounded import NotReadable, TooLarge, open_regular, read_regular

MAX_GIT_FILE_BYTES = 4 << 10      # .git/HEAD, .git/refs/...
MAX_PACKED_REFS_BYTES = 1 << 20   # .git/packed-refs (larger: the commit is simply not recorded)
MAX_LOOSE_OBJECT_BYTES = 1 << 20      # a compressed commit object
MAX_PACK_INDEX_BYTES = 64 << 20
MAX_PACK_BYTES = 1 << 40              # a pack is never read whole: one object at an offset
MAX_PACKS = 64

_SHA = re.compile(r"[0-9a-f]{40,64}")
_REF = re.compile(r"refs/[A-Za-z0-9._/-]{1,200}")


def git_commit(folder: Path) -> str:
    """The commit a git checkout is at (read from .git, no git needed); empty when unknown or unsafe."""
    try:
        return read_git_commit(folder)
    except SubmissionRefused:
        return ""


def read_git_commit(folder: Path) -> str:
    """The commit of the checkout ``folder`` ('' when unknown); :class:`SubmissionRefused` when its
    ``.git`` metadata is not made of small regular files (``HEAD`` linked to ``/dev/zero`` ...)."""
    git = folder / ".git"
    try:
        if not stat.S_ISDIR(os.lstat(git).st_mode):
            return ""           # a .git file (a worktree) or a link: nothing of it is read
    except OSError:
        return ""
    head = _git_file(git, "HEAD", MAX_GIT_FILE_BYTES)
    if not head.startswith("ref: "):
        return head if _SHA.fullmatch(head) else ""
    ref = head[5:].strip()
    if not _REF.fullmatch(ref) or ".." in ref.split("/"):
        return ""
    sha = _git_file(git, ref, MAX_GIT_FILE_BYTES)
    if sha:
        return sha if _SHA.fullmatch(sha) else ""
    for line in _git_file(git, "packed-refs", MAX_PACKED_REFS_BYTES, large_ok=True).splitlines():
        sha, _, name = line.partition(" ")
        if name == ref and _SHA.fullmatch(sha):
            return sha
    return ""


def _git_file(git: Path, rel: str, cap: int, large_ok: bool = False) -> str:
    """One file of ``.git``, stripped ('' when absent, or too large and ``large_ok``)."""
    path = git / rel
    if not os.path.lexists(path):
        return ""
    try:
        return read_regular(path, cap, name=f".git/{rel}", within=git).decode(errors="replace").strip()
    except TooLarge as exc:
        if large_ok:
            return ""
        raise SubmissionRefused(str(exc)) from None
    except NotReadable as exc:
        raise SubmissionRefused(str(exc)) from None


# -- the commit's committer time: the commit object, from a loose object or a pack file -------------


def commit_object(git: Path, sha: str) -> bytes | None:
    """The body of the commit ``sha`` in the ``.git`` folder ``git`` (None when it cannot be read)."""
    return _loose_object(git, sha) or _packed_object(git, sha)


def committer_time(commit: bytes) -> dt.datetime | None:
    """The ``committer ... <email> SECONDS +HHMM`` line of a commit object, as an aware time."""
    m = re.search(rb"^committer .*> (\d+) ([+-])(\d\d)(\d\d)$", commit, re.M)
    if not m:
        return None
    offset = dt.timedelta(hours=int(m.group(3)), minutes=int(m.group(4))) * (-1 if m.group(2) == b"-" else 1)
    return dt.datetime.fromtimestamp(int(m.group(1)), dt.timezone(offset))


def _inflate(data: bytes, limit: int = 1 << 16) -> bytes:
    """At most ``limit`` bytes of a zlib stream (a commit is small; a bomb is not inflated)."""
    return zlib.decompressobj().decompress(data, limit)


def _loose_object(git: Path, sha: str) -> bytes | None:
    path = git / "objects" / sha[:2] / sha[2:]
    if not os.path.lexists(path):
        return None
    try:
        raw = _inflate(read_regular(path, MAX_LOOSE_OBJECT_BYTES, name=f".git/objects/{sha[:2]}", within=git))
    except (NotReadable, zlib.error):
        return None
    header, _, body = raw.partition(b"\0")
    return body if header.startswith(b"commit ") else None


def _packed_object(git: Path, sha: str) -> bytes | None:
    """The commit ``sha`` from a pack file (stored whole, as git stores commits; a delta is not
    resolved: then None)."""
    pack_dir = git / "objects" / "pack"
    try:
        indexes = [e for e in list_dir(pack_dir, Budget(entries=4 * MAX_PACKS)) if e.name.endswith(".idx")]
    except SubmissionRefused:
        return None
    for entry in indexes[:MAX_PACKS]:
        offset = _pack_offset(Path(entry.path), bytes.fromhex(sha), git)
        if offset is not None:
            return _read_pack_commit(Path(entry.path).with_suffix(".pack"), offset, git)
    return None


def _pack_offset(idx: Path, sha: bytes, git: Path) -> int | None:
    """Where ``sha`` starts in the pack of the version-2 index ``idx``."""
    try:
        data = read_regular(idx, MAX_PACK_INDEX_BYTES, name=f".git/objects/pack/{idx.name}", within=git)
    except NotReadable:
        return None
    if data[:8] != b"\xfftOc\x00\x00\x00\x02" or len(data) < 8 + 1024:
        return None
    fanout = struct.unpack(">256I", data[8:8 + 1024])
    count = fanout[255]
    lo = fanout[sha[0] - 1] if sha[0] else 0
    names = 8 + 1024
    for i in range(lo, fanout[sha[0]]):
        if data[names + 20 * i:names + 20 * i + 20] == sha:
            offsets = names + 24 * count            # after the names and the CRCs
            (off,) = struct.unpack(">I", data[offsets + 4 * i:offsets + 4 * i + 4])
            if off & 0x80000000:
                large = offsets + 4 * count + 8 * (off & 0x7FFFFFFF)
                (off,) = struct.unpack(">Q", data[large:large + 8])
            return off
    return None


def _read_pack_commit(pack: Path, offset: int, git: Path) -> bytes | None:
    try:
        fd = open_regular(pack, MAX_PACK_BYTES, name=f".git/objects/pack/{pack.name}", within=git)
    except NotReadable:
        return None
    try:
        chunk = os.pread(fd, 1 << 16, offset)
    finally:
        os.close(fd)
    if not chunk:
        return None
    kind, i = (chunk[0] >> 4) & 7, 0
    while chunk[i] & 0x80 and i < 10:           # the size's continuation bytes
        i += 1
    if kind != 1:                               # 1: a commit stored whole
        return None
    try:
        return _inflate(chunk[i + 1:])
    except zlib.error:
        return None
