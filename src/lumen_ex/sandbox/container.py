"""Inside the grading container: start the worker as its own unprivileged user.

The docker backend runs the whole check inside the grader image (src/lumen_ex/image/grader.Dockerfile). There the
harness runs as the container's root, stripped by docker of every capability except SETUID and
SETGID (to become the worker's user) and KILL (to kill it). This launcher starts each worker the
way the host launchers do (same pipes, same rlimits from src/lumen_ex/sandbox/cgroups.py), but between fork and
exec it drops every group, becomes ``lumen-worker`` and asks the kernel to kill the worker first
when the container runs out of memory. That user cannot read the hidden suites, the reference or
the results directory (the image sets their permissions), cannot signal or trace the harness, and
is held to ``processes`` processes by RLIMIT_NPROC, which works for a non-root uid. The container's
own limits (memory, pids, CPU, no network, read-only root) hold the harness and worker together.
"""

from __future__ import annotations

import os
import pwd
import resource
import signal
import time
from dataclasses import dataclass

from lumen_ex.sandbox.base import (
    Availability,
    Command,
    Launcher,
    WorkerSpec,
    inside_dir,
    python_runtime,
    worker_argv,
)
from lumen_ex.sandbox.cgroups import Enforcement
from lumen_ex.sandbox.processes import signal_process

WORKER_USER = "lumen-worker"


@dataclass
class WorkerUserEnforcement(Enforcement):
    """The rlimits of src/lumen_ex/sandbox/cgroups.py, then a drop to the worker's uid (no cgroup in a container)."""

    uid: int = -1
    gid: int = -1

    @property
    def nproc_rlimit(self) -> bool:
        return False   # set in preexec below, counted for the worker's uid rather than ours

    def describe(self) -> dict[str, str]:
        described = super().describe()
        described["processes"] = f"rlimit nproc for uid {self.uid} ({self.limits.processes}) + container pids limit"
        if not self.as_rlimit:
            described["memory"] = "container memory limit (no RLIMIT_AS with CUDA)"
        else:
            described["memory"] = f"rlimit address space ({self.limits.memory_mb} MiB) + container memory limit"
        return described

    def preexec(self) -> None:
        """In the child, still root: rlimits, OOM priority, then become the worker for good."""
        super().preexec()
        n = _process_count(self.uid) + self.limits.processes
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")   # raising it needs no privilege: the worker dies first on OOM
        except OSError:
            pass
        os.setgroups([])
        os.setgid(self.gid)
        os.setuid(self.uid)
        if os.getuid() != self.uid or os.geteuid() != self.uid:
            os._exit(99)   # never run learner code with the harness's identity


class ContainerLauncher(Launcher):
    """Runs workers as ``lumen-worker`` inside the grader container (see the module docstring)."""

    name = "docker"
    isolated = True

    def __init__(self, user: str = WORKER_USER):
        entry = pwd.getpwnam(user)
        self.uid, self.gid = entry.pw_uid, entry.pw_gid
        if self.uid == 0:
            raise RuntimeError(f"the worker user {user} must not be root")

    @classmethod
    def availability(cls) -> Availability:
        try:
            pwd.getpwnam(WORKER_USER)
        except KeyError:
            return Availability(False, f"no {WORKER_USER} user: this is not the lumen-ex grader image",
                                "lumen-ex image build")
        if os.geteuid() != 0:
            return Availability(False, "the in-container harness must start as root to drop to the worker's uid",
                                "run the image without --user")
        return Availability(True)

    def scratch(self, spec: WorkerSpec) -> dict[str, str]:
        return {"tmp": f"the container's tmpfs /tmp ({spec.limits.tmp_mb} MiB); everything else read-only"}

    def enforcement(self, spec: WorkerSpec) -> Enforcement:
        return WorkerUserEnforcement(spec.limits, None, spec.device == "cuda", uid=self.uid, gid=self.gid)

    def command(self, spec: WorkerSpec, fds: tuple[int, int]) -> Command:
        runtime = python_runtime()
        argv = worker_argv(runtime.python, str(inside_dir()), fds, list(runtime.extra_sites), warm=spec.warm)
        return Command(argv, str(spec.module_dir.resolve()), cwd="/tmp", cleanup=self.kill_worker_processes)

    def kill_worker_processes(self, wait: float = 5.0) -> None:
        """SIGKILL every process of the worker's uid until none is left (setsid or a fork bomb
        escapes the process group; the uid does not change, and only the worker has it)."""
        deadline = time.monotonic() + wait
        while (pids := _pids_of(self.uid)) and time.monotonic() < deadline:
            for pid in pids:
                signal_process(pid, signal.SIGKILL)
            time.sleep(0.005)


def _pids_of(uid: int) -> list[int]:
    """Live (not zombie) processes of ``uid`` in this container's pid namespace."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid != uid:
                    continue
                with open(f"/proc/{entry}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != b"Z":
                found.append(int(entry))
    return found


def _process_count(uid: int) -> int:
    return len(_pids_of(uid))
