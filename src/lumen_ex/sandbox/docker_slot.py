"""The docker backend in ``lumen-ex grade``: one long-lived container per grading slot.

``lumen-ex check --sandbox docker`` runs a whole check, harness included, in a container of its own
(src/lumen_ex/sandbox/docker.py): a container's start and two torch imports for every submission.
A grading process instead keeps its harness here (warm, as under bwrap) and starts one container of
the grader image for its whole batch: the *slot*. Inside it, the zygote of
src/lumen_ex/sandbox/inside/zygote.py imports torch once and forks each submission's worker into
fresh user, mount, pid, IPC, network and UTS namespaces, with its own /proc, /tmp, /dev/shm and a
copy of the workspace (the class folder is never mounted), exactly as in bwrap's zygote
(src/lumen_ex/sandbox/zygote.py, which this reuses whole). This side moves each forked worker into a
fresh cgroup of its own before it runs, as for bwrap.

The slot runs as the image's ``lumen-worker`` user (never root), with no capabilities, no network,
a read-only root and the confinement of every lumen-ex container (docker.py ``run_flags``). Two
settings differ from a check's container, both needed for the zygote to make namespaces:

- a seccomp profile of our own (:func:`seccomp_profile`): docker's default one refuses
  ``unshare`` and ``mount`` to a process without CAP_SYS_ADMIN. Ours allows everything but the
  calls no worker needs that reach the kernel beyond a user namespace's own objects (module
  loading, kexec, bpf, perf events, userfaultfd, the keyring, ...); each worker also installs the
  filter of src/lumen_ex/sandbox/inside/confine.py, which refuses further namespaces;
- ``systempaths=unconfined``: docker covers parts of /proc, and the kernel lets a new user
  namespace mount a fresh /proc only where no part of the old one is covered. Each worker's /proc
  is its own (that of its pid namespace), with /proc/sys and the other kernel settings read-only.

The zygote reaches this side through a unix socket in a folder of this process's bound into the
container (a container cannot inherit a descriptor); the connection is accepted once, from
``lumen-worker``'s uid only. A launch the slot cannot serve (a CUDA worker, a workspace over the
copy's bounds, a slot that would not start) gets a fresh worker in a container of its own
(:class:`DockerWorkerLauncher`): graded the same, only more slowly.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from lumen_ex.image import engine as engine_mod
from lumen_ex.sandbox import docker
from lumen_ex.sandbox.base import (
    WARM_FLAG,
    WORKER_ENV,
    Availability,
    Command,
    Launched,
    Launcher,
    WorkerPipes,
    WorkerSpec,
)
from lumen_ex.sandbox.bwrap import module_path
from lumen_ex.sandbox.cgroups import Enforcement
from lumen_ex.sandbox.zygote import Zygote, ZygoteLauncher

WORKER_UID = 61001                  # the image's lumen-worker (src/lumen_ex/image/grader.Dockerfile)
PYTHON = "/opt/lumen/venv/bin/python"
INSIDE = "/opt/lumen/inside"        # the image's link to lumen_ex/sandbox/inside
CONTROL_DIR = "/run/lumen"          # where the slot sees this side's socket folder
SCRATCH_PREFIX = "lumen-ex-slot-"   # this side's folder of a slot, under the temporary folder
SLOT_MEMORY_MB = 1024               # the zygote's own share of a slot's memory (torch), beside a worker's
SLOT_PROCESSES = 64
# Refused (EPERM) to every process of a slot, its zygote included: what no worker needs and what
# reaches kernel objects beyond its namespaces (docker's default profile refuses these too).
DENIED_CALLS = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module",
    "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_kernel_syms", "init_module", "ioperm",
    "iopl", "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie", "move_mount", "nfsservctl",
    "open_by_handle_at", "open_tree", "perf_event_open", "query_module", "quotactl", "reboot",
    "request_key", "setns", "settimeofday", "stime", "swapoff", "swapon", "_sysctl", "sysfs", "uselib",
    "userfaultfd", "ustat", "vm86", "vm86old",
)


def seccomp_profile() -> str:
    """The slot's seccomp profile (docker's JSON format): everything allowed but DENIED_CALLS."""
    return json.dumps({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": [{"names": list(DENIED_CALLS), "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
    })


def _environment() -> list[str]:
    """The environment a worker sees (base.py WORKER_ENV), as docker flags."""
    return [flag for key, value in WORKER_ENV.items() for flag in ("--env", f"{key}={value}")]


def slot_argv(image: str, name: str, control: Path, profile: Path, spec: WorkerSpec) -> list[str]:
    """The ``docker run`` command of one slot (its zygote) for workers like ``spec``."""
    return [
        *docker.run_flags(name, tmp_mb=spec.limits.tmp_mb, memory_mb=spec.limits.memory_mb + SLOT_MEMORY_MB,
                          processes=spec.limits.processes + SLOT_PROCESSES, ipc="private"),
        "--rm",
        "--security-opt", f"seccomp={profile}",
        "--security-opt", "systempaths=unconfined",
        "--user", f"{WORKER_UID}:{WORKER_UID}",
        *_environment(),
        "--mount", docker._mount(control, CONTROL_DIR),
        "--workdir", "/tmp",
        "--entrypoint", PYTHON,
        image, "-I", "-B", "-u", f"{INSIDE}/zygote.py", f"{CONTROL_DIR}/zygote.sock",
    ]


def slot_zygote(image: str, spec: WorkerSpec) -> Zygote:
    """Start one slot; its zygote connects back once it has imported torch (Zygote.wait_ready)."""
    name = f"{docker.NAME_PREFIX}slot-{uuid.uuid4().hex[:16]}"
    # 0700, ours: nobody else may reach in; the pid lets the next run remove it after a kill -9
    # (src/lumen_ex/sandbox/leftovers.py)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
    control = scratch / "control"
    control.mkdir()
    control.chmod(0o777)            # the container's user must reach the socket; scratch shuts out the host
    profile = scratch / "seccomp.json"
    profile.write_text(seccomp_profile())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    log = tempfile.TemporaryFile(prefix="lumen-ex-zygote-")

    def cleanup() -> None:
        docker.remove_container(name)
        shutil.rmtree(scratch, ignore_errors=True)

    zygote = Zygote(None, log, WORKER_UID, listener=listener, cleanup=cleanup)
    try:
        path = control / "zygote.sock"
        listener.bind(str(path))
        path.chmod(0o666)
        listener.listen(1)
        argv = docker.created(slot_argv(image, name, control, profile, spec), name)   # see created: Ctrl-C
        zygote.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                       start_new_session=True)
    except BaseException:
        zygote.close()
        raise
    return zygote


class DockerSlotLauncher(ZygoteLauncher):
    """Workers forked in this grading process's slot container; any other launch is a fresh worker
    container (:class:`DockerWorkerLauncher`)."""

    name = "docker"
    isolated = True

    def __init__(self, image: str):
        super().__init__(DockerWorkerLauncher(image))
        self.image = image

    @classmethod
    def availability(cls) -> Availability:
        return docker.availability()

    def scratch(self, spec: WorkerSpec) -> dict[str, str]:
        return {"tmp": f"private tmpfs ({spec.limits.tmp_mb} MiB) in the slot's container; everything else read-only"}

    def make_zygote(self, spec: WorkerSpec) -> Zygote:
        return slot_zygote(self.image, spec)


@dataclass
class ContainerEnforcement(Enforcement):
    """A worker container's limits: docker's (memory, pids) and rlimits docker sets (``--ulimit``).
    Nothing is applied to the docker command line itself, which runs on this side."""

    name: str = ""

    def preexec(self) -> None:
        pass

    def describe(self) -> dict[str, str]:
        lim = self.limits
        return {**super().describe(), "memory": f"container memory limit ({lim.memory_mb} MiB, no swap)",
                "processes": f"container pids limit ({lim.processes})"}

    def ulimits(self) -> list[str]:
        names = {"RLIMIT_CPU": "cpu", "RLIMIT_CORE": "core", "RLIMIT_FSIZE": "fsize", "RLIMIT_NOFILE": "nofile"}
        return [flag for name, soft, hard in self.rlimits() if name in names
                for flag in ("--ulimit", f"{names[name]}={soft}:{hard}")]

    def out_of_memory(self) -> bool:
        probe = engine_mod.docker("container", "inspect", "--format", "{{.State.OOMKilled}}", self.name,
                                  timeout=30)
        return probe.ok and probe.out.strip() == "true"


class DockerWorkerLauncher(Launcher):
    """One worker in a container of its own (the learner's workspace bound read-only), talking to
    this side over the container's standard streams: requests in on stdin, replies out on stdout,
    the learner's output on stderr (a two-line shell in the container moves them to the
    descriptors the worker reads and writes)."""

    name = "docker"
    isolated = True
    MOVE_STREAMS = 'exec "$@" 3<&0 4>&1 0</dev/null 1>&2'

    def __init__(self, image: str):
        self.image = image

    @classmethod
    def availability(cls) -> Availability:
        return docker.availability()

    def scratch(self, spec: WorkerSpec) -> dict[str, str]:
        return {"tmp": f"the container's tmpfs /tmp ({spec.limits.tmp_mb} MiB); everything else read-only"}

    def enforcement(self, spec: WorkerSpec) -> ContainerEnforcement:
        return ContainerEnforcement(spec.limits, None, spec.device == "cuda",
                                    name=f"{docker.NAME_PREFIX}worker-{uuid.uuid4().hex[:16]}")

    def command(self, spec: WorkerSpec, fds: tuple[int, int]) -> Command:
        return self._command(spec, self.enforcement(spec))   # fds: the container's streams carry them

    def _command(self, spec: WorkerSpec, enforcement: ContainerEnforcement) -> Command:
        lim = spec.limits
        argv = [
            *docker.run_flags(enforcement.name, tmp_mb=lim.tmp_mb, memory_mb=lim.memory_mb,
                              processes=lim.processes, ipc="private"),
            "--interactive",
            *enforcement.ulimits(),
            "--user", f"{WORKER_UID}:{WORKER_UID}",
            *_environment(),
            "--mount", docker._mount(spec.workspace.resolve(), "/workspace", readonly=True),
            "--workdir", "/tmp",
            *(["--gpus", "all"] if spec.device == "cuda" else []),
            "--entrypoint", "/bin/sh",
            self.image, "-c", self.MOVE_STREAMS, "sh",
            PYTHON, "-I", "-B", "-u", f"{INSIDE}/worker.py", "fds", "3", "4",
            *([WARM_FLAG] if spec.warm else []),
        ]
        return Command(argv, module_path(spec), cwd="/", cleanup=lambda: docker.remove_container(enforcement.name))

    def launch(self, spec: WorkerSpec) -> Launched:
        enforcement = self.enforcement(spec)
        cmd = self._command(spec, enforcement)
        pipes = WorkerPipes()
        try:
            argv = docker.created(cmd.argv, enforcement.name)     # see created: an interrupt leaves no container
            proc = subprocess.Popen(argv, stdin=pipes.req_r, stdout=pipes.rep_w, stderr=pipes.out_w,
                                    close_fds=True, start_new_session=True)
        except BaseException:
            pipes.close()
            if cmd.cleanup is not None:
                cmd.cleanup()
            raise
        return pipes.hand_over(proc, enforcement, cmd.module_path, {**enforcement.describe(), **self.scratch(spec)},
                               cmd.cleanup)
