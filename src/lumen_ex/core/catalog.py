"""The exercise catalogue: one versioned TOML file (src/lumen_ex/exercises/catalog.toml), loaded into types.

Everything about an exercise that is policy rather than code lives there: its number and slug,
the file the learner edits, the graded functions, the points of each test group, time and resource
limits, forbidden APIs and hints. :func:`validate` lists every problem with a fix;
tests/unit/test_catalog.py runs it, and also checks that every stub fails and the reference passes.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from lumen_ex.core.errors import CatalogError, UnknownExercise
from lumen_ex.core.limits import Limits

FORMAT_VERSION = 1
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")   # Gradescope's four
SLUG = re.compile(r"^[a-z][a-z0-9-]*$")


@dataclass(frozen=True)
class TimeLimits:
    call_seconds: float = 10.0      # one call of a learner function
    run_seconds: float = 120.0      # the whole check
    startup_seconds: float = 60.0   # sandbox start + torch import, before the first call


@dataclass(frozen=True)
class Exercise:
    number: int
    slug: str
    title: str
    dir: str                        # the folder in the workspace, e.g. "01-attention"
    file: str                       # the file the learner edits, e.g. "attention.py"
    functions: tuple[str, ...]
    suite: str                      # the hidden suite package under lumen_ex.graders
    points: dict[str, float]        # scoring group -> points, shared by the group's tests
    times: TimeLimits
    limits: Limits
    forbidden: tuple[str, ...] = ()
    hints: tuple[str, ...] = ()
    # scoring group -> Gradescope test visibility (VISIBILITIES); groups not listed are "visible"
    visibility: dict[str, str] = field(default_factory=dict)

    @property
    def module(self) -> str:
        return Path(self.file).stem

    @property
    def path(self) -> str:
        return f"{self.dir}/{self.file}"

    @property
    def max_score(self) -> float:
        return sum(self.points.values())

    def summary(self) -> dict:
        return {"number": self.number, "slug": self.slug, "title": self.title}


@dataclass(frozen=True)
class Catalog:
    version: str
    exercises: tuple[Exercise, ...] = field(default_factory=tuple)

    def find(self, key: str | int) -> Exercise:
        """By number ("1", "01") or slug ("attention"); a clear error otherwise."""
        text = str(key).strip().lower()
        for ex in self.exercises:
            if text in (ex.slug, ex.dir) or (text.isdigit() and int(text) == ex.number):
                return ex
        known = ", ".join(f"{ex.number} ({ex.slug})" for ex in self.exercises)
        raise UnknownExercise(f"no exercise {key!r}", f"Choose one of: {known}")


def exercises_root() -> Path:
    return Path(str(resources.files("lumen_ex.exercises")))


# Another catalogue file instead of the installed one (a course's own copy, or a test's with a bumped
# version): the instructor's setting, inherited by lumen-ex's own grading processes.
CATALOG_ENV = "LUMEN_EX_CATALOG"


def load(path: Path | None = None) -> Catalog:
    path = path or Path(os.environ.get(CATALOG_ENV) or exercises_root() / "catalog.toml")
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"cannot read the exercise catalogue {path}: {exc}",
                           "Reinstall lumen-ex") from None
    if data.get("format_version") != FORMAT_VERSION:
        raise CatalogError(f"catalogue format {data.get('format_version')!r} is not {FORMAT_VERSION}",
                           "Upgrade lumen-ex")
    try:
        exercises = tuple(_exercise(entry) for entry in data.get("exercise", []))
    except (KeyError, TypeError, ValueError) as exc:
        raise CatalogError(f"the exercise catalogue is malformed: {exc!r}", "Run the catalogue test") from None
    return Catalog(str(data.get("version", "")), exercises)


def _exercise(entry: dict) -> Exercise:
    times = entry.get("limits", {})
    return Exercise(
        number=int(entry["number"]),
        slug=str(entry["slug"]),
        title=str(entry["title"]),
        dir=str(entry["dir"]),
        file=str(entry["file"]),
        functions=tuple(entry["functions"]),
        suite=str(entry["suite"]),
        points={str(k): float(v) for k, v in entry["points"].items()},
        times=TimeLimits(**{k: float(v) for k, v in times.items() if k in TimeLimits.__dataclass_fields__}),
        limits=Limits(**{k: int(v) for k, v in times.items() if k in Limits.__dataclass_fields__}),
        forbidden=tuple(entry.get("forbidden", ())),
        hints=tuple(entry.get("hints", ())),
        visibility={str(k): str(v) for k, v in entry.get("visibility", {}).items()},
    )


def validate(catalog: Catalog, root: Path | None = None) -> list[str]:
    """Every problem in the catalogue, each phrased with what to fix. Empty means valid."""
    root = root or exercises_root()
    problems: list[str] = []
    seen_numbers, seen_slugs = set(), set()
    for ex in catalog.exercises:
        where = f"exercise {ex.number} ({ex.slug})"
        if ex.number in seen_numbers:
            problems.append(f"{where}: number {ex.number} is used twice; renumber one")
        if ex.slug in seen_slugs or not SLUG.match(ex.slug):
            problems.append(f"{where}: slug must be unique and match {SLUG.pattern}")
        seen_numbers.add(ex.number)
        seen_slugs.add(ex.slug)
        if not ex.dir.startswith(f"{ex.number:02d}-"):
            problems.append(f"{where}: dir {ex.dir!r} should start with {ex.number:02d}-")
        stub = root / ex.dir / ex.file
        if not stub.is_file():
            problems.append(f"{where}: stub {ex.path} is missing; add it under exercises/")
        else:
            text = stub.read_text()
            if "TODO" not in text or "NotImplementedError" not in text:
                problems.append(f"{where}: stub {ex.path} needs TODO markers and must raise NotImplementedError")
            for fn in ex.functions:
                if not re.search(rf"^def {re.escape(fn)}\(", text, re.M):
                    problems.append(f"{where}: stub {ex.path} does not define {fn}()")
        if not (root / ex.dir / "README.md").is_file():
            problems.append(f"{where}: {ex.dir}/README.md is missing; every exercise needs a learner README")
        if not ex.functions:
            problems.append(f"{where}: list the graded functions")
        if not ex.points or any(p < 0 for p in ex.points.values()) or ex.max_score <= 0:
            problems.append(f"{where}: points must be non-negative and add up to more than 0")
        if not ex.hints or any(not h.strip() for h in ex.hints):
            problems.append(f"{where}: give at least one non-empty hint")
        if ex.times.call_seconds <= 0 or ex.times.run_seconds < ex.times.call_seconds:
            problems.append(f"{where}: limits need 0 < call_seconds <= run_seconds")
        for group, seen in ex.visibility.items():
            if group not in ex.points or seen not in VISIBILITIES:
                problems.append(f"{where}: visibility of {group!r} must name a scoring group and be one of "
                                f"{', '.join(VISIBILITIES)}")
        for name in ex.forbidden:
            if not re.match(r"^[A-Za-z_][\w.]*$", name) or "." not in name:
                problems.append(f"{where}: forbidden API {name!r} must be a dotted name like torch.nn.X")
    listed = {ex.dir for ex in catalog.exercises}
    for child in sorted(root.iterdir()):
        if child.is_dir() and re.match(r"^\d\d-", child.name) and child.name not in listed:
            problems.append(f"exercises/{child.name} is not listed in catalog.toml; add it or remove it")
    return problems
