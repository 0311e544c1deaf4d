"""A learner's workspace: the stubs they edit, found by walking up to its marker file.

    DIR/lumen-ex.toml              the marker (which catalogue the workspace was made from)
    DIR/README.md                  how to work in it
    DIR/01-attention/attention.py  a stub and its README, one folder per exercise
    DIR/.lumen-ex/progress.json    best score per exercise and hints seen (written by the harness)
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lumen_ex.core.atomic import write_atomically
from lumen_ex.core.catalog import Catalog, Exercise, exercises_root
from lumen_ex.core.errors import UsageError, WorkspaceNotFound

if TYPE_CHECKING:
    from lumen_ex.core.results import RunResult

MARKER = "lumen-ex.toml"
STATE_DIR = ".lumen-ex"


def _order(catalog: Catalog) -> str:
    """How the exercises build on each other, from their manifests' ``builds_on`` (in the README's
    "Start with ..." sentence)."""
    here = {ex.number for ex in catalog.exercises}          # a workspace may hold some exercises only
    built = [f"{ex.number} on {' and '.join(map(str, earlier))}" for ex in catalog.exercises
             if (earlier := [n for n in ex.builds_on if n in here])]
    if not built:
        return ", then go in order"
    return ": later exercises build on earlier ones\n(exercise " + ", ".join(built) + ")"


@dataclass
class Workspace:
    root: Path

    @classmethod
    def find(cls, start: Path | None = None) -> Workspace:
        """The workspace holding ``start`` (default: the current folder), as git finds its repo."""
        here = Path(start or os.getcwd()).resolve()
        for folder in (here, *here.parents):
            if (folder / MARKER).is_file():
                return cls(folder)
        raise WorkspaceNotFound(f"no lumen-ex workspace at or above {here}",
                                "Create one with `lumen-ex init DIR`, or pass --workspace DIR")

    @classmethod
    def create(cls, target: Path, catalog: Catalog) -> Workspace:
        """Copy every stub and README into a new (or empty) folder."""
        target = Path(target)
        if target.exists() and any(target.iterdir()):
            raise UsageError(f"{target} already exists and is not empty",
                             "Choose a new folder name, or empty it first")
        root = exercises_root()
        target.mkdir(parents=True, exist_ok=True)
        rows = [("README.md", "this file"), ("lumen-ex.toml", "marks this folder as a workspace (leave it here)"),
                *((line, what) for ex in catalog.exercises
                  for line, what in ((f"{ex.dir}/README.md", f"exercise {ex.number}: {ex.title}"),
                                     (ex.path, "... the file you edit"))),
                (".lumen-ex/", "your progress: best scores, hints seen (written by lumen-ex)")]
        width = max(len(line) for line, _ in rows)
        listing = "\n".join(f"{line:<{width}}  {what}" for line, what in rows)
        first = catalog.exercises[0].dir if catalog.exercises else ""
        (target / "README.md").write_text((root / "WORKSPACE.md").read_text().replace("@EXERCISES@", listing)
                                          .replace("@FIRST@", first).replace("@ORDER@", _order(catalog)))
        for ex in catalog.exercises:
            (target / ex.dir).mkdir()
            for name in (ex.file, "README.md"):   # from the exercise's own pack
                shutil.copyfile(ex.root / name, target / ex.dir / name)
        created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        (target / MARKER).write_text(
            "# This folder is a lumen-ex workspace. Run `lumen-ex check 1` anywhere inside it.\n"
            f'catalog_version = "{catalog.version}"\ncreated = "{created}"\n')
        return cls(target.resolve())

    def exercise_file(self, ex: Exercise) -> Path:
        path = self.root / ex.dir / ex.file
        if not os.path.lexists(path):   # anything else there is graded, and refused if need be (snapshot.py)
            raise UsageError(f"{ex.path} is missing from the workspace {self.root}",
                             f"Restore it from the stub: lumen-ex init a new folder and copy {ex.path}")
        return path

    # -- progress ---------------------------------------------------------------------------

    @property
    def _state_file(self) -> Path:
        return self.root / STATE_DIR / "progress.json"

    def progress(self) -> dict[str, Any]:
        try:
            data = json.loads(self._state_file.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _save(self, data: dict[str, Any]) -> None:
        write_atomically(self._state_file, json.dumps(data, indent=2))

    def record_check(self, slug: str, status: str, score: float, max_score: float,
                     failure: tuple[str | None, ...] = ()) -> None:
        """Remember a check's verdict; ``failure``: what its first failure was (its mistake id and
        its diagnosis kind, when known), which the next hint is chosen for."""
        data = self.progress()
        entry = data.setdefault("exercises", {}).setdefault(slug, {})
        entry["last_status"], entry["last_score"], entry["max_score"] = status, score, max_score
        entry["best_score"] = max(score, entry.get("best_score", 0.0))
        entry["checks"] = entry.get("checks", 0) + 1
        entry["last_checked"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        entry["last_failure"] = [str(key) for key in failure if key]
        self._save(data)

    def record_result(self, slug: str, result: RunResult) -> None:
        """:meth:`record_check` for one check's result record."""
        first = result.first_failure
        diag = first.diagnosis if first is not None else None
        failure = (diag.misconception, diag.kind) if diag is not None else ()
        self.record_check(slug, result.status.value, result.score, result.max_score, failure)

    def hints_revealed(self, slug: str) -> list[int]:
        """The hints (0-based) shown so far, in the order they were shown."""
        entry = self.progress().get("exercises", {}).get(slug, {})
        revealed = entry.get("hints_revealed")
        if isinstance(revealed, list) and all(isinstance(i, int) for i in revealed):
            return revealed
        return list(range(max(0, int(entry.get("hints_shown", 0) or 0))))   # a workspace from before

    def last_failure(self, slug: str) -> list[str]:
        """What the last check's first failure was (its mistake id, its kind); empty after a pass."""
        entry = self.progress().get("exercises", {}).get(slug, {})
        got = entry.get("last_failure") if entry.get("last_status") == "fail" else None
        return [str(k) for k in got] if isinstance(got, list) else []

    def reveal_hint(self, slug: str, index: int) -> list[int]:
        """Remember that hint ``index`` (0-based) has been shown; the hints shown so far, in order."""
        data = self.progress()
        entry = data.setdefault("exercises", {}).setdefault(slug, {})
        revealed = [i for i in self.hints_revealed(slug) if i != index] + [index]
        entry["hints_revealed"], entry["hints_shown"] = revealed, len(set(revealed))
        self._save(data)
        return revealed
