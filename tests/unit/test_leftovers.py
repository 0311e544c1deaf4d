"""What a process killed with SIGKILL leaves of its sandboxes is removed by the next one, and only
that (src/lumen_ex/sandbox/leftovers.py): the owner's pid is in each name."""

from __future__ import annotations

import subprocess
import sys

from lumen_ex.sandbox import leftovers


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_the_folders_of_processes_that_are_gone_are_removed(tmp_path):
    dead, alive = _gone_pid(), 1
    slot_dead = tmp_path / f"{leftovers.SLOT_PREFIX}{dead}-a"
    slot_alive = tmp_path / f"{leftovers.SLOT_PREFIX}{alive}-b"
    stage_dead_empty = tmp_path / f"{leftovers.STAGE_PREFIX}{dead}-c"
    stage_dead_full = tmp_path / f"{leftovers.STAGE_PREFIX}{dead}-d"
    no_pid = tmp_path / f"{leftovers.SLOT_PREFIX}old-e"
    worker_dead = tmp_path / f"{leftovers.WORKER_PREFIX}{dead}-f"        # the unisolated mode's throwaway folders
    worker_alive = tmp_path / f"{leftovers.WORKER_PREFIX}{alive}-g"
    worker_old = tmp_path / "lumen-ex-worker-h0ld3r"                     # an older lumen-ex's: no pid in it
    kept = tmp_path / "kept"                                             # a link of that name is never followed
    link = tmp_path / f"{leftovers.WORKER_PREFIX}{dead}-link"
    for folder in (slot_dead, slot_alive, stage_dead_empty, stage_dead_full, no_pid, worker_dead, worker_alive,
                   worker_old, kept):
        (folder / "sub").mkdir(parents=True)
    (worker_dead / "sub" / "scratch.pt").write_text("what the learner's code wrote")
    (kept / "sub" / "data").write_text("not the sweep's")
    link.symlink_to(kept)
    (slot_dead / "seccomp.json").write_text("{}")             # a slot's folder holds its profile
    (stage_dead_empty / "empty").write_text("")                # mount points: empty files and folders
    (stage_dead_full / "sub" / "data").write_text("a file with something in it")
    removed = leftovers.sweep(tmp_path)
    assert sorted(removed) == sorted([slot_dead, stage_dead_empty, worker_dead])
    assert not slot_dead.exists() and not stage_dead_empty.exists() and not worker_dead.exists()
    assert slot_alive.exists() and stage_dead_full.exists() and no_pid.exists()
    assert worker_alive.exists() and worker_old.exists() and link.is_symlink() and (kept / "sub" / "data").exists()
