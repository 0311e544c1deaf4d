"""The docker backend: the whole check runs inside the grader image, the host reads one file.

``lumen-ex check N --sandbox docker`` starts one throwaway container of the image that matches
this exact lumen-ex (src/lumen_ex/image/tag.py), with the learner's workspace mounted read-only and a fresh
results directory made by the host. Inside, the image's entry point runs the harness and starts the
worker as an unprivileged user (src/lumen_ex/sandbox/container.py). The host takes the verdict only from the
result document (src/lumen_ex/sandbox/result_document.py), never from the container's output or exit code.

The container gets no network, a read-only root, small private tmpfs folders, memory = memory+swap,
a pids limit, a CPU limit, no capabilities but SETUID, SETGID (to become the worker's user) and KILL
(to kill it), no-new-privileges, no IPC namespace sharing and docker's default seccomp profile. A
wall-clock limit kills it; whatever happens (a timeout, an exception, Ctrl-C, SIGTERM), the
container is killed and removed by name before this returns, because killing the docker command
line does not stop a container. Every container of lumen-ex is made by a ``docker create`` that is
waited for and then started attached (:func:`created`), so that an interrupt cannot race its creation.
"""

from __future__ import annotations

import collections
import csv
import io
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from lumen_ex.core.errors import DeviceUnavailable, UsageError
from lumen_ex.core.limits import Limits
from lumen_ex.core.options import SEED_ENV, gpu_present
from lumen_ex.core.results import RunResult, SandboxInfo, grader_error, join_notes
from lumen_ex.image import engine as engine_mod
from lumen_ex.image import tag as image
from lumen_ex.sandbox.base import Availability, Backend, CheckHere
from lumen_ex.sandbox.processes import kill, reap, signals_interrupt
from lumen_ex.sandbox.result_document import DocumentError, read_document

if TYPE_CHECKING:
    from lumen_ex.core.catalog import Exercise

NAME_PREFIX = "lumen-"
SPEC_PREFIX = "docker:"          # a grading process's SANDBOX argument: docker:<image reference>
HARNESS_MEMORY_MB = 1024        # the harness's own share of the container's memory (torch + pytest)
HARNESS_PROCESSES = 64          # pids for the harness and its threads, beside the worker's
CPUS = 2.0
START_MARGIN_S = 30.0           # container start and result writing, beyond the check's own limits
GPU_INSTALL = ("install the NVIDIA container toolkit (https://docs.nvidia.com/datacenter/cloud-native/"
               "container-toolkit/latest/install-guide.html) and restart docker, or use --sandbox bwrap")


def probe() -> tuple[Availability, image.ImageStatus]:
    """Whether ``--sandbox docker`` can run here (the engine answers and the current image exists),
    with the image status behind the answer."""
    state = image.status()
    if state.state == "no-engine":
        return Availability(False, state.reason, engine_mod.INSTALL), state
    if not state.ok:
        return Availability(False, state.reason, f"Build it: {image.build_command()}"), state
    return Availability(True), state


def availability() -> Availability:
    return probe()[0]


