"""The exercise catalogue: every exercise of every pack in use, loaded into types (core/packs.py finds them).

Everything about an exercise that is policy rather than code lives in its folder's exercise.toml:
its number and slug, the file the learner edits, the graded functions, the points of each test group,
time and resource limits, forbidden APIs, hints and Gradescope visibility. :func:`validate` lists every
problem with a fix; ``lumen-ex dev check`` runs it and then grades the stub, the reference and the corpus.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lumen_ex.core import forbidden as forbidden_apis
from lumen_ex.core.errors import CatalogError, UnknownExercise
from lumen_ex.core.forbidden import ForbiddenAPI
from lumen_ex.core.limits import Limits
from lumen_ex.core.packs import (
    BUILTIN_NAME,
    EXERCISE_FILE,
    Pack,
    builtin_root,
    discover,
    parse_toml,
    read_pack,
    read_raw,
)

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
    dir: str                        # its folder in the pack and in the workspace, e.g. "01-attention"
    file: str                       # the file the learner edits, e.g. "attention.py"
    functions: tuple[str, ...]
    points: dict[str, float]        # scoring group -> points, shared by the group's tests
    times: TimeLimits
    limits: Limits
    forbidden: tuple[ForbiddenAPI, ...] = ()   # what the learner must write themselves (core/forbidden.py)
    # False: the learner's code runs with autograd off, and every way to turn it on is refused
    # (src/lumen_ex/sandbox/inside/forbid.py autograd_off), for an exercise that asks for a gradient by hand
    autograd: bool = True
    # "triton": the learner's file holds Triton kernels (exercise 14): only imports of triton and math,
    # constants and @triton.jit functions (src/lumen_ex/harness/kernel_scan.py); the grader launches
    # them itself, in Triton's interpreter on the CPU (src/lumen_ex/harness/kernels.py)
    kernel: str | None = None
    hints: tuple[str, ...] = ()
    # a first failure's mistake id or diagnosis kind -> the hint (0-based) that answers it: `lumen-ex
    # hint` shows that one first after such a check ([hint_for] in exercise.toml, numbered from 1)
    hint_for: dict[str, int] = field(default_factory=dict)
    # scoring group -> Gradescope test visibility (VISIBILITIES); groups not listed are "visible"
    visibility: dict[str, str] = field(default_factory=dict)
    builds_on: tuple[int, ...] = ()  # the earlier exercises whose code or ideas it reuses (the workspace README says so)
    root: Path = field(default_factory=Path, compare=False)   # its folder: PACK/<dir>
    pack: str = "lumen-ex"                                      # the pack's name@version
    builtin: bool = True

    @property
    def suite(self) -> str:
        """The exercise's identifier in code: its slug with underscores (kv-cache -> kv_cache)."""
        return self.slug.replace("-", "_")

    @property
    def suite_dir(self) -> Path:
        """The hidden pytest suite (found, never imported by the harness: pytest collects it)."""
        return self.root / "suite"

    @property
    def stub_path(self) -> Path:
        return self.root / self.file

    @property
    def reference_path(self) -> Path:
        return self.root / "reference.py"

    @property
    def mistakes_path(self) -> Path:
        return self.root / "mistakes.py"

    @property
    def corpus_dir(self) -> Path:
        return self.root / "corpus"

    @property
    def module(self) -> str:
        return Path(self.file).stem

    @property
    def path(self) -> str:
        return f"{self.dir}/{self.file}"

    @property
    def max_score(self) -> float:
        return sum(self.points.values())

    def missing(self) -> str | None:
        """What this machine lacks to grade the exercise, as the one line that says how to add it
        (a kernel exercise needs its language's package: ``pip install 'lumen-ex[triton]'``); None: nothing."""
        import importlib.util

        if self.kernel and importlib.util.find_spec(self.kernel) is None:
            # Said where the check runs: a learner's venv, or a grader image built where the package
            # was not installed (src/lumen_ex/image/tag.py kernel_packages); one sentence fits both.
            return (f"{self.kernel.capitalize()} is not installed where exercise {self.number} is graded: "
                    f"add it with pip install 'lumen-ex[{self.kernel}]' (the exercise's README.md), or in a grader "
                    f"image, build the image where it is installed (docs/docker.md)")
        return None

    def summary(self) -> dict[str, Any]:
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


