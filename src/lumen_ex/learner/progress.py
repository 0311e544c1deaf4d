"""What a learner has done so far: the exercise list with progress, and the next hint."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lumen_ex.core import catalog as catalog_mod
from lumen_ex.core.workspace import Workspace


@dataclass
class ExerciseRow:
    number: int
    slug: str
    title: str
    path: str
    status: str          # "not checked", "pass", "fail", or "needs triton" (the exercise's package is missing)
    best_score: float
    max_score: float
    checks: int


def list_exercises(workspace: Path | None = None) -> tuple[Workspace | None, list[ExerciseRow]]:
    """Every exercise, with the learner's progress when a workspace is found."""
    cat = catalog_mod.load()
    try:
        ws = Workspace.find(workspace)
        progress = ws.progress().get("exercises", {})
    except Exception:  # noqa: BLE001  no workspace: list the exercises without progress
        if workspace is not None:
            raise
        ws, progress = None, {}
    rows = []
    for ex in cat.exercises:
        entry = progress.get(ex.slug, {})
        status = entry.get("last_status") or (f"needs {ex.kernel}" if ex.missing() else "not checked")
        rows.append(ExerciseRow(ex.number, ex.slug, ex.title, ex.path, status, float(entry.get("best_score", 0.0)),
                                ex.max_score, int(entry.get("checks", 0))))
    return ws, rows


def list_document(ws: Workspace | None, rows: list[ExerciseRow]) -> dict:
    """``lumen-ex list --format json``: the packs in use, every exercise, and progress when a
    workspace was found (format_version 1; docs/authoring.md)."""
    from lumen_ex.core.packs import discover

    cat = catalog_mod.load()
    by_number = {ex.number: ex for ex in cat.exercises}
    exercises = []
    for r in rows:
        ex = by_number[r.number]
        exercises.append({"number": ex.number, "slug": ex.slug, "title": ex.title, "dir": ex.dir, "file": ex.file,
                          "path": ex.path, "functions": list(ex.functions), "points": ex.points,
                          "max_score": ex.max_score, "pack": ex.pack, "status": r.status,
                          "best_score": r.best_score, "checks": r.checks})
    return {"format_version": 1, "catalog_version": cat.version,
            "packs": [{"name": p.name, "version": p.version, "title": p.title, "root": str(p.root),
                       "builtin": p.builtin, "exercises": list(p.folders)} for p in discover()],
            "workspace": str(ws.root) if ws is not None else None, "exercises": exercises}


@dataclass
class Hint:
    exercise: catalog_mod.Exercise
    index: int           # 0-based
    total: int
    text: str
    because: str = ""    # the last check's first failure this hint was chosen for (a mistake id or a kind)
    more: bool = False   # some hints are not shown yet


def choose_hint(ex: catalog_mod.Exercise, revealed: list[int], failure: list[str]) -> tuple[int, str]:
    """Which hint to show next, and the failure it answers ('' when none): the hint that answers the
    last check's first failure (its mistake first, then its kind; exercise.toml [hint_for]) unless it
    was shown already, else the first not shown yet in order; once all are shown, the one that
    answers the failure again, else the last."""
    answers = [(ex.hint_for[key], key) for key in failure if key in ex.hint_for]
    for index, key in answers:
        if index not in revealed:
            return index, key
    unseen = [i for i in range(len(ex.hints)) if i not in revealed]
    if unseen:
        return unseen[0], ""
    return answers[0] if answers else (len(ex.hints) - 1, "")


def next_hint(exercise: str, workspace: Path | None = None) -> Hint:
    """The next hint for ``exercise`` (see :func:`choose_hint`): each call reveals one more
    (remembered per workspace)."""
    ex = catalog_mod.load().find(exercise)
    ws = Workspace.find(workspace)
    index, because = choose_hint(ex, ws.hints_revealed(ex.slug), ws.last_failure(ex.slug))
    more = len(set(ws.reveal_hint(ex.slug, index))) < len(ex.hints)
    return Hint(ex, index, len(ex.hints), ex.hints[index], because, more)


def seen_hints(exercise: str, workspace: Path | None = None) -> list[Hint]:
    """The hints of ``exercise`` shown so far, in the order they were shown (none revealed by asking)."""
    ex = catalog_mod.load().find(exercise)
    ws = Workspace.find(workspace)
    revealed = [i for i in ws.hints_revealed(ex.slug) if 0 <= i < len(ex.hints)]
    more = len(set(revealed)) < len(ex.hints)
    return [Hint(ex, i, len(ex.hints), ex.hints[i], more=more) for i in revealed]