class DockerSandbox(Backend):
    """Runs a whole check, harness included, in one container of the grader image."""

    name = "docker"
    isolated = True
    keeps_workers = False

    @classmethod
    def availability(cls) -> Availability:
        return probe()[0]

    def spec(self) -> str:
        return f"{SPEC_PREFIX}{self.image}"

    def __init__(self, image_ref: str, *, wall_limit: float | None = None):
        self.image = image_ref
        self.wall_limit = wall_limit    # seconds; default: the exercise's start-up + run limits + a margin

    # -- the command line ---------------------------------------------------------------------

    def argv(self, *, name: str, workspace: Path, results: Path, exercise: int, device: str,
             limits: Limits, select: str | None = None, gpus: bool = False) -> list[str]:
        """The ``docker run`` command for one check (every isolation flag is here)."""
        args = [
            *run_flags(name, tmp_mb=limits.tmp_mb, memory_mb=limits.memory_mb + HARNESS_MEMORY_MB,
                       processes=limits.processes + HARNESS_PROCESSES, ipc="none"),
            "--rm",
            "--tmpfs", "/run/lumen:rw,nosuid,nodev,noexec,size=16m,mode=0700",
            "--cap-add", "SETUID", "--cap-add", "SETGID", "--cap-add", "KILL",
            "--user", "0:0",
            "--env", "TMPDIR=/run/lumen",
            "--env", SEED_ENV,          # the value comes from our environment: not on any command line
            "--mount", _mount(workspace, "/workspace", readonly=True),
            "--mount", _mount(results, "/results"),
        ]
        if os.geteuid() != 0:
            args += ["--group-add", str(os.getegid())]   # the results folder is 0770, our group
        if gpus:
            args += ["--gpus", "all"]
        args += [self.image, str(exercise), "--device", device]
        if select:
            args += ["--select", select]
        return args

    # -- one check ------------------------------------------------------------------------------

    def run_check(self, ex: Exercise, workspace: Path, learner_file: Path | None = None, *, seed: int, device: str,
                  select: str | None = None, note: str = "", check_here: CheckHere | None = None) -> RunResult:
        """Grade ``ex`` in ``workspace`` in a fresh container; always returns a validated result.
        (The container's own harness finds the learner's file; ``check_here`` is not needed.)"""
        started = time.monotonic()
        workspace = workspace.resolve()
        _check_readable(workspace, ex)
        device, gpus = _device_flags(device)
        name = f"{NAME_PREFIX}{uuid.uuid4().hex[:16]}"
        scratch = Path(tempfile.mkdtemp(prefix="lumen-ex-docker-"))   # 0700, ours
        results = scratch / "results"
        results.mkdir()
        results.chmod(0o700 if os.geteuid() == 0 else 0o770)
        limit = self.wall_limit or ex.times.startup_seconds + ex.times.run_seconds + START_MARGIN_S
        argv = self.argv(name=name, workspace=workspace, results=results, exercise=ex.number,
                         device=device, limits=ex.limits, select=select, gpus=gpus)
        removed = False
        with signals_interrupt():   # SIGTERM and SIGHUP too: the container is removed whatever ends this
            try:
                removed, outcome = _run_container(argv, name, seed=seed, limit=limit)
                try:
                    result = read_document(results / "result.json", exercise=ex.summary(), seed=seed)
                except DocumentError as exc:
                    result = self._error(ex, seed, "cpu" if device == "auto" else device, started, f"{exc}{outcome}")
            finally:
                if not removed:
                    remove_container(name)
                shutil.rmtree(scratch, ignore_errors=True)
        if note:
            result.sandbox.note = join_notes(result.sandbox.note, note)
        return result

    def _error(self, ex: Exercise, seed: int, device: str, started: float, message: str) -> RunResult:
        return grader_error(ex.summary(), f"docker sandbox: {message}",
                            sandbox=SandboxInfo("docker", True, {}, self.image), device=device, seed=seed,
                            duration=time.monotonic() - started)


def run_flags(name: str, *, tmp_mb: int, memory_mb: int, processes: int, ipc: str) -> list[str]:
    """The start of every ``docker run`` of lumen-ex: the container's name and its confinement
    (no network, a read-only root, a private /tmp, memory = memory+swap, a pids and a CPU limit, no
    core files, no capabilities, no-new-privileges); each caller adds what its container needs."""
    memory = f"{memory_mb}m"
    return [
        engine_mod.docker_binary() or "docker", "run", "--name", name, "--pull", "never",
        "--init", "--log-driver", "none", "--hostname", "lumen-sandbox",
        "--network", "none", "--ipc", ipc,
        "--read-only",
        "--tmpfs", f"/tmp:rw,nosuid,nodev,size={tmp_mb}m,mode=1777",
        "--memory", memory, "--memory-swap", memory,
        "--pids-limit", str(processes),
        "--cpus", f"{min(CPUS, float(os.cpu_count() or 1)):g}",
        "--ulimit", "core=0",
        "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
    ]


def select_docker() -> DockerSandbox:
    """The docker backend, or SandboxUnavailable (exit code 3) with the one command that fixes it."""
    avail, state = probe()
    avail.require("docker")
    return DockerSandbox(state.ref)


# -- helpers ------------------------------------------------------------------------------------


def _mount(source: Path, target: str, *, readonly: bool = False) -> str:
    """A --mount value, CSV-quoted so that a comma in a path cannot add options."""
    fields = ["type=bind", f"source={source}", f"target={target}"] + (["readonly"] if readonly else [])
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(fields)
    return out.getvalue()


def _check_readable(workspace: Path, ex: Exercise) -> None:
    """The worker runs as its own uid: the exercise must be readable by other users."""
    folder = workspace / ex.dir
    needs = [(workspace, 0o001), (folder, 0o005), (folder / ex.file, 0o004)]
    for path, bits in needs:
        try:
            mode = path.stat().st_mode
        except OSError:
            continue   # reported by the check itself
        if mode & bits != bits:
            raise UsageError(f"{path} is not readable by other users, and the docker sandbox runs your "
                             "code as its own user", f"Run: chmod o+x {workspace} && chmod -R o+rX {folder}")


