"""A class's submissions, read without trusting any of them.

``SUBMISSIONS`` holds one entry per student: a folder (a lumen-ex workspace, a git checkout, or just
the exercise files), or a ``.zip`` of one. The student's name is the entry's name (``alice``,
``alice.zip`` -> ``alice``), made safe for a file name.

Nothing in a submission is graded where it lies. For each student a throwaway workspace is made
in a scratch folder: the marker file, and for each exercise the learner's file at its catalogue path
with the ``.py`` files beside it. Only regular files are copied (never a symbolic link, which could
point at the instructor's files), each at most :data:`MAX_SOURCE_BYTES`. The learner's file is found
at its catalogue path (``01-attention/attention.py``), at the top of the submission
(``attention.py``), or as the only file of that name anywhere below it; a submission wrapped in one
folder (``alice/week1/...``, a GitHub download) is unwrapped first.

Zips are unpacked member by member into the scratch folder, refusing absolute paths, ``..``,
encrypted members, more than :data:`MAX_ZIP_MEMBERS` members, and more than :data:`MAX_ZIP_BYTES`
unpacked (counted while reading, not taken from the zip's own headers). Symbolic links in a zip are
skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .catalog import Catalog, Exercise
from .workspace import MARKER

MAX_ZIP_MEMBERS = 2000
MAX_ZIP_BYTES = 64 << 20          # unpacked, all members together
MAX_ZIP_MEMBER_BYTES = 16 << 20
MAX_SOURCE_BYTES = 1 << 20        # one learner .py file copied into the throwaway workspace
MAX_SOURCE_FILES = 64             # .py files copied from one exercise folder
SEARCH_DEPTH = 4
SKIP_DIRS = {"__pycache__", "node_modules", "__MACOSX", ".git", ".venv", "venv"}
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._@+-]")


class SubmissionRefused(Exception):
    """The submission cannot be read at all (a zip that is unsafe or broken)."""


@dataclass
class Submission:
    student: str                  # safe for a file name; unique in the class
    source: Path                  # the entry in SUBMISSIONS
    kind: str                     # "folder", "git" or "zip"


@dataclass
class Prepared:
    """A student's throwaway workspace, and why an exercise could not be put in it."""

    workspace: Path
    missing: dict[str, str] = field(default_factory=dict)     # exercise slug -> reason (no such file ...)
    refused: str = ""                                         # the whole submission was unreadable
    found: dict[str, str] = field(default_factory=dict)       # exercise slug -> where it was found


def student_name(raw: str) -> str:
    name = raw[:-4] if raw.lower().endswith(".zip") else raw
    name = _UNSAFE_NAME.sub("_", name).lstrip(".")[:100]
    return name or "student"


def discover(folder: Path, *, exclude: tuple[Path, ...] = ()) -> tuple[list[Submission], list[str]]:
    """One :class:`Submission` per entry of ``folder`` (sorted by name), and notes on what was ignored."""
    folder = Path(folder)
    excluded = {p.resolve() for p in exclude}
    subs: list[Submission] = []
    notes: list[str] = []
    taken: set[str] = set()
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.resolve() in excluded:
            continue
        if entry.is_dir():
            kind = "git" if (entry / ".git").exists() else "folder"
        elif entry.is_file() and entry.name.lower().endswith(".zip"):
            kind = "zip"
        else:
            notes.append(f"ignored {entry.name}: not a folder or a .zip")
            continue
        name = base = student_name(entry.name)
        n = 2
        while name in taken:
            name, n = f"{base}~{n}", n + 1
        if name != base:
            notes.append(f"{entry.name} is graded as {name}: another entry has the same name")
        taken.add(name)
        subs.append(Submission(name, entry, kind))
    return subs, notes


# -- zips -----------------------------------------------------------------------------------------


def extract_zip(path: Path, dest: Path) -> list[str]:
    """Unpack ``path`` into the new folder ``dest``; raise :class:`SubmissionRefused` if unsafe."""
    notes: list[str] = []
    dest.mkdir(parents=True)
    root = dest.resolve()
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            if len(infos) > MAX_ZIP_MEMBERS:
                raise SubmissionRefused(f"the zip has {len(infos)} members (at most {MAX_ZIP_MEMBERS})")
            total = 0
            for info in infos:
                name = info.filename
                mode = info.external_attr >> 16
                if info.flag_bits & 0x1:
                    raise SubmissionRefused(f"the zip member {name!r} is encrypted")
                if stat.S_ISLNK(mode):
                    notes.append(f"skipped the symbolic link {name!r} in the zip")
                    continue
                parts = PurePosixPath(name.replace("\\", "/")).parts
                if (not parts or name.startswith(("/", "\\")) or ".." in parts or "\0" in name
                        or re.match(r"^[A-Za-z]:", name)):
                    raise SubmissionRefused(f"the zip member {name!r} would be written outside its folder")
                if any(p in SKIP_DIRS for p in parts):
                    continue
                target = root.joinpath(*parts)
                if not target.resolve().is_relative_to(root):
                    raise SubmissionRefused(f"the zip member {name!r} would be written outside its folder")
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                written = 0
                with zf.open(info) as src, open(target, "xb") as out:
                    while chunk := src.read(1 << 16):
                        written += len(chunk)
                        total += len(chunk)
                        if written > MAX_ZIP_MEMBER_BYTES:
                            raise SubmissionRefused(f"the zip member {name!r} unpacks to more than "
                                                    f"{MAX_ZIP_MEMBER_BYTES >> 20} MiB")
                        if total > MAX_ZIP_BYTES:
                            raise SubmissionRefused(f"the zip unpacks to more than {MAX_ZIP_BYTES >> 20} MiB")
                        out.write(chunk)
                os.chmod(target, 0o644)
    except SubmissionRefused:
        raise
    except FileExistsError as exc:
        raise SubmissionRefused(f"the zip holds the same file twice ({Path(exc.filename).name})") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise SubmissionRefused(f"the zip cannot be read: {type(exc).__name__}: {exc}") from None
    return notes


