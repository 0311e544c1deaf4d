"""What ``lumen-ex dev check`` reports (src/lumen_ex/authoring/devcheck.py): its problems, the
verdict of every grading and what of a verdict must not depend on the seed, the faults of an
exercise's own code, and the report as JSON (``--format json``)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from lumen_ex.core.catalog import Exercise
from lumen_ex.core.packs import Pack
from lumen_ex.core.results import RunResult, Status


@dataclass
class Problem:
    where: str                # "01-attention", "01-attention/corpus/buggy/no_scale.py", a pack
    what: str


@dataclass
class Report:
    packs: list[Pack]
    exercises: list[Exercise]
    seeds: tuple[int, ...]
    close_seeds: tuple[int, ...] = ()
    problems: list[Problem] = field(default_factory=list)
    named: dict[str, set[str]] = field(default_factory=dict)   # exercise dir -> mistakes demonstrated
    graded: int = 0
    files: list[dict] = field(default_factory=list)    # one per grading: dir, where, what, seed, outcome, ok, got
    # faults of the exercise's own code (its suite, reference, mistakes), each reported once:
    # (exercise dir, file, line, error) -> {"spoiled": the gradings it spoiled, "frames": the author's traceback}
    faults: dict[tuple, dict] = field(default_factory=dict)

    @property
    def verdicts(self) -> Counter:
        """(exercise dir, what, outcome) -> how many gradings had it."""
        return Counter((f["dir"], f["what"], f["outcome"]) for f in self.files)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, where: str, what: str) -> None:
        self.problems.append(Problem(where, what))

    def to_dict(self) -> dict:
        return {"ok": self.ok, "seeds": list(self.seeds), "close_seeds": list(self.close_seeds), "graded": self.graded,
                "packs": [{"name": p.name, "version": p.version, "root": str(p.root)} for p in self.packs],
                "exercises": [{"number": ex.number, "slug": ex.slug, "dir": ex.dir,
                               "corpus": {f"{what}:{outcome}": n for (d, what, outcome), n
                                          in sorted(self.verdicts.items()) if d == ex.dir},
                               "mistakes_named": sorted(self.named.get(ex.dir, ()))} for ex in self.exercises],
                "files": self.files,
                "faults": [{"exercise": d, "file": f, "line": n, "error": e, **v}
                           for (d, f, n, e), v in self.faults.items()],
                "problems": [{"where": p.where, "what": p.what} for p in self.problems]}


def verdict(result: RunResult) -> dict:
    """What must not depend on the seed: the status, the score, each test's status, the first
    failure's test, kind and named mistake (what a corpus header declares), and the notes on passing
    tests. The diagnoses of later failing tests are not compared: a later test may name a mistake
    on some inputs only (a near-tie of a bfloat16 variant), which the first failure never does."""
    first = result.first_failure
    return {"status": result.status.value, "score": round(result.score, 6),
            "tests": [[t.id, t.status.value] for t in result.tests],
            "first": [first.id, first.diagnosis.kind, first.diagnosis.misconception]
            if first is not None and first.diagnosis is not None else None,
            "notes": {t.id: t.message for t in result.tests if t.status is Status.PASS and t.message}}


def verdict_differences(a: dict, b: dict) -> list[str]:
    """What differs between two :func:`verdict` s, field by field (per test for tests and notes)."""
    out = []
    for key in ("status", "score", "tests", "first", "notes"):
        x, y = a.get(key), b.get(key)
        if x == y:
            continue
        if key == "tests" and isinstance(x, list) and isinstance(y, list):
            parts = [f"{p[0]}: {p[1]} -> {q[1]}" for p, q in zip(x, y) if p != q] or [f"{len(x)} -> {len(y)} tests"]
        elif key == "notes" and isinstance(x, dict) and isinstance(y, dict):
            parts = [f"{t}: {x.get(t)!r} -> {y.get(t)!r}" for t in sorted(set(x) | set(y)) if x.get(t) != y.get(t)]
        else:
            parts = [f"{x} -> {y}"]
        out.append(f"{key} " + "; ".join(parts))
    return out


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=1)
