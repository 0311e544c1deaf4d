"""Learner code is never host root, and cannot open kernel interfaces for writing.

Run as root (CI is), this is the attack of a worker whose sandbox uid maps to host uid 0: root-owned
files that are owner-writable (``/proc/sys/kernel/core_pattern`` runs a program as host root on
the next crash) would stay writable even with every capability dropped. The learner's module
below tries to open each interface for writing (it never writes), reports what opened through an
exception message, and then waits inside its first call while this test reads the process's host
uid from the host's own /proc: the uid the kernel checks, not one the worker reports.

Both backends: bwrap (started as nobody when we are root, src/lumen_ex/sandbox/bwrap.py) and docker (the worker
runs as the container's unprivileged user, src/lumen_ex/sandbox/container.py).
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path

import pytest
from conftest import requires_bwrap, workspace_with
from docker_support import docker_param
from proc_support import running_with, wait_until

from lumen_ex.core.results import Status
from lumen_ex.harness.check import run_check

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the attack is about lumen-ex started as root")

BACKENDS = [pytest.param("bwrap", marks=requires_bwrap, id="bwrap"), docker_param("docker")]

# Files a worker has no use for and must not be able to open for writing. Owner-writable root
# files first (writable by a host-root uid even without capabilities), then other kernel doors.
# (A process's own /proc/self files, such as oom_score_adj, are its owner's to write: not here.)
TARGETS = [
    "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/kernel/hostname",
    "/proc/sys/kernel/randomize_va_space", "/proc/sys/vm/drop_caches", "/proc/sys/fs/suid_dumpable",
    "/proc/sys/net/ipv4/ip_forward", "/proc/sysrq-trigger", "/sys/kernel/uevent_helper", "/sys/fs/cgroup/cgroup.procs",
    "/sys/kernel/mm/transparent_hugepage/enabled", "/dev/kmsg", "/dev/mem", "/etc/passwd", "/usr/bin/python3",
    "/workspace/01-attention/attention.py",
]

ATTACK = '''
import ctypes, json, os, time
import torch

TOKEN = "@TOKEN@"
ctypes.CDLL(None).prctl(15, TOKEN.encode(), 0, 0, 0)   # PR_SET_NAME: the test finds us by name
OPENED = []
SLEPT = []
for path in @TARGETS@:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        continue
    OPENED.append(path)
    os.close(fd)

def scaled_dot_product_attention(q, k, v, mask=None):
    if not SLEPT:          # once per process: long enough for the test to read our host uid from outside
        SLEPT.append(time.sleep(4))
    raise RuntimeError("OPENED=" + json.dumps(OPENED) + " UID=" + str(os.getuid()))

def causal_mask(L_q, L_k=None, device=None):
    raise RuntimeError("OPENED=" + json.dumps(OPENED))
'''


def _host_uids(pids: list[int]) -> set[int]:
    """The real, effective, saved and file-system uids of each process, read on the host."""
    uids = set()
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("Uid:"):
                    uids.update(int(x) for x in line.split()[1:])
        except OSError:
            continue
    return uids


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.slow
def test_learner_code_is_not_host_root_and_opens_no_kernel_interface(tmp_path, backend):
    token = "uid" + secrets.token_hex(5)
    source = ATTACK.replace("@TOKEN@", token).replace("@TARGETS@", repr(TARGETS))
    root = workspace_with(tmp_path, 1, source)
    seen: dict[str, set[int]] = {"uids": set()}

    def watch():
        if wait_until(lambda: running_with(token), timeout=90, step=0.05):
            seen["uids"] = _host_uids([p.pid for p in running_with(token)])

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    result = run_check(1, workspace=root, sandbox=backend, seed=1, device="cpu", record=False,
                       select="causal_mask or 4d")
    watcher.join(timeout=120)

    assert result.status is Status.FAIL, result.message
    messages = [t.message for t in result.tests if "OPENED=" in t.message]
    assert messages, [t.message for t in result.tests]
    for message in messages:
        assert "OPENED=[]" in message, message          # not one interface opened for writing
    assert seen["uids"], "the learner's process was never seen on the host"
    assert 0 not in seen["uids"], f"learner code ran as host uid {sorted(seen['uids'])}"


@requires_bwrap
def test_bwrap_stage_leaves_nothing_mounted_or_behind(tmp_path):
    """The staged mounts live in the launch's own mount namespace: the host sees none of them,
    and the stage folder is gone when the check ends."""
    import tempfile

    mine = f"lumen-ex-stage-{os.getpid()}-*"      # this process's (another test process makes its own)
    before = set(Path(tempfile.gettempdir()).glob(mine))
    root = workspace_with(tmp_path, 1, None)
    run_check(1, workspace=root, sandbox="bwrap", seed=1, device="cpu", record=False, select="4d")
    assert "lumen-ex-stage-" not in Path("/proc/self/mountinfo").read_text()
    assert set(Path(tempfile.gettempdir()).glob(mine)) <= before
