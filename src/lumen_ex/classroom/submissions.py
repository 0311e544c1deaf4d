"""A class's submissions, read without trusting any of them.

``SUBMISSIONS`` holds one entry per student: a folder (a lumen-ex workspace, a git checkout, or just
the exercise files), or a ``.zip`` of one. The student's name is the entry's name as given
(``José García.zip`` -> ``José García``); its key, the folder of its results, is a file-system-safe
form of it (``Jose_Garcia``), unique in the class (:func:`discover_entries`). Any other entry (a
``.tar.gz``, a loose ``.py``, a notebook, a hidden folder) is :class:`Skipped`, with the reason.

Nothing in a submission is graded where it lies. For each student a throwaway workspace is made
in a scratch folder: the marker file, and for each exercise the learner's file at its catalogue path
with the ``.py`` files beside it. Only regular files are copied (never a symbolic link, which could
point at the instructor's files), each at most :data:`MAX_SOURCE_BYTES`. The learner's file is found
at its catalogue path (``01-attention/attention.py``), at the top of the submission
(``attention.py``), or as the only file of that name anywhere below it; a submission wrapped in one
folder (``alice/week1/...``, a GitHub download) is unwrapped first.

Zips are unpacked member by member into the scratch folder, refusing absolute paths, ``..``,
encrypted members, more than :data:`MAX_ZIP_MEMBERS` members, more than :data:`MAX_ZIP_BYTES`
unpacked (counted while reading, not taken from the zip's own headers), a member list (central
directory) over :data:`MAX_ZIP_DIRECTORY_BYTES` (checked before it is parsed) and paths deeper than
:data:`MAX_ZIP_DEPTH` folders. Symbolic links in a zip are skipped (and named in the reason when the
exercise's file was one).

Nothing is read from a submission except through src/lumen_ex/core/bounded.py: regular files only (never a
link, FIFO, socket or device, which could point at ``/dev/zero`` or block forever), each with a size
cap (:data:`MAX_SOURCE_BYTES` for learner files, :data:`MAX_GIT_FILE_BYTES` for ``.git/HEAD`` and a
ref, :data:`MAX_PACKED_REFS_BYTES`, :data:`MAX_ZIP_FILE_BYTES` for the zip itself), and inside the
submission's own folder. Looking through a submission is bounded too (:class:`Budget`): at most
:data:`MAX_TREE_ENTRIES` files and folders listed and :data:`PREPARE_SECONDS` seconds per student.
A submission that breaks a rule is refused as a whole (every exercise: status ``fail``, 0 points,
the reason in the gradebook), except an exercise file that is not a regular file or is too large,
which fails that exercise alone. Nothing a submission holds can hang or crash the batch.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import time
import unicodedata
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from lumen_ex.core.bounded import NotReadable, TooLarge, check_regular, open_regular, read_regular
from lumen_ex.core.catalog import Catalog, Exercise
from lumen_ex.core.workspace import MARKER

MAX_ZIP_MEMBERS = 2000
MAX_ZIP_BYTES = 64 << 20          # unpacked, all members together
MAX_ZIP_MEMBER_BYTES = 16 << 20
MAX_SOURCE_BYTES = 1 << 20        # one learner .py file copied into the throwaway workspace
MAX_SOURCE_FILES = 64             # .py files copied from one exercise folder
MAX_ZIP_FILE_BYTES = 256 << 20    # the .zip itself
MAX_ZIP_DIRECTORY_BYTES = 4 << 20  # its list of members, checked before zipfile parses it
MAX_ZIP_DEPTH = 16                # folders in one member's path
MAX_GIT_FILE_BYTES = 4 << 10      # .git/HEAD, .git/refs/...
MAX_PACKED_REFS_BYTES = 1 << 20   # .git/packed-refs (larger: the commit is simply not recorded)
MAX_TREE_ENTRIES = 20_000         # files and folders listed while looking through one submission
PREPARE_SECONDS = 60.0            # time spent unpacking and looking through one submission
SEARCH_DEPTH = 4
SKIP_DIRS = {"__pycache__", "node_modules", "__MACOSX", ".git", ".venv", "venv"}
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._@+-]")


class SubmissionRefused(Exception):
    """The submission cannot be read at all (a zip that is unsafe or broken, a file that breaks the
    rules of src/lumen_ex/core/bounded.py where the whole submission depends on it, a tree too large)."""


class Budget:
    """How much of one submission the coordinator looks at: entries listed, and time spent.

    Every listing and every unpacked chunk is charged here; going over refuses the submission, so
    that a million files, a very deep tree or a slow zip cannot stall the class's grading."""

    def __init__(self, entries: int = MAX_TREE_ENTRIES, seconds: float = PREPARE_SECONDS):
        self.limit, self.left = entries, entries
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def spend(self, entries: int = 1) -> None:
        self.left -= entries
        if self.left < 0:
            raise SubmissionRefused(f"it holds more than {self.limit} files and folders")
        if time.monotonic() > self.deadline:
            raise SubmissionRefused(f"reading it took longer than {self.seconds:g} s")