# -- finding the learner's files -------------------------------------------------------------------


def unwrap(root: Path, catalog: Catalog) -> Path:
    """Descend through folders that only wrap the submission (one visible sub-folder, no files)."""
    for _ in range(3):
        if (root / MARKER).is_file() or any((root / ex.dir).is_dir() for ex in catalog.exercises):
            return root
        visible = [p for p in root.iterdir() if not p.name.startswith(".") and p.name not in SKIP_DIRS]
        dirs = [p for p in visible if p.is_dir() and not p.is_symlink()]
        if len(visible) != 1 or len(dirs) != 1:
            return root
        root = dirs[0]
    return root


def locate(root: Path, ex: Exercise) -> tuple[Path | None, str]:
    """The learner's file for ``ex`` under ``root``, or None and why not."""
    for candidate in (root / ex.dir / ex.file, root / ex.file):
        if candidate.is_symlink() or (candidate.parent != root and candidate.parent.is_symlink()):
            return None, f"{candidate.relative_to(root)} is a symbolic link: only regular files are graded"
        if candidate.is_file():
            return _checked(candidate, root)
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        depth = len(Path(folder).relative_to(root).parts)
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and depth < SEARCH_DEPTH]
        if ex.file in files:
            found.append(Path(folder) / ex.file)
    if len(found) > 1:
        preferred = [p for p in found if p.parent.name == ex.dir]
        found = preferred if len(preferred) == 1 else found
    if not found:
        return None, f"no {ex.path} in the submission"
    if len(found) > 1:
        listed = ", ".join(str(p.relative_to(root)) for p in found[:4])
        return None, f"several files could be {ex.path}: {listed}"
    if found[0].is_symlink():
        return None, f"{found[0].relative_to(root)} is a symbolic link: only regular files are graded"
    return _checked(found[0], root)


def _checked(path: Path, root: Path) -> tuple[Path | None, str]:
    size = path.lstat().st_size
    if size > MAX_SOURCE_BYTES:
        return None, f"{path.relative_to(root)} is {size >> 10} KiB (at most {MAX_SOURCE_BYTES >> 10} KiB)"
    return path, ""


def prepare(sub: Submission, exercises: list[Exercise], catalog: Catalog, scratch: Path) -> Prepared:
    """Unpack ``sub`` if needed and build its throwaway workspace under ``scratch``."""
    ws = scratch / "ws" / sub.student
    if ws.exists():
        shutil.rmtree(ws)
    ws.mkdir(parents=True)
    ws.chmod(0o755)     # the docker sandbox's worker user must be able to enter it
    (ws / MARKER).write_text(f'# throwaway workspace made by `lumen-ex grade` for {sub.student}\n'
                             f'catalog_version = "{catalog.version}"\n')
    prepared = Prepared(ws)
    root = sub.source
    if sub.kind == "zip":
        unpacked = scratch / "unzipped" / sub.student
        if unpacked.exists():
            shutil.rmtree(unpacked)
        try:
            extract_zip(sub.source, unpacked)
        except SubmissionRefused as exc:
            prepared.refused = f"the submission {sub.source.name} was refused: {exc}"
            return prepared
        root = unpacked
    root = unwrap(root, catalog)
    for ex in exercises:
        path, why = locate(root, ex)
        if path is None:
            prepared.missing[ex.slug] = why
            continue
        prepared.found[ex.slug] = str(path.relative_to(root))
        target_dir = ws / ex.dir
        target_dir.mkdir(exist_ok=True)
        target_dir.chmod(0o755)
        copied = 0
        for sibling in sorted(path.parent.iterdir()):
            if copied >= MAX_SOURCE_FILES:
                break
            if (sibling == path or sibling.suffix != ".py" or sibling.is_symlink() or not sibling.is_file()
                    or sibling.name == ex.file or sibling.lstat().st_size > MAX_SOURCE_BYTES):
                continue
            _copy(sibling, target_dir / sibling.name)
            copied += 1
        _copy(path, target_dir / ex.file)
    return prepared


def _copy(src: Path, dst: Path) -> None:
    with open(src, "rb") as f, open(dst, "wb") as out:   # contents only: no modes, owners or links
        out.write(f.read(MAX_SOURCE_BYTES + 1)[:MAX_SOURCE_BYTES])
    os.chmod(dst, 0o644)


def git_commit(folder: Path) -> str:
    """The commit a git checkout is at (read from .git, no git needed); empty when unknown."""
    git = folder / ".git"
    try:
        if not git.is_dir():
            return ""
        head = (git / "HEAD").read_text()[:200].strip()
        if not head.startswith("ref: "):
            return head if re.fullmatch(r"[0-9a-f]{40,64}", head) else ""
        ref = head[5:].strip()
        if ".." in ref:
            return ""
        ref_file = git / ref
        if ref_file.is_file():
            sha = ref_file.read_text()[:100].strip()
            return sha if re.fullmatch(r"[0-9a-f]{40,64}", sha) else ""
        packed = git / "packed-refs"
        if packed.is_file():
            for line in packed.read_text()[:1 << 20].splitlines():
                sha, _, name = line.partition(" ")
                if name == ref and re.fullmatch(r"[0-9a-f]{40,64}", sha):
                    return sha
    except OSError:
        pass
    return ""
