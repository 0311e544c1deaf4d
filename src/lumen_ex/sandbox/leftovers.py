"""What a process of lumen-ex killed with SIGKILL leaves on the host, removed by the next one.

A grading process, a check server or a watch session that is killed outright (``kill -9``, the
machine's out-of-memory killer) cannot clean up after itself. Of its sandboxes it can leave:

- the empty stage folders ``lumen-ex-stage-<pid>-*`` of the bwrap launcher under the temporary
  folder (src/lumen_ex/sandbox/bwrap.py; the mounts inside them lived in a mount namespace that died with
  the launch, so on the host they are empty folders and files);
- empty worker cgroups ``lumen-ex-<pid>-<n>`` (src/lumen_ex/sandbox/cgroups.py);
- the folders ``lumen-ex-slot-<pid>-*`` of docker slots under the temporary folder
  (src/lumen_ex/sandbox/docker_slot.py: a seccomp profile and the folder of a control socket, never a
  learner's file). The slot's container ends by itself when the process that kept it is gone;
- the throwaway folders ``lumen-ex-worker-<pid>-*`` of the unisolated mode's workers under the
  temporary folder (src/lumen_ex/sandbox/unisolated.py: the worker's working folder, HOME and TMPDIR,
  holding whatever the learner's code wrote there).

Each name carries the pid of the process that made it, and :func:`sweep` removes only those whose
process is gone (and, for a stage, only when it holds nothing but empty folders and files; a folder
that is a symbolic link is never followed or removed). It is
called when a grading run (src/lumen_ex/classroom/leftovers.py) or a check server
(src/lumen_ex/learner/check_server.py) starts; it never raises.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from lumen_ex.sandbox import cgroups as limits
from lumen_ex.sandbox import docker_slot
from lumen_ex.sandbox.unisolated import WORKER_PREFIX

STAGE_PREFIX = "lumen-ex-stage-"
SLOT_PREFIX = docker_slot.SCRATCH_PREFIX


def owner_gone(name: str, prefix: str) -> bool:
    """Whether the process named in ``name`` (``<prefix><pid>-...``) no longer exists. A name
    without a pid (made by an older lumen-ex) is never taken for gone: its owner is unknown."""
    m = re.match(rf"^{re.escape(prefix)}(\d+)-", name)
    if m is None:
        return False
    pid = int(m.group(1))
    return pid != os.getpid() and not Path(f"/proc/{pid}").exists()


def _only_empty_entries(folder: Path) -> bool:
    """The folder holds only empty files and empty folders (what a dead bwrap stage leaves)."""
    try:
        for entry in os.scandir(folder):
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                if any(os.scandir(entry.path)):
                    return False
            elif not stat.S_ISREG(st.st_mode) or st.st_size:
                return False
    except OSError:
        return False
    return True


def sweep_stages(tmp: Path | None = None) -> list[Path]:
    """Remove bwrap stages (when empty), docker slots' folders and unisolated workers' throwaway
    folders under the temporary folder whose launcher is gone."""
    removed: list[Path] = []
    root = Path(tmp or tempfile.gettempdir())
    try:
        candidates = [(p, prefix) for prefix in (STAGE_PREFIX, SLOT_PREFIX, WORKER_PREFIX) for p in root.glob(f"{prefix}*")
                      if p.is_dir() and not p.is_symlink()]
    except OSError:
        return removed
    for folder, prefix in candidates:
        if owner_gone(folder.name, prefix) and (prefix != STAGE_PREFIX or _only_empty_entries(folder)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def sweep_cgroups() -> None:
    """Remove the empty worker cgroups of processes that are gone (src/lumen_ex/sandbox/cgroups.py)."""
    try:
        for controller in ("", "pids", "memory"):
            parent = limits._parent(controller)      # noqa: SLF001  where workers' cgroups are made
            if parent.is_dir():
                limits._sweep_stale(parent)          # noqa: SLF001
    except Exception:  # noqa: BLE001  nothing to sweep where there are no cgroups of ours
        pass


def sweep(tmp: Path | None = None) -> list[Path]:
    """Everything above; the folders removed."""
    removed = sweep_stages(tmp)
    sweep_cgroups()
    return removed