def list_dir(folder: Path, budget: Budget) -> list[os.DirEntry]:
    """The entries of ``folder`` (sorted by name), each charged to ``budget``; [] if unreadable."""
    entries = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                budget.spend()
                entries.append(entry)
    except OSError:
        return []
    return sorted(entries, key=lambda e: e.name)


def _is_real_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


@dataclass
class Submission:
    student: str                  # the key: safe for a file name, unique in the class (results/<key>/)
    source: Path                  # the entry in SUBMISSIONS
    kind: str                     # "folder", "git" or "zip"
    name: str = ""                # the name as given (the entry's, without .zip): what people read

    def __post_init__(self):
        self.name = self.name or self.student


@dataclass
class Skipped:
    """An entry of SUBMISSIONS that is not graded, and why (it still gets a gradebook row)."""

    entry: str
    reason: str


@dataclass
class Prepared:
    """A student's throwaway workspace, and why an exercise could not be put in it."""

    workspace: Path
    missing: dict[str, str] = field(default_factory=dict)     # exercise slug -> reason (no such file ...)
    refused: str = ""                                         # the whole submission was unreadable
    found: dict[str, str] = field(default_factory=dict)       # exercise slug -> where it was found
    commit: str = ""                                          # a git checkout's commit, when known
    ambiguous: dict[str, str] = field(default_factory=dict)   # exercise slug -> the candidate files


AMBIGUOUS = "several files could be"      # how :func:`locate` starts the reason for two candidates


def given_name(raw: str) -> str:
    """The student's name as the entry gives it: ``José García.zip`` -> ``José García``."""
    return raw[:-4] if raw.lower().endswith(".zip") else raw


def student_key(raw: str) -> str:
    """A file-system-safe form of a name (accents folded, other characters ``_``): the folder
    name under DIR/results. ``José García`` -> ``Jose_Garcia``; an NFD ``Zoë`` -> ``Zoe``."""
    folded = "".join(c for c in unicodedata.normalize("NFKD", raw) if not unicodedata.combining(c))
    name = _UNSAFE_NAME.sub("_", folded).lstrip(".")[:100]
    return name or "student"


def student_name(raw: str) -> str:
    """The key of an entry (``alice.zip`` -> ``alice``)."""
    return student_key(given_name(raw))


SKIP_REASONS = (
    ((".tar.gz", ".tgz", ".tar", ".7z", ".rar", ".gz", ".bz2", ".xz"),
     "an archive lumen-ex does not unpack: only folders and .zip files are graded (unpack it into a folder)"),
    ((".ipynb",), "a Jupyter notebook: export the exercise's code to its .py file, in a folder or a .zip"),
    ((".py",), "a loose .py file: put the student's files in a folder (or a .zip) named after the student"),
)


def skip_reason(entry: Path) -> str:
    """Why an entry that is neither a folder nor a .zip (or is hidden) is not graded."""
    lower = entry.name.lower()
    if entry.name.startswith("."):
        return "a hidden entry (its name starts with a dot): rename it if it is a submission"
    for suffixes, reason in SKIP_REASONS:
        if lower.endswith(suffixes):
            return reason
    return "not a folder or a .zip"


def discover(folder: Path, *, exclude: tuple[Path, ...] = ()) -> tuple[list[Submission], list[str]]:
    """One :class:`Submission` per entry of ``folder`` (sorted by name), and notes on what was ignored."""
    subs, skipped, notes = discover_entries(folder, exclude=exclude)
    return subs, [f"ignored {s.entry}: {s.reason}" for s in skipped] + notes