def for_workspace(cat: Catalog, packs: list[Pack]) -> Catalog:
    """The exercises a new workspace holds: those the packs in use name in pack.toml's ``workspace``
    ("own" for the pack's own, any other exercise by slug or number), in catalogue order; every
    exercise when no pack names any."""
    naming = [p for p in packs if p.workspace]
    if not naming:
        return cat
    wanted: set[int] = set()
    for pack in naming:
        for item in pack.workspace:
            if item == "own":
                wanted |= {ex.number for ex in cat.exercises if ex.root.parent == pack.root}
                continue
            try:
                wanted.add(cat.find(item).number)
            except UnknownExercise:
                raise CatalogError(f"{pack.root / 'pack.toml'}: workspace names {item!r}, which is no exercise in use",
                                   'Name "own" or an exercise by slug or number (lumen-ex list)') from None
    return Catalog(cat.version, tuple(ex for ex in cat.exercises if ex.number in wanted))


def exercises_root() -> Path:
    """The built-in pack's folder (WORKSPACE.md, and one folder per built-in exercise)."""
    return builtin_root()


def load(environ: Mapping[str, str] | None = None) -> Catalog:
    """Every exercise of the packs in use (core/packs.py: LUMEN_EX_PATH, then the built-in pack),
    sorted by number; numbers and slugs must be unique across them."""
    return from_packs(discover(environ))


def from_packs(packs: list[Pack]) -> Catalog:
    exercises = sorted((ex for pack in packs for ex in pack_exercises(pack)), key=lambda ex: ex.number)
    seen: dict[int | str, Exercise] = {}
    for ex in exercises:
        for key in (ex.number, ex.slug):
            if key in seen:
                other = seen[key]
                raise CatalogError(f"exercise {ex.number} ({ex.slug}) of pack {ex.pack} and exercise "
                                   f"{other.number} ({other.slug}) of pack {other.pack} share {key!r}",
                                   "Renumber or rename one of them in its exercise.toml")
            seen[key] = ex
    # The built-in pack (or a course's copy of it, which takes its name) by its version alone, as
    # results have always recorded it; every other pack as name@version.
    main = [p for p in packs if p.name == BUILTIN_NAME]
    version = "+".join([*(p.version for p in main), *(p.label for p in packs if p.name != BUILTIN_NAME)])
    return Catalog(version, tuple(exercises))


def _flag(entry: dict[str, Any], key: str, default: bool) -> bool:
    value = entry.get(key, default)
    if type(value) is not bool:
        raise ValueError(f"{key} must be true or false, not {value!r}")
    return value


KERNEL_LANGUAGES = ("triton",)


def _kernel(entry: dict[str, Any]) -> str | None:
    value = entry.get("kernel")
    if value is not None and value not in KERNEL_LANGUAGES:
        raise ValueError(f"kernel must be one of {', '.join(KERNEL_LANGUAGES)}, not {value!r}")
    return value


def load_pack(root: Path) -> Catalog:
    """One pack on its own (``lumen-ex dev check PACK``)."""
    return from_packs([read_pack(root, builtin=Path(root).resolve() == builtin_root().resolve())])


# Exercises already built, by everything they are built from: the pack (its fields and its forbidden
# APIs), the folder and the manifest's bytes. The catalogue is read several times per check (a
# grading process reads it for every submission), and building its exercises again from the same
# bytes was most of that time. Bounded: cleared when full.
_BUILT: dict[tuple[Pack, str, str, bytes], Exercise] = {}
BUILT_EXERCISES = 512


