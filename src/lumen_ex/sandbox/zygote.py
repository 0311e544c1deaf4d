"""Workers forked from a warm zygote: a bwrap worker without a torch import of its own.

A fresh worker spends about two seconds of CPU importing torch and its meta kernels before it can
answer; a batch of a thousand checks spends most of its time there. :class:`ZygoteLauncher` starts
one zygote per launcher (per grading process, so per job slot): a bwrap sandbox like a worker's, in
which src/lumen_ex/sandbox/inside/zygote.py imports torch once and then forks one worker per
submission, each in fresh mount, pid, IPC, network and UTS namespaces, with its own /proc, /tmp,
/dev/shm and a copy of the workspace, no capabilities and a seccomp filter. Each forked worker is put
in a fresh cgroup by this side (the harness) before it runs a line of the learner's code, and is
held to the same limits and the same protocol as a worker started on its own: the harness cannot
tell them apart, and neither can the verdicts (bench/grade_throughput.py compares them).

Where a zygote cannot serve (not x86_64, a CUDA worker, a workspace over the bounds of
src/lumen_ex/sandbox/workspace_copy.py, a zygote that died or would not start), the launch falls back to the wrapped
launcher's own fresh worker, so nothing is graded differently, only more slowly.

What a forked worker is told and what it says about itself is never trusted: its host pid comes
from the kernel (SO_PASSCRED on its socket, read before any learner code runs), and its exit status
from its init, a process of ours it cannot reach.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from typing import IO, Any, cast

from lumen_ex.core.limits import Limits
from lumen_ex.sandbox.base import WORKER_ENV, Availability, Command, Launched, Launcher, WorkerPipes, WorkerSpec
from lumen_ex.sandbox.bwrap import SANDBOX_UID, BwrapLauncher, module_path
from lumen_ex.sandbox.cgroups import Enforcement
from lumen_ex.sandbox.forked_process import ForkedProcess
from lumen_ex.sandbox.inside import confine
from lumen_ex.sandbox.processes import kill_group, reap
from lumen_ex.sandbox.workspace_copy import CopyRecord, ZygoteUnavailable, workspace_copy

START_S = 60.0              # how long a zygote may take to import torch and say it is ready
FORK_S = 10.0               # how long a fork may take until the worker's init reports its pid
LENGTH = struct.Struct(">I")


def supported() -> bool:
    return confine.filter_supported() and hasattr(socket, "SO_PASSCRED") and hasattr(socket, "recv_fds")


# -------------------------------------------------------------------------------------------------
# The zygote


class Zygote:
    """One zygote process and the socket its fork requests go down.

    ``proc`` is the process this side started (bwrap, or the docker command line of a slot's
    container); ``uid`` the host uid its workers must run as. The control socket is either given
    (a socketpair, inherited by bwrap) or accepted on ``listener`` from a process of ``uid``
    (a container cannot inherit a descriptor). ``cleanup`` runs after the process is killed (the
    container's removal, bwrap's stage)."""

    def __init__(self, proc: subprocess.Popen[bytes] | None, log: IO[bytes], uid: int, *,
                 control: socket.socket | None = None, listener: socket.socket | None = None,
                 enforcement: Enforcement | None = None, cleanup: Callable[[], None] | None = None) -> None:
        self.proc, self.log, self.uid = proc, log, uid
        self.control, self.listener = control, listener
        self.enforcement, self._cleanup = enforcement, cleanup
        self.ready = False
        self.pid: int | None = None     # a connected zygote's pid as this side sees it (from the kernel)

    @classmethod
    def in_bwrap(cls, launcher: BwrapLauncher, spec: WorkerSpec) -> Zygote:
        """A zygote in a bwrap sandbox like a worker's (BwrapLauncher.zygote_command)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Its own limits: no CPU time limit (it lives for a whole batch), the worker's memory limit
        # (torch, shared with every worker it forks, is charged here and not to them).
        enforcement = Enforcement.prepare(replace(spec.limits, cpu_seconds=7 * 24 * 3600, processes=256))
        log = tempfile.TemporaryFile(prefix="lumen-ex-zygote-")   # what it prints (never a learner's)
        uid = SANDBOX_UID if os.geteuid() == 0 else os.geteuid()   # the host uid its workers run as
        zygote = cls(None, log, uid, control=ours, enforcement=enforcement)
        try:
            command = launcher.zygote_command(spec, theirs.fileno())
            zygote._cleanup = command.cleanup
            zygote.proc = subprocess.Popen(
                command.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                pass_fds=(theirs.fileno(),), close_fds=True, start_new_session=True, env=dict(WORKER_ENV),
                cwd=command.cwd, preexec_fn=enforcement.preexec)
        except BaseException:
            zygote.close()
            raise
        finally:
            theirs.close()
        return zygote

    def wait_ready(self, timeout: float = START_S) -> None:
        """Block until the zygote has imported torch (or raise ZygoteUnavailable)."""
        if self.ready:
            return
        deadline = time.monotonic() + timeout
        if self.control is None:
            self.control = self._accept(deadline)
        message = self.control.recv(4096) if self._readable(self.control, deadline) else b""
        try:
            ready = bool(json.loads(message).get("ready")) if message else False
        except ValueError:
            ready = False
        if not ready:
            raise ZygoteUnavailable(f"the zygote did not start: {self.log_tail() or 'no answer'}")
        self.ready = True

    def _readable(self, sock: socket.socket, deadline: float) -> bool:
        """Wait until ``sock`` is readable; False at the deadline or once the zygote has exited."""
        while (left := deadline - time.monotonic()) > 0:
            if select.select([sock], [], [], min(left, 0.25))[0]:
                return True
            if self.proc is not None and self.proc.poll() is not None:
                return bool(select.select([sock], [], [], 0)[0])
        return False

    def _accept(self, deadline: float) -> socket.socket:
        """The zygote's connection: the first one, from a process of our workers' uid."""
        listener, self.listener = self.listener, None
        try:
            if listener is None or not self._readable(listener, deadline):
                raise ZygoteUnavailable(f"the zygote did not connect: {self.log_tail() or 'no answer'}")
            control, _ = listener.accept()
        finally:
            if listener is not None:
                _close_listener(listener)
        creds = control.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        self.pid, uid, _ = struct.unpack("3i", creds)
        if uid != self.uid:
            control.close()
            raise ZygoteUnavailable(f"the zygote's socket was connected to by uid {uid}, not {self.uid}")
        return control

    def alive(self) -> bool:
        assert self.proc is not None     # set as soon as it is made (in_bwrap, docker_slot.py slot_zygote)
        return self.proc.poll() is None

    def fork(self, fds: tuple[int, int, int]) -> tuple[int, socket.socket]:
        """Ask for one worker with these pipe ends (request in, reply out, output); return its
        init's pid (from the kernel) and its socket, on which it now waits for its setup."""
        assert self.control is not None     # the launcher forks only after wait_ready, which set it
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            try:
                socket.send_fds(self.control, [json.dumps({"op": "fork"}).encode()], [*fds, theirs.fileno()])
            except OSError as exc:
                raise ZygoteUnavailable(f"the zygote is gone ({exc.strerror})") from None
            finally:
                theirs.close()
            return self._pid_of(ours), ours
        except BaseException:
            ours.close()
            raise

    def _pid_of(self, channel: socket.socket) -> int:
        readable, _, _ = select.select([channel], [], [], FORK_S)
        if not readable:
            raise ZygoteUnavailable("the zygote did not fork in time")
        size = socket.CMSG_SPACE(struct.calcsize("3i"))
        message, ancillary, _, _ = channel.recvmsg(1, size)
        pid: int
        uid: int
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and message == b"p":
                pid, uid, _ = struct.unpack("3i", data[:struct.calcsize("3i")])
                if uid != self.uid or pid <= 1:
                    raise ZygoteUnavailable(f"a forked worker came back as uid {uid}, pid {pid}")
                return pid
        raise ZygoteUnavailable(f"the zygote's worker did not start: {self.log_tail() or 'no answer'}")

    def log_tail(self) -> str:
        try:
            self.log.seek(0)
            lines = self.log.read()[-4000:].decode(errors="replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return lines[-1][:300] if lines else ""

    def close(self) -> None:
        """Kill the zygote, its sandbox and every worker it forked; idempotent."""
        if self.proc is not None:
            kill_group(self.proc.pid)
            reap(self.proc)
        if self.enforcement is not None:
            self.enforcement.cleanup()
        if self._cleanup is not None:
            self._cleanup()
            self._cleanup = None
        for sock in (self.control, self.listener):
            if sock is not None:
                sock.close()
        self.log.close()


def _close_listener(listener: socket.socket) -> None:
    """Close a listening socket, remove its file and shut its folder: nothing may connect again."""
    path = listener.getsockname()
    listener.close()
    if isinstance(path, str) and path.startswith("/"):
        try:
            os.unlink(path)
            os.chmod(os.path.dirname(path), 0o700)
        except OSError:
            pass


def send_setup(channel: socket.socket, setup: dict[str, Any], data: bytes, timeout: float = FORK_S) -> None:
    """The worker's setup (its limits and workspace), length-prefixed JSON and then the files."""
    header = json.dumps(setup).encode()
    channel.settimeout(timeout)
    try:
        channel.sendall(LENGTH.pack(len(header)) + header)
        channel.sendall(data)
    except OSError as exc:
        raise ZygoteUnavailable(f"the forked worker did not take its setup ({exc})") from None


def _wait_built(channel: socket.socket, zygote: Zygote) -> None:
    """Wait for the init's word that the worker's sandbox is built (else ZygoteUnavailable)."""
    channel.settimeout(FORK_S)
    try:
        answer = channel.recv(1)
    except OSError:
        answer = b""
    if answer != b"r":
        raise ZygoteUnavailable(f"a forked worker's sandbox could not be built: {zygote.log_tail() or 'no answer'}")


class ZygoteLauncher(Launcher):
    """The bwrap launcher, with workers forked from one warm zygote where they can be
    (:func:`supported`, a CPU worker, a workspace within the copy's bounds); any other launch, and
    any fork that fails, is a fresh worker of the wrapped launcher. (The docker backend's grading
    slot, src/lumen_ex/sandbox/docker_slot.py, is this with a zygote in a container.)"""

    name = BwrapLauncher.name
    isolated = True

    def __init__(self, inner: Launcher) -> None:
        self.inner = inner
        self.zygote: Zygote | None = None
        # zygotes that would not start or died since a worker was last forked: after two in a row, none
        # more (a process that lives for hours, the check server or the playground, keeps forking after
        # a zygote dies now and then)
        self.failures = 0
        self.forked = 0             # workers forked (for tests and benchmarks)
        self.made_for: Limits | None = None     # the limits of the spec the zygote was started with

    @classmethod
    def availability(cls) -> Availability:
        return BwrapLauncher.availability()

    def note(self) -> str:
        return self.inner.note()

    def scratch(self, spec: WorkerSpec) -> dict[str, str]:
        return self.inner.scratch(spec)

    def command(self, spec: WorkerSpec, fds: tuple[int, int]) -> Command:
        return self.inner.command(spec, fds)

    def launch(self, spec: WorkerSpec) -> Launched:
        if not self._can_fork(spec):
            return self.inner.launch(spec)
        try:
            return self._fork(spec)
        except ZygoteUnavailable:
            return self.inner.launch(spec)

    def _can_fork(self, spec: WorkerSpec) -> bool:
        return spec.device == "cpu" and supported() and self.failures < 2 and self._covers(spec)

    def _covers(self, spec: WorkerSpec) -> bool:
        """Whether the zygote, made for the limits of the spec it was started with, can fork a worker
        held to ``spec.limits``: a worker may lower the limits it inherits but not raise them (an
        rlimit's hard value where there is no cgroup; a slot's container's memory, pids and /tmp).
        A pack whose exercises differ in limits gets fresh workers for those the zygote cannot hold."""
        made, wanted = self.made_for, spec.limits
        return made is None or self.zygote is None or all(
            getattr(wanted, name) <= getattr(made, name)
            for name in ("memory_mb", "processes", "tmp_mb", "file_mb", "open_files"))

    def start(self, spec: WorkerSpec) -> bool:
        """Start the zygote now, without waiting for it, so that its torch import overlaps with
        whatever the caller does next (a grading process, or a learner's check session, imports its
        own). Any failure is left for the first launch, which then starts a fresh worker."""
        if self.zygote is None and self._can_fork(spec):
            try:
                self._new_zygote(spec)
            except ZygoteUnavailable:
                pass
        return self.zygote is not None

    def _new_zygote(self, spec: WorkerSpec) -> None:
        try:
            self.zygote, self.made_for = self.make_zygote(spec), spec.limits
        except OSError as exc:
            self.failures += 1
            raise ZygoteUnavailable(f"the zygote could not be started: {exc}") from None

    def make_zygote(self, spec: WorkerSpec) -> Zygote:
        # A ZygoteLauncher wraps bwrap's launcher (src/lumen_ex/sandbox/select.py forking); one with another inner
        # launcher makes its zygote its own way (docker_slot.py DockerSlotLauncher).
        return Zygote.in_bwrap(cast(BwrapLauncher, self.inner), spec)

    def _zygote(self, spec: WorkerSpec) -> Zygote:
        if self.zygote is not None and not self.zygote.alive():
            self._drop()
        if self.zygote is None:
            self._new_zygote(spec)
        assert self.zygote is not None          # _new_zygote set it, or raised
        try:
            self.zygote.wait_ready()
        except ZygoteUnavailable:
            self._drop()
            raise
        return self.zygote

    def _drop(self) -> None:
        self.failures += 1
        zygote, self.zygote = self.zygote, None
        if zygote is not None:
            zygote.close()

    def _fork(self, spec: WorkerSpec) -> Launched:
        entries, data = workspace_copy(spec.workspace.resolve())
        inside = module_path(spec)
        zygote = self._zygote(spec)
        enforcement = self.enforcement(spec)
        pipes = WorkerPipes()
        channel = None
        try:
            try:
                pid, channel = zygote.fork(pipes.theirs)
            except ZygoteUnavailable:
                self._drop()
                raise
            if enforcement.cgroup is not None:
                try:
                    enforcement.cgroup.add(pid)      # before the worker exists: it is forked in there
                except OSError as exc:
                    raise ZygoteUnavailable(f"a forked worker could not be put in its cgroup: {exc}") from None
            send_setup(channel, {"tmp_bytes": spec.limits.tmp_mb << 20, "rlimits": enforcement.rlimits(),
                                 "entries": entries}, data)
            _wait_built(channel, zygote)
        except BaseException:
            if channel is not None:
                kill_group(pid)
                channel.close()
            enforcement.cleanup()
            pipes.close()
            raise
        self.forked += 1
        self.failures = 0
        launched = pipes.hand_over(ForkedProcess(pid, channel), enforcement, inside,
                                   {**enforcement.describe(), **self.scratch(spec)})
        launched.workspace_copy = CopyRecord.of(spec.workspace.resolve(), entries, data, spec.graded_file)
        return launched

    def close(self) -> None:
        """Stop the zygote (and so every worker it forked)."""
        zygote, self.zygote = self.zygote, None
        if zygote is not None:
            zygote.close()