def discover_entries(folder: Path, *, exclude: tuple[Path, ...] = ()
                     ) -> tuple[list[Submission], list[Skipped], list[str]]:
    """The submissions of ``folder``, the entries skipped (with the reason), and notes.

    Keys never depend on the order of the entries or on which came first: an entry whose key is
    unique gets it; entries whose keys collide (``lee/`` and ``lee.zip``, ``José`` and ``Jose``)
    are keyed by their whole entry name (``lee``, ``lee.zip``) and, if that still collides, by a
    short hash of it. A result stored under a key also records which entry it is of
    (src/lumen_ex/classroom/store.py), so no entry ever inherits another's result."""
    folder = Path(folder)
    excluded = {p.resolve() for p in exclude}
    found: list[tuple[Path, str]] = []
    skipped: list[Skipped] = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.resolve() in excluded or entry.name in SKIP_DIRS:
            continue        # the output folder, a .git or __pycache__ of SUBMISSIONS itself
        hidden = entry.name.startswith(".")
        if entry.is_dir() and not hidden:
            found.append((entry, "git" if (entry / ".git").exists() else "folder"))
        elif entry.name.lower().endswith(".zip") and not hidden:
            found.append((entry, "zip"))    # even if it is no regular file: then it is refused, with a row
        elif not hidden or entry.is_dir():  # hidden files (.DS_Store) are no one's submission
            skipped.append(Skipped(entry.name, skip_reason(entry)))
    subs, notes = _keyed(found)
    return subs, skipped, notes


def _keyed(found: list[tuple[Path, str]]) -> tuple[list[Submission], list[str]]:
    """A unique key for every entry (see :func:`discover_entries`)."""
    base = {entry: student_name(entry.name) for entry, _ in found}
    counts: dict[str, int] = {}
    for key in base.values():
        counts[key] = counts.get(key, 0) + 1
    keys = {e: (k if counts[k] == 1 else student_key(e.name)) for e, k in base.items()}
    seen: dict[str, int] = {}
    for key in keys.values():
        seen[key] = seen.get(key, 0) + 1
    subs, notes = [], []
    for entry, kind in found:
        key = keys[entry]
        if seen[key] > 1:
            key = f"{key[:90]}-{hashlib.sha256(entry.name.encode(errors='surrogateescape')).hexdigest()[:8]}"
        if counts[base[entry]] > 1:
            notes.append(f"{entry.name} and another entry have the same name: its results are under {key}")
        subs.append(Submission(key, entry, kind, name=given_name(entry.name)))
    return subs, notes


# -- zips -----------------------------------------------------------------------------------------


def extract_zip(path: Path, dest: Path, budget: Budget | None = None,
                links: list[str] | None = None) -> list[str]:
    """Unpack ``path`` into the new folder ``dest``; raise :class:`SubmissionRefused` if unsafe.

    ``links`` collects the names of the symbolic links that were skipped."""
    budget = budget or Budget()
    notes: list[str] = []
    dest.mkdir(parents=True)
    root = dest.resolve()
    try:
        with _open_zip(path) as zf:
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


def _open_zip(path: Path) -> zipfile.ZipFile:
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
    end = zipfile._EndRecData(f)   # noqa: SLF001  the end record: where and how large the list is
    if end is None:
        raise zipfile.BadZipFile("File is not a zip file")
    size = end[zipfile._ECD_SIZE]   # noqa: SLF001
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


# -- finding the learner's files -------------------------------------------------------------------


def unwrap(root: Path, catalog: Catalog, budget: Budget | None = None) -> Path:
    """Descend through folders that only wrap the submission (one visible sub-folder, no files)."""
    budget = budget or Budget()
    for _ in range(3):
        if (root / MARKER).is_file() or any((root / ex.dir).is_dir() for ex in catalog.exercises):
            return root
        visible = [e for e in list_dir(root, budget) if not e.name.startswith(".") and e.name not in SKIP_DIRS]
        dirs = [e for e in visible if _is_real_dir(e)]
        if len(visible) != 1 or len(dirs) != 1:
            return root
        root = Path(dirs[0].path)
    return root


def locate(root: Path, ex: Exercise, budget: Budget | None = None) -> tuple[Path | None, str]:
    """The learner's file for ``ex`` under ``root``, or None and why not."""
    budget = budget or Budget()
    for candidate in (root / ex.dir / ex.file, root / ex.file):
        if candidate.parent != root and candidate.parent.is_symlink():
            return None, f"{ex.dir} is a symbolic link: only regular files are graded"
        if os.path.lexists(candidate):
            return _checked(candidate, root)
    found = _search(root, ex.file, budget)
    if len(found) > 1:
        preferred = [p for p in found if p.parent.name == ex.dir]
        found = preferred if len(preferred) == 1 else found
    if not found:
        return None, f"no {ex.path} in the submission"
    if len(found) > 1:
        listed = ", ".join(str(p.relative_to(root)) for p in found[:4])
        return None, f"{AMBIGUOUS} {ex.path}: {listed}"
    return _checked(found[0], root)