def pack_exercises(pack: Pack) -> list[Exercise]:
    out = []
    apis = json.dumps(pack.forbidden_apis, sort_keys=True, default=repr)
    for folder in pack.folders:
        path = pack.root / folder / EXERCISE_FILE
        raw = read_raw(path, "exercise manifest")
        key = (pack, apis, folder, raw)
        ex = _BUILT.get(key)
        if ex is None:
            try:
                ex = _exercise(parse_toml(raw, path, "exercise manifest"), folder, pack)
            except (KeyError, TypeError, ValueError) as exc:
                raise CatalogError(f"{path} is malformed: {exc!r}", "See docs/authoring.md") from None
            if len(_BUILT) >= BUILT_EXERCISES:
                _BUILT.clear()
            _BUILT[key] = ex
        out.append(ex)
    return out


def _exercise(entry: dict[str, Any], folder: str, pack: Pack) -> Exercise:
    times = entry.get("limits", {})
    return Exercise(
        number=int(entry["number"]),
        slug=str(entry["slug"]),
        title=str(entry["title"]),
        dir=folder,
        file=str(entry["file"]),
        functions=tuple(str(f) for f in entry["functions"]),
        points={str(k): float(v) for k, v in entry["points"].items()},
        times=TimeLimits(**{k: float(v) for k, v in times.items() if k in TimeLimits.__dataclass_fields__}),
        limits=Limits(**{k: int(v) for k, v in times.items() if k in Limits.__dataclass_fields__}),
        forbidden=forbidden_apis.read(entry.get("forbidden", ()), entry.get("forbidden_api", {}),
                                      pack.forbidden_apis),
        autograd=_flag(entry, "autograd", True),
        kernel=_kernel(entry),
        hints=tuple(entry.get("hints", ())),
        hint_for={str(k): int(v) - 1 for k, v in entry.get("hint_for", {}).items()},
        visibility={str(k): str(v) for k, v in entry.get("visibility", {}).items()},
        builds_on=tuple(int(n) for n in entry.get("builds_on", ())),
        root=pack.root / folder,
        pack=pack.label,
        builtin=pack.builtin,
    )


def validate(catalog: Catalog) -> list[str]:
    """Every problem in the catalogue's manifests and files, each phrased with what to fix. Empty
    means valid. (``lumen-ex dev check`` also grades the stub, the reference and the corpus.)"""
    problems: list[str] = []
    for ex in catalog.exercises:
        where = f"exercise {ex.number} ({ex.slug}, {ex.root})"
        if not SLUG.fullmatch(ex.slug):
            problems.append(f"{where}: slug must match {SLUG.pattern}")
        if not ex.dir.startswith(f"{ex.number:02d}-"):
            problems.append(f"{where}: folder {ex.dir!r} should start with {ex.number:02d}-")
        if not re.fullmatch(r"[A-Za-z_]\w*\.py", ex.file) or ex.file in RESERVED_FILES:
            problems.append(f"{where}: file {ex.file!r} must be a module name ending in .py, not "
                            f"{' or '.join(sorted(RESERVED_FILES))}")
        problems += [f"{where}: {p}" for p in _stub_problems(ex)]
        for name, why in (("README.md", "every exercise needs a learner README"),
                          ("reference.py", "the reference solution the suite grades against"),
                          ("mistakes.py", "the known mistakes (CATALOGUE), docs/authoring.md")):
            if not (ex.root / name).is_file():
                problems.append(f"{where}: {name} is missing: {why}")
        if not sorted(ex.suite_dir.glob("test_*.py")):
            problems.append(f"{where}: suite/ holds no test_*.py: write the hidden suite there")
        if not ex.functions:
            problems.append(f"{where}: list the graded functions")
        if not ex.points or any(p < 0 for p in ex.points.values()) or ex.max_score <= 0:
            problems.append(f"{where}: points must be non-negative and add up to more than 0")
        if not ex.hints or any(not h.strip() for h in ex.hints):
            problems.append(f"{where}: give at least one non-empty hint")
        for key, index in ex.hint_for.items():
            if not 0 <= index < len(ex.hints):
                problems.append(f"{where}: [hint_for] {key!r} = {index + 1} names no hint: number the hints "
                                f"from 1 to {len(ex.hints)}")
        if ex.times.call_seconds <= 0 or ex.times.run_seconds < ex.times.call_seconds:
            problems.append(f"{where}: limits need 0 < call_seconds <= run_seconds")
        for group, seen in ex.visibility.items():
            if group not in ex.points or seen not in VISIBILITIES:
                problems.append(f"{where}: visibility of {group!r} must name a scoring group and be one of "
                                f"{', '.join(VISIBILITIES)}")
        for earlier in ex.builds_on:     # (checked by number: `-e N` may leave the earlier one out)
            if not 1 <= earlier < ex.number:
                problems.append(f"{where}: builds_on = {earlier} names no earlier exercise: give numbers "
                                f"from 1 to {ex.number - 1}")
        for api in ex.forbidden:
            problems += [f"{where}: {p}" for p in forbidden_apis.problems(api)]
        problems += [f"{where}: {p}" for p in unlisted_files(ex)]
    return problems


