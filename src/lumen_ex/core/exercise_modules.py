"""The Python files of an exercise folder (reference.py, mistakes.py, a suite's helpers), imported by path.

Exercise folders are data, not packages: their names (``01-attention``) are not importable, and two
packs may both have a ``reference.py``. So each file is imported under a name made from its folder's
real path (``_lumen_ex_exercise_<digest>_reference``), once per process, and kept in sys.modules like
any module (dataclasses and tracebacks need that). Only trusted code runs here: pack files are the
instructor's, and learner files are never loaded this way (the worker imports them in the sandbox).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
import threading
from pathlib import Path
from types import ModuleType

from lumen_ex.core.errors import CatalogError

MANIFEST = "exercise.toml"
_lock = threading.RLock()


def module_name(folder: Path, name: str) -> str:
    digest = hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:12]
    return f"_lumen_ex_exercise_{digest}_{name}"


def keep_packs_unwritten() -> None:
    """Nothing is ever written into a pack (an instructor's repository, or the installed package):
    the grading process writes no bytecode, neither for the pack's modules it imports nor for the
    suites pytest rewrites. Reading bytecode that is already there is unaffected."""
    sys.dont_write_bytecode = True


def load(folder: Path, name: str) -> ModuleType:
    """``folder/<name>.py`` as a module (imported once per process)."""
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise ValueError(f"not a module name: {name!r}")
    path = Path(folder).resolve() / f"{name}.py"
    key = module_name(path.parent, name)
    with _lock:
        if key in sys.modules:
            return sys.modules[key]
        keep_packs_unwritten()
        spec = importlib.util.spec_from_file_location(key, path)
        if spec is None or spec.loader is None or not path.is_file():
            raise CatalogError(f"{path} is missing", "Add it to the exercise folder (docs/authoring.md)")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(key, None)
            raise
        return module


def exercise_folder(file: str | Path) -> Path:
    """The exercise folder a file belongs to: the nearest folder at or above it with an exercise.toml."""
    here = Path(file).resolve()
    for folder in (here if here.is_dir() else here.parent, *here.parents):
        if (folder / MANIFEST).is_file():
            return folder
    raise CatalogError(f"{file} is not inside an exercise folder (no {MANIFEST} above it)",
                       "Keep suites and helpers inside their exercise's folder")


def sibling(file: str | Path, name: str) -> ModuleType:
    """Module ``name`` of the exercise that ``file`` belongs to, e.g. ``sibling(__file__, "reference")``
    from a hidden suite; ``sibling(__file__, "suite/cases")`` for a helper module of the suite.

    Example (exercise 6's suite and its suite/cases.py)::

        cases = sibling(__file__, "suite/cases")
        case = cases.paged_case(seed)                # a function of the helper module"""
    folder = exercise_folder(file)
    sub, _, stem = name.rpartition("/")
    return load(folder / sub if sub else folder, stem)