def _search(root: Path, file_name: str, budget: Budget) -> list[Path]:
    """Every entry called ``file_name`` below ``root``, at most SEARCH_DEPTH folders down, through
    real folders only (never a link), skipping hidden and tool folders."""
    found: list[Path] = []
    frontier = [(root, 0)]
    while frontier:
        folder, depth = frontier.pop(0)
        for entry in list_dir(folder, budget):
            if entry.name == file_name and not _is_real_dir(entry):
                found.append(Path(entry.path))
            elif (_is_real_dir(entry) and depth < SEARCH_DEPTH and not entry.name.startswith(".")
                  and entry.name not in SKIP_DIRS):
                frontier.append((Path(entry.path), depth + 1))
    return sorted(found)


def _checked(path: Path, root: Path) -> tuple[Path | None, str]:
    """``path`` if it is a regular file within the caps and inside ``root``, else None and why."""
    rel = path.relative_to(root)
    try:
        check_regular(path, MAX_SOURCE_BYTES, name=str(rel), within=root)
    except NotReadable as exc:
        return None, str(exc)
    return path, ""


def prepare(sub: Submission, exercises: list[Exercise], catalog: Catalog, scratch: Path) -> Prepared:
    """Unpack ``sub`` if needed and build its throwaway workspace under ``scratch``.

    Never raises for anything in the submission: what breaks a rule is ``refused`` (the whole
    submission) or ``missing`` (one exercise), with the reason."""
    ws = scratch / "ws" / sub.student
    if ws.exists():
        shutil.rmtree(ws)
    ws.mkdir(parents=True)
    ws.chmod(0o755)     # the docker sandbox's worker user must be able to enter it
    (ws / MARKER).write_text(f'# throwaway workspace made by `lumen-ex grade` for {sub.student}\n'
                             f'catalog_version = "{catalog.version}"\n')
    prepared = Prepared(ws)
    try:
        _fill(prepared, sub, exercises, catalog, scratch, Budget())
    except SubmissionRefused as exc:
        prepared.refused = f"the submission {sub.source.name} was refused: {exc}"
        prepared.found.clear()
        prepared.missing.clear()
        prepared.ambiguous.clear()
    return prepared


def _fill(prepared: Prepared, sub: Submission, exercises: list[Exercise], catalog: Catalog, scratch: Path,
          budget: Budget) -> None:
    """Copy each exercise's files of ``sub`` into the prepared workspace (see :func:`prepare`)."""
    root = sub.source
    links: list[str] = []
    if sub.kind == "git":
        prepared.commit = read_git_commit(sub.source)
    if sub.kind == "zip":
        unpacked = scratch / "unzipped" / sub.student
        if unpacked.exists():
            shutil.rmtree(unpacked)
        extract_zip(sub.source, unpacked, budget, links)
        root = unpacked
    root = Path(os.path.realpath(root))      # SUBMISSIONS' own links are the instructor's
    root = unwrap(root, catalog, budget)
    for ex in exercises:
        path, why = locate(root, ex, budget)
        if path is None:
            prepared.missing[ex.slug] = _link_reason(ex, links) or why
            if why.startswith(AMBIGUOUS):
                prepared.ambiguous[ex.slug] = why
            continue
        try:
            _copy_exercise(path, root, ex, prepared.workspace, budget)
        except NotReadable as exc:
            prepared.missing[ex.slug] = str(exc)
            continue
        prepared.found[ex.slug] = str(path.relative_to(root))


def _link_reason(ex: Exercise, links: list[str]) -> str:
    """The reason for a missing exercise file that was a symbolic link in the zip (else '')."""
    for name in links:
        if PurePosixPath(name.replace("\\", "/")).name == ex.file:
            return f"{name} is a symbolic link in the zip: only regular files are graded"
    return ""


def _copy_exercise(path: Path, root: Path, ex: Exercise, ws: Path, budget: Budget) -> None:
    """The learner's file and the regular ``.py`` files beside it, into the throwaway workspace."""
    target_dir = ws / ex.dir
    target_dir.mkdir(exist_ok=True)
    target_dir.chmod(0o755)
    _copy(path, target_dir / ex.file, root, name=str(path.relative_to(root)))
    copied = 0
    for sibling in list_dir(path.parent, budget):
        if copied >= MAX_SOURCE_FILES:
            break
        if not sibling.name.endswith(".py") or sibling.name == ex.file or not sibling.is_file(follow_symlinks=False):
            continue
        try:
            _copy(Path(sibling.path), target_dir / sibling.name, root)
        except NotReadable:
            continue        # a helper that breaks the rules is left out; the learner's import says so
        copied += 1


def _copy(src: Path, dst: Path, root: Path, name: str | None = None) -> None:
    """Contents only (no modes, owners or links), through the bounded reader."""
    data = read_regular(src, MAX_SOURCE_BYTES, name=name, within=root)
    with open(dst, "wb") as out:
        out.write(data)
    os.chmod(dst, 0o644)


# -- git ---------------------------------------------------------------------------------------------

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