# Names an exercise's own files take: the learner's file may not be one of them.
RESERVED_FILES = frozenset({"reference.py", "mistakes.py"})
IGNORED = frozenset({"__pycache__", ".pytest_cache", ".DS_Store"})


def _stub_problems(ex: Exercise) -> list[str]:
    if not ex.stub_path.is_file():
        return [f"the stub {ex.file} is missing: add the file learners start from"]
    text = ex.stub_path.read_text(errors="replace")
    problems = []
    if "TODO" not in text or "NotImplementedError" not in text:
        problems.append(f"the stub {ex.file} needs TODO markers and must raise NotImplementedError")
    for fn in ex.functions:     # a graded function, or a graded class (exercise 7's nn.Module)
        if not re.search(rf"^(def {re.escape(fn)}\(|class {re.escape(fn)}\b)", text, re.M):
            problems.append(f"the stub {ex.file} does not define {fn}()")
    return problems


def unlisted_files(ex: Exercise) -> list[str]:
    """Files in the exercise folder that no part of lumen-ex reads: a forgotten file is a problem,
    not silently shipped into the grader image (docs/authoring.md lists what belongs)."""
    top = {EXERCISE_FILE, "README.md", ex.file, "reference.py", "mistakes.py"}
    problems = []
    for path in sorted(ex.root.rglob("*")):
        rel = path.relative_to(ex.root)
        if IGNORED & set(rel.parts) or path.is_dir():
            continue
        parts = rel.parts
        ok = ((len(parts) == 1 and parts[0] in top)
              or (len(parts) == 2 and parts[0] == "suite" and path.suffix == ".py")
              or (len(parts) == 2 and parts[0] == "data")          # what the reference and suite read
              or (len(parts) == 3 and parts[:2] in (("corpus", "correct"), ("corpus", "buggy"))
                  and path.suffix == ".py"))
        if not ok:
            problems.append(f"{rel} is not part of an exercise (see docs/authoring.md): remove it or move it")
    return problems


def unlisted_folders(pack: Pack) -> list[str]:
    """Entries of the pack folder that pack.toml does not list. (``__init__.py`` is the built-in
    pack's package marker, and so is found in every course's copy of it: never read, always allowed.)"""
    allowed = {"pack.toml", "WORKSPACE.md", "README.md", "__init__.py", *pack.folders}
    return [f"{pack.root.name}/{child.name} is not listed in pack.toml: list it under exercises or remove it"
            for child in sorted(pack.root.iterdir()) if child.name not in allowed | IGNORED]
