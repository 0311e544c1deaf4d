"""The interface every sandbox backend implements, and the process plumbing they share.

A :class:`Backend` is what ``--sandbox NAME`` names (src/lumen_ex/sandbox/select.py chooses it, for
every command alike). It grades one exercise with :meth:`Backend.run_check`. Most backends are
*launchers*: the harness grades on this machine, against workers the backend starts. The docker
backend instead runs the whole check, harness included, in a container of the grader image
(src/lumen_ex/sandbox/docker.py); ``keeps_workers`` says which kind a backend is.

A *launcher* starts one untrusted worker (``src/lumen_ex/sandbox/inside/worker.py``) for one submission and hands the
harness three pipe ends: requests in, replies out, and the learner's stdout+stderr. Launchers
differ only in how they wrap the worker's command line (bubblewrap, a container user, or nothing
at all); the protocol, the limits and the verdicts are the same whichever one ran.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from lumen_ex.core.errors import SandboxUnavailable
from lumen_ex.core.limits import Limits
from lumen_ex.core.results import RunResult
from lumen_ex.sandbox.cgroups import Enforcement
from lumen_ex.sandbox.processes import Process, kill_group, reap
from lumen_ex.sandbox.workspace_copy import CopyRecord

if TYPE_CHECKING:
    from lumen_ex.core.catalog import Exercise

# The files of lumen_ex/sandbox/inside a worker runs from (the folder is bound whole, read-only): the
# worker with its layer against forbidden APIs and its work counter (forbid.py, work_counter.py), its
# nn.Module calls, held values and Triton kernels (module_call.py, held.py, kernels.py), the wire
# format, and the zygote that forks workers with its system calls (zygote.py, confine.py).
WORKER_FILES = ("worker.py", "forbid.py", "work_counter.py", "module_call.py", "held.py", "kernels.py", "wire.py",
                "wire_limits.py", "wire_decode.py", "zygote.py", "confine.py")
# The environment a worker sees: nothing from the host, one thread, a private home.
WORKER_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
    "PYTHONUNBUFFERED": "1",
}


def inside_dir() -> Path:
    """The folder of the files a sandbox sees (WORKER_FILES): lumen_ex/sandbox/inside."""
    return Path(__file__).resolve().parent / "inside"


@dataclass(frozen=True)
class WorkerSpec:
    """What to run: one learner module from one workspace, on one device, within limits."""

    workspace: Path        # mounted read-only; the learner's files
    module_dir: Path       # the folder holding the learner's module, inside ``workspace``
    device: str = "cpu"    # "cpu" or "cuda"
    limits: Limits = field(default_factory=Limits)
    # Started in advance (watch, serve, the next job of a grading process) or with a cold check's
    # harness still importing torch and pytest: the worker loads torch's meta-device kernels (about a
    # second) before its hello, while nothing waits for it. A replacement after a crash, and a fresh
    # worker a suite asks for (exercise 5's memory test), load them only if a test uses the meta device.
    # How a worker starts, not what it runs: left out of equality, so that a worker started warm in
    # advance is the one a check asks for either way (src/lumen_ex/classroom/grading_main.py).
    warm: bool = field(default=False, compare=False)
    # The file a check grades (the worker imports the check's snapshot of it, src/lumen_ex/core/snapshot.py,
    # so a forked worker's copy of it may be older: src/lumen_ex/sandbox/workspace_copy.py CopyRecord).
    graded_file: Path | None = None


@dataclass
class Command:
    argv: list[str]
    module_path: str                 # the learner's module folder as the worker sees it
    cwd: str = "/"
    cleanup: Callable[[], None] | None = None
    env: dict[str, str] = field(default_factory=dict)   # over WORKER_ENV, for this worker only


@dataclass
class Availability:
    ok: bool
    reason: str = ""
    install: str = ""      # the one next step that makes it available, as a user reads it ("Install it: ...")

    def require(self, name: str) -> None:
        """Nothing when available; otherwise SandboxUnavailable (exit code 3) with the reason and the next step."""
        if not self.ok:
            raise SandboxUnavailable(f"{name} sandbox unavailable: {self.reason}", self.install)


class Launched:
    """A running sandboxed worker as the harness sees it: three fds and a way to kill it."""

    def __init__(self, proc: Process, request_fd: int, reply_fd: int, output_fd: int,
                 enforcement: Enforcement, module_path: str, extra_kill: Callable[[], None] | None = None) -> None:
        self.proc = proc
        self.request_fd, self.reply_fd, self.output_fd = request_fd, reply_fd, output_fd
        self.enforcement = enforcement
        self.module_path = module_path     # the module folder as the worker sees it
        self._extra_kill = extra_kill
        self._closed = False
        self.limits: dict[str, str] = {}   # which mechanism holds each limit, for the record
        # What a forked worker's copy of the workspace held (src/lumen_ex/sandbox/workspace_copy.py).
        # None: the worker sees the folder itself, as it is.
        self.workspace_copy: CopyRecord | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_description(self) -> str:
        """'exit code 0', 'killed by SIGKILL (out of memory: limit 2048 MiB)', ..."""
        code = self.proc.poll()
        if code is None:
            return "still running"
        oom = self.enforcement.out_of_memory()
        if code < 0 or code > 128:
            signum = -code if code < 0 else code - 128
            try:
                name = signal.Signals(signum).name
            except ValueError:
                name = f"signal {signum}"
            text = f"killed by {name}"
            if signum == signal.SIGXCPU:
                text += f" (CPU time limit: {self.enforcement.limits.cpu_seconds} s)"
        else:
            text = f"exit code {code}"
        if oom:
            text += f" (out of memory: limit {self.enforcement.limits.memory_mb} MiB)"
        return text

    def stop_now(self) -> None:
        """SIGKILL the worker's process group and every process in its cgroup: from then on nothing
        of its run executes. Waiting for them and removing the cgroup are :meth:`kill`'s, later
        (watch mode and the playground do that after the result is shown)."""
        kill_group(self.proc.pid)
        cgroup = self.enforcement.cgroup
        for pid in cgroup.pids() if cgroup is not None else ():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self) -> None:
        """Kill the worker and everything it started; idempotent."""
        if self._closed:
            return
        self._closed = True
        kill_group(self.proc.pid)
        if self._extra_kill is not None:
            self._extra_kill()     # the launcher's Command.cleanup: after the kill, before the reap
        reap(self.proc)
        self.enforcement.cleanup()
        for fd in (self.request_fd, self.reply_fd, self.output_fd):
            try:
                os.close(fd)
            except OSError:
                pass


class CheckHere(Protocol):
    """The trusted pipeline a launcher's check is graded by (lumen_ex.harness.check.check_here)."""

    def __call__(self, ex: Exercise, workspace: Path, learner_file: Path, launcher: Launcher, /, *, seed: int,
                 device: str, select: str | None, warning: str) -> RunResult: ...