def _device_flags(device: str) -> tuple[str, bool]:
    """The --device for the entry point, and whether to pass the GPUs in (``--gpus all``).

    cuda needs a GPU and the NVIDIA container toolkit (else DeviceUnavailable, exit code 3); auto
    passes the GPUs in when both are there and lets the container fall back to the CPU when its
    torch cannot use them, as ``lumen-ex check`` does on the host.
    """
    if device == "cpu" or (device == "auto" and not gpu_present()):
        return "cpu", False
    toolkit = engine_mod.engine().nvidia
    if toolkit:
        return device, True
    if device == "cuda":
        why = "no NVIDIA GPU is visible" if not gpu_present() else "the NVIDIA container toolkit is not installed"
        raise DeviceUnavailable(f"--device cuda with the docker sandbox: {why}",
                                GPU_INSTALL if gpu_present() else "use --device cpu")
    return "cpu", False


def _run_container(argv: list[str], name: str, *, seed: int, limit: float) -> tuple[bool, str]:
    """Run the container until it exits or ``limit`` seconds pass.

    Returns whether docker exited cleanly (then ``--rm`` has removed the container already) and a
    note that explains a missing result document.

    Its output is drained into a small ring buffer (it never decides anything; it only explains a
    missing result document). The seed travels in the environment of the docker command line,
    which passes it into the container's environment, where the worker cannot read it.
    """
    env = dict(os.environ, **{SEED_ENV: str(seed)})
    argv = created(argv, name, env)     # an interrupt from here on finds the container, or none is made
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)
    tail: collections.deque[bytes] = collections.deque(maxlen=16)
    reader = threading.Thread(target=_drain, args=(proc.stdout, tail), daemon=True)
    reader.start()
    try:
        code = reap(proc, limit)
    except BaseException:
        kill_container(name)
        kill(proc)
        raise
    if code is None:
        kill_container(name)
        kill(proc)
        return False, f" (the check ran past its wall-clock limit of {limit:g} s; the container was killed)"
    reader.join(timeout=2)
    if code == 0:
        return True, ""
    said = b"".join(tail).decode(errors="replace").strip().splitlines()
    last = said[-1][:300] if said else ""
    return False, f" (docker exited with code {code}{': ' + last if last else ''})"


def _drain(stream: io.BufferedIOBase, tail: collections.deque[bytes]) -> None:
    try:
        for chunk in iter(lambda: stream.read1(4096), b""):
            tail.append(chunk[-1024:])
    except (OSError, ValueError):
        pass


def kill_container(name: str) -> None:
    engine_mod.docker("kill", name, timeout=30)


def remove_container(name: str, wait: float = 60.0) -> None:
    """Make sure no container called ``name`` is left when this returns.

    ``docker rm -f`` can race with the removal ``--rm`` started after a kill ("removal already in
    progress"), so wait until docker no longer knows the name.
    """
    deadline = time.monotonic() + wait
    while True:
        engine_mod.docker("rm", "-f", name, timeout=60)
        probe = engine_mod.docker("container", "inspect", "--format", "{{.State.Status}}", name, timeout=30)
        if not probe.ok and ("no such" in probe.err.lower() or engine_mod.engine_down(probe)):
            return
        if time.monotonic() > deadline:
            return
        time.sleep(0.2)


CREATE_S = 60.0     # how long ``docker create`` may take (a loaded machine; normally well under a second)


def created(run_argv: list[str], name: str, env: dict[str, str] | None = None) -> list[str]:
    """Create the container of ``run_argv`` (a ``docker run`` command line naming it ``name``) and
    return the command line that starts it attached (``docker start --attach``, with
    ``--interactive`` where ``run_argv`` has it).

    ``docker run`` creates its container on the daemon's side after it started: a ``run`` killed
    early (Ctrl-C while a slot or a worker starts) can have its container made just after
    :func:`remove_container` found no such name, and that container is never removed. ``docker
    create`` is waited for, even through an interrupt, so when this returns or raises the container
    exists (and its remover will find it) or never will. When the creation fails, ``run_argv`` is
    returned: it fails the same way and says why where the caller reads the container's output.
    ``env``: the docker command line's environment (where ``--env NAME`` takes its value from)."""
    assert run_argv[1] == "run", run_argv
    proc = subprocess.Popen([run_argv[0], "create", *run_argv[2:]], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    try:
        code = reap(proc, CREATE_S)
    except BaseException:
        reap(proc, CREATE_S)         # an interrupt: let the request end, so the container can be found
        raise
    if code is None:
        kill(proc)
        remove_container(name)
        return run_argv
    if code != 0:
        return run_argv
    return [run_argv[0], "start", "--attach", *(["--interactive"] if "--interactive" in run_argv else []), name]
