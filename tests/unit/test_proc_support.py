"""The process-table helper the "nothing left behind" tests rely on (tests/proc_support.py) tells a
running process from a zombie, from one gone since, and from a reused pid: a mistake there once
failed CI by calling a process that had died before the snapshot "left behind"."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys

from proc_support import descendants, read, running_with, still_running, still_running_after, wait_until


def test_a_child_is_seen_running_then_not_as_a_zombie_nor_once_reaped():
    marker = f"lumen-proc-{os.urandom(6).hex()}"
    child = subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(60)", marker])
    try:
        assert wait_until(lambda: running_with(marker), 10)
        seen = descendants(os.getpid())
        assert child.pid in seen and seen[child.pid].running and marker.encode() in seen[child.pid].cmdline
        assert child.pid in [p.pid for p in still_running(seen.values())]   # (this process may have others)
        assert [p.pid for p in still_running([seen[child.pid]])] == [child.pid]
        os.kill(child.pid, signal.SIGKILL)
        assert wait_until(lambda: read(child.pid) is not None and read(child.pid).state == "Z", 10)
        assert still_running([seen[child.pid]]) == [] and running_with(marker) == []   # a zombie is not running
        zombie = read(child.pid)
        child.wait()
        assert read(child.pid) is None
        assert still_running_after([seen[child.pid]], timeout=1) == []
        assert still_running([zombie]) == []        # seen dead, gone since: never "still running"
    finally:
        child.kill()
        child.wait()


def test_a_reused_pid_is_not_the_process_seen_before():
    me = read(os.getpid())
    assert me is not None and still_running([me]) == [me]
    assert still_running([dataclasses.replace(me, start=me.start - 1)]) == []
