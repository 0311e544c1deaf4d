"""What a ``lumen-ex grade`` killed with SIGKILL leaves behind, removed by the next run.

A ``lumen-ex grade`` that is killed outright (``kill -9``, the machine's out-of-memory killer)
cannot clean up after itself. It can leave its scratch folder ``DIR/.scratch-<pid>-*``
(src/lumen_ex/classroom/planning.py), holding copies of the students' code, and what its sandboxes
leave on the host (bwrap stages, worker cgroups, docker slots' folders: src/lumen_ex/sandbox/leftovers.py).

Each name carries the pid of the process that made it, and :func:`sweep` removes only those whose
process is gone. Called when a grading run starts; it never raises.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lumen_ex.sandbox import leftovers as sandbox_leftovers

SCRATCH_PREFIX = ".scratch-"


def scratch_prefix() -> str:
    """The prefix of this process's scratch folder in DIR (it names the owner's pid)."""
    return f"{SCRATCH_PREFIX}{os.getpid()}-"


def sweep_scratch(out: Path) -> list[Path]:
    """Remove the scratch folders in ``out`` whose ``lumen-ex grade`` is gone; the ones removed."""
    removed: list[Path] = []
    try:
        candidates = [p for p in Path(out).glob(f"{SCRATCH_PREFIX}*") if p.is_dir() and not p.is_symlink()]
    except OSError:
        return removed
    for folder in candidates:
        if sandbox_leftovers.owner_gone(folder.name, SCRATCH_PREFIX):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def sweep(out: Path) -> list[Path]:
    """Everything above; the folders removed."""
    return sweep_scratch(out) + sandbox_leftovers.sweep()
