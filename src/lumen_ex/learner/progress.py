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
    status: str          # "not checked", "pass", "fail"
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
        rows.append(ExerciseRow(ex.number, ex.slug, ex.title, ex.path,
                                entry.get("last_status", "not checked"), float(entry.get("best_score", 0.0)),
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


def next_hint(exercise: str, workspace: Path | None = None) -> Hint:
    """The next hint for ``exercise``: each call reveals one more (remembered per workspace)."""
    ex = catalog_mod.load().find(exercise)
    ws = Workspace.find(workspace)
    i = ws.next_hint(ex.slug, len(ex.hints))
    return Hint(ex, i, len(ex.hints), ex.hints[i])


def seen_hints(exercise: str, workspace: Path | None = None) -> list[Hint]:
    """The hints of ``exercise`` shown so far, in order (none revealed by asking)."""
    ex = catalog_mod.load().find(exercise)
    ws = Workspace.find(workspace)
    entry = ws.progress().get("exercises", {}).get(ex.slug, {})
    shown = min(int(entry.get("hints_shown", 0) or 0), len(ex.hints))
    return [Hint(ex, i, len(ex.hints), ex.hints[i]) for i in range(shown)]
