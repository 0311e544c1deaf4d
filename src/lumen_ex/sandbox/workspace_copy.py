"""A learner's workspace, read by the trusted side to be sent to a worker forked from a zygote.

A worker bwrap starts on its own sees the workspace through a read-only bind mount. A worker forked
from a zygote (src/lumen_ex/sandbox/zygote.py) was forked inside a sandbox made before its
submission was known, so its init writes a copy of the workspace onto a tmpfs of its own
(src/lumen_ex/sandbox/inside/zygote.py) from what :func:`workspace_copy` reads here. The folder is
the learner's: nothing is followed, and the copy is bounded; a workspace past a bound gets a fresh
worker with the folder bound instead, graded the same way.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Required, TypedDict

WORKSPACE_FILES = 500       # folders, files and links
WORKSPACE_BYTES = 32 << 20
WORKSPACE_DEPTH = 8


class CopyEntry(TypedDict, total=False):
    """One entry of a copy: a folder, a link (``target``) or a regular file (``size``, ``mode``)."""

    kind: Required[str]     # "dir", "link" or "file"
    path: Required[str]     # relative to the copy's root
    target: str
    size: int
    mode: int


class ZygoteUnavailable(RuntimeError):
    """This launch cannot be a fork (the reason is the message); a fresh worker is started instead."""


def workspace_copy(root: Path) -> tuple[list[CopyEntry], bytes]:
    """The workspace's folders, regular files and links under ``root`` (folders first), and the
    files' bytes in the order they are listed.

    Read by the trusted side from a folder the learner controls: nothing is followed (links are
    copied as links, other special files are left out), and the walk stops with
    ZygoteUnavailable past WORKSPACE_FILES entries, WORKSPACE_BYTES or WORKSPACE_DEPTH."""
    try:
        return _copy(Path(root))
    except OSError as exc:    # a folder or file the trusted side may not read: bind it instead
        raise ZygoteUnavailable(f"the workspace could not be copied: {exc.strerror or exc}") from None


def copy_digests(entries: list[CopyEntry], data: bytes) -> dict[str, str]:
    """One copy as a digest per entry (its path to a hash of its kind, mode, link target and bytes):
    two copies with the same digests are the same."""
    digests, offset = {}, 0
    for entry in entries:
        size = entry.get("size", 0)
        content, offset = data[offset:offset + size], offset + size
        digests[entry["path"]] = hashlib.sha256(json.dumps(entry, sort_keys=True).encode() + b"\0" + content).hexdigest()
    return digests


@dataclass(frozen=True)
class CopyRecord:
    """What a forked worker's copy of the workspace held: ``digests`` (:func:`copy_digests`) of
    ``folder`` when it was copied, but for ``graded``, the file the check grades (its path in the
    folder): the worker imports the check's snapshot of that one (src/lumen_ex/core/snapshot.py)."""

    folder: Path
    digests: dict[str, str]
    graded: str = ""

    @classmethod
    def of(cls, folder: Path, entries: list[CopyEntry], data: bytes, graded: Path | None) -> CopyRecord:
        skip = ""
        if graded is not None:
            try:
                skip = graded.resolve().relative_to(folder).as_posix()
            except ValueError:
                pass
        digests = copy_digests(entries, data)
        digests.pop(skip, None)
        return cls(folder, digests, skip)

    def current(self) -> bool:
        """Whether the folder still holds what was copied (a helper module saved since: no)."""
        try:
            now = copy_digests(*workspace_copy(self.folder))
        except ZygoteUnavailable:
            return False
        now.pop(self.graded, None)
        return now == self.digests


def _copy(root: Path) -> tuple[list[CopyEntry], bytes]:
    found: list[tuple[CopyEntry, bytes]] = []
    total = 0
    pending = [(Path(root), "", 0)]
    while pending:
        folder, prefix, depth = pending.pop()
        if depth > WORKSPACE_DEPTH:
            raise ZygoteUnavailable("the workspace is too deep to copy")
        with os.scandir(folder) as listing:
            items = sorted(listing, key=lambda e: e.name)
        for item in items:
            if len(found) >= WORKSPACE_FILES:
                raise ZygoteUnavailable("the workspace has too many files to copy")
            relative = f"{prefix}{item.name}"
            info = item.stat(follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                found.append(({"kind": "link", "path": relative, "target": os.readlink(item.path)[:4096]}, b""))
            elif stat.S_ISDIR(info.st_mode):
                found.append(({"kind": "dir", "path": relative}, b""))
                pending.append((Path(item.path), relative + "/", depth + 1))
            elif stat.S_ISREG(info.st_mode):
                content = _read_regular(item.path, WORKSPACE_BYTES - total)
                total += len(content)
                found.append(({"kind": "file", "path": relative, "size": len(content),
                               "mode": info.st_mode & 0o777}, content))
    found.sort(key=lambda pair: (pair[0]["kind"] != "dir", pair[0]["path"].count("/"), pair[0]["path"]))
    return [entry for entry, _ in found], b"".join(content for _, content in found)


def _read_regular(path: str, budget: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > budget:
                raise ZygoteUnavailable("the workspace is too large to copy")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