class Backend(ABC):
    """One sandbox backend: how a check's untrusted code is kept away from the grader."""

    name: str = ""
    isolated: bool = False
    # True: the harness runs here and this backend starts its workers, so a worker can be started
    # in advance and kept warm (watch mode, grading processes). False: every check is a run of its
    # own elsewhere (a container), with nothing to keep between checks.
    keeps_workers: bool = True

    @classmethod
    @abstractmethod
    def availability(cls) -> Availability: ...

    def note(self) -> str:
        return ""

    def spec(self) -> str:
        """How another process names this backend (a grading process's SANDBOX argument):
        src/lumen_ex/sandbox/select.py ``from_spec`` makes the same backend back from it."""
        return self.name

    @abstractmethod
    def run_check(self, ex: Exercise, workspace: Path, learner_file: Path, *, seed: int, device: str,
                  select: str | None, note: str, check_here: CheckHere) -> RunResult:
        """Grade ``ex`` (the learner's ``learner_file`` in ``workspace``) with ``seed`` on ``device``.

        ``check_here`` is the trusted pipeline that grades in this process against workers this
        backend launches (lumen_ex.harness.check.check_here); a backend that runs the whole check
        elsewhere does not call it. The sandbox layer sits below the harness, so it is handed in."""


class Launcher(Backend):
    """One way of starting a worker. Subclasses wrap the command; the plumbing is shared."""

    def run_check(self, ex: Exercise, workspace: Path, learner_file: Path, *, seed: int, device: str,
                  select: str | None, note: str, check_here: CheckHere) -> RunResult:
        return check_here(ex, workspace, learner_file, self, seed=seed, device=device, select=select, warning=note)

    @abstractmethod
    def command(self, spec: WorkerSpec, fds: tuple[int, int]) -> Command:
        """How to start the worker for ``spec`` with the given request and reply fds."""

    def start(self, spec: WorkerSpec) -> bool:
        """Begin, without waiting, what launching workers like ``spec`` needs (a zygote's torch
        import); True when something was started, so that the caller's own work overlaps with it
        and its first launch comes later. A launcher that starts each worker on its own: False."""
        return False

    def close(self) -> None:
        """Stop what this launcher keeps between launches (a zygote, a slot); idempotent."""

    def up_to_date(self, launched: Launched) -> bool:
        """Whether a worker launched in advance still sees the workspace as it is now. One that sees
        the folder itself always does; a forked worker holds a copy made when it was forked, which a
        helper module saved since then leaves behind (a check must see the workspace as it was when
        it began: the caller then launches another)."""
        return launched.workspace_copy is None or launched.workspace_copy.current()

    def scratch(self, spec: WorkerSpec) -> dict[str, str]:
        """Where the worker may write, for the result record's limits."""
        return {"tmp": "none: a throwaway folder on the host's disk"}

    def enforcement(self, spec: WorkerSpec) -> Enforcement:
        """How this launcher's workers are held to ``spec.limits`` (a cgroup when possible, rlimits)."""
        return Enforcement.prepare(spec.limits, cuda=spec.device == "cuda")

    def launch(self, spec: WorkerSpec) -> Launched:
        enforcement = self.enforcement(spec)
        pipes = WorkerPipes()
        cmd = None
        try:
            cmd = self.command(spec, (pipes.req_r, pipes.rep_w))
            proc = subprocess.Popen(
                cmd.argv,
                stdin=subprocess.DEVNULL,
                stdout=pipes.out_w,
                stderr=pipes.out_w,
                pass_fds=(pipes.req_r, pipes.rep_w),
                close_fds=True,
                start_new_session=True,
                env={**WORKER_ENV, **cmd.env},
                cwd=cmd.cwd,
                preexec_fn=enforcement.preexec,
            )
        except BaseException:
            enforcement.cleanup()
            if cmd is not None and cmd.cleanup is not None:
                cmd.cleanup()
            pipes.close()
            raise
        return pipes.hand_over(proc, enforcement, cmd.module_path, {**enforcement.describe(), **self.scratch(spec)},
                               cmd.cleanup)


