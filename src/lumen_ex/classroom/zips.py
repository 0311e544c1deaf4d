"""Unpacking a submitted ``.zip`` into the scratch folder, member by member, without trusting it.

Refused (:class:`~lumen_ex.classroom.submission_limits.SubmissionRefused`): absolute paths, ``..``,
encrypted members, more than :data:`MAX_ZIP_MEMBERS` members, more than :data:`MAX_ZIP_BYTES`
unpacked (counted while reading, not taken from the zip's own headers), a member list (central
directory) over :data:`MAX_ZIP_DIRECTORY_BYTES` (checked before it is parsed) and paths deeper than
:data:`MAX_ZIP_DEPTH` folders. Symbolic links in a zip are skipped (and named in the reason when the
exercise's file was one). The zip itself is opened through src/lumen_ex/core/bounded.py: a regular
file of at most :data:`MAX_ZIP_FILE_BYTES`.
"""

from __future__ import annotations

import os
import re
import stat
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

from lumen_ex.classroom.submission_limits import SKIP_DIRS, Budget, SubmissionRefused
from lumen_ex.core.bounded import NotReadable, open_regular

MAX_ZIP_MEMBERS = 2000
MAX_ZIP_BYTES = 64 << 20          # unpacked, all members together
MAX_ZIP_MEMBER_BYTES = 16 << 20
MAX_ZIP_FILE_BYTES = 256 << 20    # the .zip itself
MAX_ZIP_DIRECTORY_BYTES = 4 << 20  # its list of members, checked before zipfile parses it
MAX_ZIP_DEPTH = 16                # folders in one member's path

_ZIPFILE: Any = zipfile           # its private end-record helpers, which typeshed does not declare


def extract_zip(path: Path, dest: Path, budget: Budget | None = None,
                links: list[str] | None = None) -> list[str]:
    """Unpack ``path`` into the new folder ``dest``; raise :class:`SubmissionRefused` if unsafe.

    ``links`` collects the names of the symbolic links that were skipped."""
    budget = budget or Budget()
    notes: list[str] = []
    dest.mkdir(parents=True)
    root = dest.resolve()
    try:
        with open_zip(path) as zf:
            infos = zf.infolist()
            if len(infos) > MAX_ZIP_MEMBERS:
                raise SubmissionRefused(f"the zip has {len(infos)} members (at most {MAX_ZIP_MEMBERS})")
            total = 0
            for info in infos:
                budget.spend()
                if _is_link_member(info):
                    notes.append(f"skipped the symbolic link {info.filename!r} in the zip")
                    if links is not None:
                        links.append(info.filename)
                    continue
                target = _member_target(info, root)
                if target is None:
                    continue
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                total += _unpack_member(zf, info, target, total, budget)
    except SubmissionRefused:
        raise
    except FileExistsError as exc:
        raise SubmissionRefused(f"the zip holds the same file twice ({Path(exc.filename).name})") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise SubmissionRefused(f"the zip cannot be read: {type(exc).__name__}: {exc}") from None
    return notes


def open_zip(path: Path) -> zipfile.ZipFile:
    """The zip at ``path`` (links in SUBMISSIONS itself are the instructor's and followed), if it is
    a regular file of at most :data:`MAX_ZIP_FILE_BYTES` whose member list is small enough."""
    try:
        fd = open_regular(Path(os.path.realpath(path)), MAX_ZIP_FILE_BYTES, name=path.name)
    except NotReadable as exc:
        raise SubmissionRefused(str(exc)) from None
    f = os.fdopen(fd, "rb")
    try:
        _check_directory_size(f)
        return zipfile.ZipFile(f)
    except BaseException:
        f.close()
        raise


def _check_directory_size(f) -> None:
    """Refuse a zip whose member list is too large to parse (zipfile reads all of it at once)."""
    end = _ZIPFILE._EndRecData(f)   # noqa: SLF001  the end record: where and how large the list is
    if end is None:
        raise zipfile.BadZipFile("File is not a zip file")
    size = end[_ZIPFILE._ECD_SIZE]   # noqa: SLF001
    if size > MAX_ZIP_DIRECTORY_BYTES:
        raise SubmissionRefused(f"the zip's list of members is {size >> 20} MiB "
                                f"(at most {MAX_ZIP_DIRECTORY_BYTES >> 20} MiB)")
    f.seek(0)


def _is_link_member(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _member_target(info: zipfile.ZipInfo, root: Path) -> Path | None:
    """Where a member is unpacked (None: skipped), or :class:`SubmissionRefused` if it is unsafe."""
    name = info.filename
    if info.flag_bits & 0x1:
        raise SubmissionRefused(f"the zip member {name!r} is encrypted")
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if (not parts or name.startswith(("/", "\\")) or ".." in parts or "\0" in name
            or re.match(r"^[A-Za-z]:", name)):
        raise SubmissionRefused(f"the zip member {name!r} would be written outside its folder")
    if len(parts) > MAX_ZIP_DEPTH:
        raise SubmissionRefused(f"the zip member {name[:80]!r}... is more than {MAX_ZIP_DEPTH} folders deep")
    if any(p in SKIP_DIRS for p in parts):
        return None
    target = root.joinpath(*parts)
    if not target.resolve().is_relative_to(root):
        raise SubmissionRefused(f"the zip member {name!r} would be written outside its folder")
    return target


def _unpack_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, total: int, budget: Budget) -> int:
    """Write one member as a new regular file, counting what it really unpacks to; its size."""
    written = 0
    with zf.open(info) as src, open(target, "xb") as out:
        while chunk := src.read(1 << 16):
            written += len(chunk)
            if written > MAX_ZIP_MEMBER_BYTES:
                raise SubmissionRefused(f"the zip member {info.filename!r} unpacks to more than "
                                        f"{MAX_ZIP_MEMBER_BYTES >> 20} MiB")
            if total + written > MAX_ZIP_BYTES:
                raise SubmissionRefused(f"the zip unpacks to more than {MAX_ZIP_BYTES >> 20} MiB")
            budget.spend(0)     # the time limit
            out.write(chunk)
    os.chmod(target, 0o644)
    return written
