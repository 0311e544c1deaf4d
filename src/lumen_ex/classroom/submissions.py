"""A student's submission, read without trusting any of it into a throwaway workspace.

Nothing in a submission is graded where it lies. For each student a throwaway workspace is made
in a scratch folder: the marker file, and for each exercise the learner's file at its catalogue path
with the ``.py`` files beside it. Only regular files are copied (never a symbolic link, which could
point at the instructor's files), each at most :data:`MAX_SOURCE_BYTES`. The learner's file is found
at its catalogue path (``01-attention/attention.py``), at the top of the submission
(``attention.py``), or as the only file of that name anywhere below it; a submission wrapped in one
folder (``alice/week1/...``, a GitHub download) is unwrapped first. A zip is unpacked first
(src/lumen_ex/classroom/zips.py), a git checkout's commit is recorded (src/lumen_ex/classroom/git_checkout.py).

Nothing is read from a submission except through src/lumen_ex/core/bounded.py: regular files only (never a
link, FIFO, socket or device, which could point at ``/dev/zero`` or block forever), each with a size
cap, and inside the submission's own folder. Looking through a submission is bounded too
(src/lumen_ex/classroom/submission_limits.py ``Budget``: entries listed and time spent per student).
A submission that breaks a rule is refused as a whole (every exercise: status ``fail``, 0 points,
the reason in the gradebook), except an exercise file that is not a regular file or is too large,
which fails that exercise alone. Nothing a submission holds can hang or crash the batch.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from lumen_ex.classroom.entries import Submission
from lumen_ex.classroom.git_checkout import read_git_commit
from lumen_ex.classroom.submission_limits import SKIP_DIRS, Budget, SubmissionRefused, is_real_dir, list_dir
from lumen_ex.classroom.zips import extract_zip
from lumen_ex.core.bounded import NotReadable, check_regular, read_regular
from lumen_ex.core.catalog import Catalog, Exercise
from lumen_ex.core.workspace import MARKER

MAX_SOURCE_BYTES = 1 << 20        # one learner .py file copied into the throwaway workspace
MAX_SOURCE_FILES = 64             # .py files copied from one exercise folder
SEARCH_DEPTH = 4


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


# -- finding the learner's files -------------------------------------------------------------------


def unwrap(root: Path, catalog: Catalog, budget: Budget | None = None) -> Path:
    """Descend through folders that only wrap the submission (one visible sub-folder, no files)."""
    budget = budget or Budget()
    for _ in range(3):
        if (root / MARKER).is_file() or any((root / ex.dir).is_dir() for ex in catalog.exercises):
            return root
        visible = [e for e in list_dir(root, budget) if not e.name.startswith(".") and e.name not in SKIP_DIRS]
        dirs = [e for e in visible if is_real_dir(e)]
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
            if entry.name == file_name and not is_real_dir(entry):
                found.append(Path(entry.path))
            elif (is_real_dir(entry) and depth < SEARCH_DEPTH and not entry.name.startswith(".")
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