# Bytes a request or reply pipe holds: a frame of a megabyte or two (exercise 5's inputs at L = 4096)
# then crosses in one or two writes instead of sixteen 64 KB rounds, each waiting for the other side.
# Linux's default cap for a user (/proc/sys/fs/pipe-max-size) is 1 MiB; where it is refused the
# pipe keeps its size, and only time changes.
PIPE_BYTES = 1 << 20


def widen_pipe(fd: int) -> None:
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except OSError:
        pass


class WorkerPipes:
    """The three pipes between the harness and one worker: requests in, replies out, and its
    output (stdout and stderr). The worker's ends are ``theirs``; :meth:`hand_over` closes them here
    once the worker holds them, and returns the Launched that holds ours."""

    def __init__(self) -> None:
        self.req_r, self.req_w = os.pipe()
        self.rep_r, self.rep_w = os.pipe()
        self.out_r, self.out_w = os.pipe()
        for fd in (self.req_w, self.rep_w):
            widen_pipe(fd)

    @property
    def theirs(self) -> tuple[int, int, int]:
        return self.req_r, self.rep_w, self.out_w

    def close(self) -> None:
        for fd in (self.req_r, self.req_w, self.rep_r, self.rep_w, self.out_r, self.out_w):
            os.close(fd)

    def hand_over(self, proc: Process, enforcement: Enforcement, module_path: str, limits: dict[str, str],
                  cleanup: Callable[[], None] | None = None) -> Launched:
        for fd in self.theirs:
            os.close(fd)
        for fd in (self.req_w, self.rep_r, self.out_r):
            os.set_blocking(fd, False)
        launched = Launched(proc, self.req_w, self.rep_r, self.out_r, enforcement, module_path, cleanup)
        launched.limits = limits
        return launched


WARM_FLAG = "+warm"     # worker.py's flag for WorkerSpec.warm (never a folder: those are absolute paths)


def worker_argv(python: str, worker_dir: str, fds: tuple[int, int], extra_sites: list[str],
                warm: bool = False) -> list[str]:
    return [*_inside(python, worker_dir, "worker.py"), "fds", str(fds[0]), str(fds[1]),
            *([WARM_FLAG] if warm else []), *extra_sites]


def zygote_argv(python: str, worker_dir: str, control_fd: int, extra_sites: list[str]) -> list[str]:
    """The zygote's command line (src/lumen_ex/sandbox/inside/zygote.py; src/lumen_ex/sandbox/zygote.py)."""
    return [*_inside(python, worker_dir, "zygote.py"), str(control_fd), *extra_sites]


def _inside(python: str, worker_dir: str, script: str) -> list[str]:
    # -I: no user site, no PYTHON* variables, no script folder on sys.path; -B: no .pyc files;
    # -u: unbuffered, so prints reach the output pipe in the order they were made.
    return [python, "-I", "-B", "-u", f"{worker_dir}/{script}"]


@dataclass(frozen=True)
class Runtime:
    """The interpreter that runs workers and the folders it needs to start and import torch."""

    python: str
    mounts: tuple[Path, ...]         # folders to make visible (read-only) inside a sandbox
    extra_sites: tuple[str, ...]     # site folders ``python -I`` would not search by itself


def python_runtime() -> Runtime:
    """Find torch without importing it (the harness must not pay for that before launching)."""
    import importlib.util
    import site

    dirs = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    extra = []
    for name in ("torch", "numpy"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        site_dir = Path(spec.origin).resolve().parent.parent
        if not any(site_dir.is_relative_to(d) for d in dirs):
            dirs.add(site_dir)
        if str(site_dir) not in {str(Path(p).resolve()) for p in site.getsitepackages()}:
            extra.append(str(site_dir))
    # abspath: a Python started as ../.venv/bin/python has ".." in sys.executable, which the
    # sandbox (where the folder it passes through is not mounted) cannot resolve; abspath keeps the
    # venv's bin/python link (realpath would resolve it to the base interpreter and lose the venv).
    return Runtime(os.path.abspath(sys.executable), tuple(sorted(dirs)), tuple(dict.fromkeys(extra)))
