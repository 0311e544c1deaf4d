"""A class as `lumen-ex grade` takes it: submission folders, zips, and the installed command run on them.

``grade`` runs `lumen-ex grade` (a plain function, not tests/conftest.py's ``grade`` fixture, which checks
one file); ``put`` writes a file into a student's folder, ``zip_folder`` a zip of texts; ``make_class``
lays out five students who submit every way and get every kind of outcome.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from conftest import CORPORA, CORPUS, LUMEN_EX

from lumen_ex.core import catalog
from lumen_ex.core.workspace import Workspace

CAT = catalog.load()
EX1, EX2 = CAT.find(1), CAT.find(2)
REF1, REF2 = EX1.reference_path, EX2.reference_path
SHA = "0123456789abcdef0123456789abcdef01234567"


def grade(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("FORCE_COLOR", "CLICOLOR"))}
    full.update({"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb", **(env or {})})
    return subprocess.run([LUMEN_EX, "grade", *args], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=timeout)


def put(folder: Path, rel: str, source: Path | str) -> None:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source.read_text() if isinstance(source, Path) else source)


def zip_folder(zpath: Path, files: dict[str, str]) -> None:
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in files.items():
            zf.writestr(name, text)


def make_class(root: Path) -> Path:
    """Five students: every way of submitting, and every kind of outcome."""
    subs = root / "submissions"
    subs.mkdir(parents=True)
    alice = Workspace.create(subs / "alice", CAT)                       # a workspace: both correct
    shutil.copyfile(REF1, alice.root / EX1.path)
    shutil.copyfile(REF2, alice.root / EX2.path)
    put(subs / "bob", EX1.file, CORPORA["attention"] / "buggy" / "no_scale.py")  # flat files
    put(subs / "bob", EX2.file, REF2)
    zip_folder(subs / "carol.zip", {                                     # a zip wrapped in a folder
        "carol-hw/02-kv-cache/kv_cache.py": (CORPORA["kv_cache"] / "buggy" / "gqa_repeat.py").read_text(),
        "carol-hw/notes.md": "my notes\n"})
    put(subs / "dave", EX1.path, CORPUS / "hostile" / "sys_exit.py")     # a git checkout, hostile
    put(subs / "dave", ".git/HEAD", "ref: refs/heads/main\n")
    put(subs / "dave", ".git/refs/heads/main", SHA + "\n")
    zip_folder(subs / "eve.zip", {"01-attention/attention.py": REF1.read_text(),  # a zip that escapes
                                  "../../evil.py": "print('escaped')\n"})
    (subs / "notes.txt").write_text("not a submission\n")
    return subs
