"""Exercise packs: a folder of exercise folders with a version, and where lumen-ex looks for them.

    PACK/pack.toml                  format_version, name, title, version, exercises = [folder, ...]
    PACK/01-attention/exercise.toml the exercise's manifest (number, slug, title, file, functions, ...)
    PACK/01-attention/README.md     the learner's README        PACK/01-attention/attention.py  the stub
    PACK/01-attention/reference.py  the reference solution      PACK/01-attention/mistakes.py   known mistakes
    PACK/01-attention/suite/        the hidden pytest suite     PACK/01-attention/corpus/       correct/, buggy/

The built-in pack is src/lumen_ex/exercises. More packs come from ``--exercises DIR`` (the CLI puts
them in front of ``LUMEN_EX_PATH``), from ``LUMEN_EX_PATH`` (folders separated by ``os.pathsep``), and
from lumen_ex/packs/<name> (where the grader image installs the packs it was built with), in that
order, then the built-in pack. A pack with the same ``name`` as one found before it is left
out, so a course's edited copy of the built-in pack (named ``lumen-ex``) replaces it. Exercise
numbers and slugs must be unique across the packs that remain (core/catalog.py says so, naming both).
docs/authoring.md is the author's guide; ``lumen-ex dev check`` validates a pack.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from lumen_ex.core.errors import CatalogError

FORMAT_VERSION = 1
PATH_ENV = "LUMEN_EX_PATH"
PACK_FILE = "pack.toml"
EXERCISE_FILE = "exercise.toml"
MANIFEST_BYTES = 256 * 1024          # pack.toml and exercise.toml are small; anything larger is a mistake
PARSED_MANIFESTS = 256              # manifests whose parse is remembered (by their bytes): 256 x 256 KiB at most
BUILTIN_NAME = "lumen-ex"           # the built-in pack's name: a pack of that name on the path replaces it
PACK_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")   # it names a folder in the grader image


@dataclass(frozen=True)
class Pack:
    """One pack: its folder, its name and version, and its exercise folders (in pack.toml's order)."""

    root: Path
    name: str
    title: str
    version: str
    folders: tuple[str, ...]
    builtin: bool = False
    # dotted API -> its [forbidden_api."..."] table: what it is built on (src/lumen_ex/core/forbidden.py)
    forbidden_apis: dict[str, Any] = field(default_factory=dict, compare=False)
    # which exercises `lumen-ex init` puts in a workspace ("own": this pack's; others by slug or number);
    # empty: every exercise in use (core/catalog.py for_workspace)
    workspace: tuple[str, ...] = field(default=(), compare=False)

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"


def builtin_root() -> Path:
    return Path(str(resources.files("lumen_ex.exercises")))


def installed_root() -> Path:
    """lumen_ex/packs: the packs the grader image was built with (absent in a checkout)."""
    return builtin_root().parent / "packs"


def search_path(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The pack folders named by LUMEN_EX_PATH, in order (empty entries ignored)."""
    value = (os.environ if environ is None else environ).get(PATH_ENV, "")
    return [Path(part).expanduser() for part in value.split(os.pathsep) if part.strip()]


def add_to_path(folders: Iterable[str | os.PathLike[str]]) -> None:
    """Put ``folders`` (``--exercises DIR``) in front of LUMEN_EX_PATH, for this process and every
    lumen-ex process it starts (they inherit the environment, core/trusted.py)."""
    new = [str(Path(f).expanduser().resolve()) for f in folders]
    old = [str(p) for p in search_path()]
    os.environ[PATH_ENV] = os.pathsep.join(dict.fromkeys([*new, *old]))


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """A manifest, read with a size cap; a CatalogError that names the file otherwise."""
    return copy.deepcopy(parse_toml(read_raw(path, what), path, what))


def read_raw(path: Path, what: str) -> bytes:
    """A manifest's bytes, read with a size cap; a CatalogError that names the file otherwise."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise CatalogError(f"{path} is missing", f"Add the {what} (docs/authoring.md)") from None
    except OSError as exc:
        raise CatalogError(f"cannot read the {what} {path}: {exc}", f"Fix {path.name}") from None
    if len(raw) > MANIFEST_BYTES:
        raise CatalogError(f"{path} is over {MANIFEST_BYTES // 1024} KiB", f"Shorten the {what}")
    return raw


def parse_toml(raw: bytes, path: Path, what: str) -> dict[str, Any]:
    """``raw`` parsed, shared with every other reader of the same bytes: read it, never change it
    (:func:`read_toml` gives a copy of one's own)."""
    try:
        return _parsed(raw)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"cannot read the {what} {path}: {exc}", f"Fix {path.name}") from None


@functools.lru_cache(maxsize=PARSED_MANIFESTS)
def _parsed(raw: bytes) -> dict[str, Any]:
    """A manifest's bytes, parsed: remembered by those bytes (by content, never by path or date), since
    the catalogue is read about twice per check and parsing its manifests was a third of a warm
    grading process's own CPU time."""
    return tomllib.loads(raw.decode("utf-8"))


def read_pack(root: Path, *, builtin: bool = False) -> Pack:
    root = Path(root)
    if not root.is_dir():
        raise CatalogError(f"exercise pack {root} is not a folder",
                           f"Fix {PATH_ENV} or --exercises, or create one with `lumen-ex dev new {root}`")
    data = read_toml(root / PACK_FILE, "pack manifest")
    if data.get("format_version") != FORMAT_VERSION:
        raise CatalogError(f"{root / PACK_FILE}: format_version {data.get('format_version')!r} is not "
                           f"{FORMAT_VERSION}", "Upgrade lumen-ex, or fix the pack")
    folders = data.get("exercises", [])
    name, version = data.get("name"), data.get("version")
    if not (isinstance(name, str) and PACK_NAME.fullmatch(name) and isinstance(version, str) and version
            and isinstance(folders, list) and all(isinstance(f, str) for f in folders)):
        raise CatalogError(f"{root / PACK_FILE}: needs a name ({PACK_NAME.pattern}), a version (a string) "
                           "and exercises (folder names)",
                           "See docs/authoring.md")
    apis = data.get("forbidden_api", {})
    if not isinstance(apis, dict):
        raise CatalogError(f"{root / PACK_FILE}: forbidden_api must be a table of tables", "See docs/authoring.md")
    workspace = data.get("workspace", [])
    if not (isinstance(workspace, list) and all(isinstance(w, (str, int)) for w in workspace)):
        raise CatalogError(f"{root / PACK_FILE}: workspace must be a list of \"own\" and exercise slugs or numbers",
                           'For example workspace = ["own", "attention"]')
    return Pack(root.resolve(), name, str(data.get("title", name)), version, tuple(folders), builtin, apis,
                tuple(str(w) for w in workspace))


def discover(environ: Mapping[str, str] | None = None) -> list[Pack]:
    """The packs lumen-ex grades with, in order: LUMEN_EX_PATH's, then the built-in one; a pack whose
    name was already taken is left out (a course's copy of the built-in pack replaces it)."""
    packs: list[Pack] = []
    for root in search_path(environ):
        packs.append(read_pack(root))
    installed = installed_root()
    if installed.is_dir():
        packs += [read_pack(root) for root in sorted(installed.iterdir()) if (root / PACK_FILE).is_file()]
    packs.append(read_pack(builtin_root(), builtin=True))
    kept: dict[str, Pack] = {}
    for pack in packs:
        kept.setdefault(pack.name, pack)
    return list(kept.values())


def extra_packs(environ: Mapping[str, str] | None = None) -> list[Pack]:
    """The packs in use other than the built-in one and those installed in lumen_ex/packs: what
    ``lumen-ex image build`` puts into the grader image."""
    installed = installed_root()
    return [p for p in discover(environ) if not p.builtin and not p.root.is_relative_to(installed)]


def pack_roots(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Every pack folder in use, for the sandbox to hide (hidden suites, references, corpora)."""
    try:
        return [p.root for p in discover(environ)]
    except CatalogError:
        return [Path(p).resolve() for p in search_path(environ) if Path(p).is_dir()] + [builtin_root()]
