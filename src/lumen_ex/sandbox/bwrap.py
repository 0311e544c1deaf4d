"""The bubblewrap sandbox: the worker in fresh namespaces, seeing only what it needs, read-only.

What the worker gets: no network (its own empty network namespace), its own pid namespace, an
unprivileged uid with no capabilities and no_new_privs, a clean environment, the Python runtime and
the learner's workspace read-only, a small private /tmp, and none of the harness's descriptors.
The lumen-ex package itself (hidden suites, reference) is masked with an empty tmpfs wherever it
lies inside a mounted folder. Resource limits come from src/lumen_ex/sandbox/cgroups.py: bwrap sets none.
The flags avoid three pitfalls: root keeps capabilities without a user namespace, inherited fds
leak in, and mount order matters (docs/security.md, the host rows).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Collection
from pathlib import Path

from lumen_ex.core.packs import pack_roots
from lumen_ex.sandbox.base import (
    WORKER_ENV,
    Availability,
    Command,
    Launcher,
    Runtime,
    WorkerSpec,
    inside_dir,
    python_runtime,
    worker_argv,
    zygote_argv,
)

SANDBOX_UID = 65534
INSTALL = "Install it: sudo apt-get install -y bubblewrap   (Fedora: sudo dnf install bubblewrap)"


class BwrapLauncher(Launcher):
    name = "bwrap"
    isolated = True

    @classmethod
    def availability(cls) -> Availability:
        return _probe()

    def scratch(self, spec: WorkerSpec) -> dict[str, str]:
        return {"tmp": f"private tmpfs ({spec.limits.tmp_mb} MiB); everything else read-only"}

    def command(self, spec: WorkerSpec, fds: tuple[int, int]) -> Command:
        runtime = python_runtime()
        worker = worker_argv(runtime.python, "/lumen", fds, list(runtime.extra_sites), warm=spec.warm)
        return self._command(spec, runtime, worker, module_path(spec))

    def zygote_command(self, spec: WorkerSpec, control_fd: int) -> Command:
        """A zygote for workers like ``spec`` (src/lumen_ex/sandbox/zygote.py): the same sandbox as a
        worker's, but with no workspace (each forked worker gets its own copy), a /dev of plain
        device nodes, and CAP_SYS_ADMIN in the sandbox's user namespace, which the zygote needs to
        give each worker namespaces and mounts of its own and which no worker keeps."""
        runtime = python_runtime()
        zygote = zygote_argv(runtime.python, "/lumen", control_fd, list(runtime.extra_sites))
        return self._command(spec, runtime, zygote, "", zygote=True)

    def _command(self, spec: WorkerSpec, runtime: Runtime, program: list[str], module_path: str,
                 zygote: bool = False) -> Command:
        binds = _Binds(staged=os.geteuid() == 0)
        try:
            args = self._bwrap_args(spec, runtime, binds, program, zygote)
        except BaseException:
            binds.cleanup()
            raise
        return Command(binds.wrap(args), module_path, cleanup=binds.cleanup)

    def _bwrap_args(self, spec: WorkerSpec, runtime: Runtime, binds: _Binds, program: list[str], zygote: bool) -> list[str]:
        args = [
            "bwrap",
            "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--hostname", "lumen-sandbox", "--clearenv",
        ]
        # The zygote's workers may not make user namespaces either: a seccomp filter of their own
        # forbids it (inside/confine.py), as --disable-userns would also forbid the zygote's unshare.
        args += ["--cap-add", "CAP_SYS_ADMIN"] if zygote else ["--disable-userns"]
        for key, value in WORKER_ENV.items():
            args += ["--setenv", key, value]
        args += ["--ro-bind", "/usr", "/usr"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
        args += ["--proc", "/proc"]
        # bwrap's --dev mounts a devpts, for which it nests a second user namespace, and the mounts
        # a forked worker inherits from there are locked (it could not mount its own /proc).
        args += _plain_dev() if zygote else ["--dev", "/dev"]
        # Kernel settings are read-only even where the worker's uid could write them (second line:
        # the worker is never host root, see _Binds).
        args += ["--ro-bind", "/proc/sys", "/proc/sys"]
        # /tmp before the runtime: a tmpfs mounted later would hide a runtime that lives under /tmp.
        args += ["--size", str(spec.limits.tmp_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]
        for d in runtime.mounts:
            if not Path(d).is_relative_to("/usr"):
                args += ["--ro-bind", binds.source(d), str(d)]
        for hidden in _grader_dirs(runtime.mounts):
            args += ["--tmpfs", hidden]
        for hook in _editable_hooks(runtime.mounts):
            args += ["--ro-bind", "/dev/null", hook]   # an editable install's finder names our paths
        if spec.device == "cuda":
            args += _cuda_args()
        args += ["--ro-bind", binds.source(inside_dir()), "/lumen"]   # the worker and wire files alone
        if zygote:
            args += ["--dir", "/workspace"]    # each forked worker mounts its own copy here
        else:
            args += ["--ro-bind", binds.source(spec.workspace.resolve()), "/workspace"]
        args += ["--remount-ro", "/", "--chdir", "/tmp", "--"]   # else bwrap's root tmpfs (/, /etc, ...) is writable
        return args + program


def module_path(spec: WorkerSpec) -> str:
    """The learner's module folder as a bwrap worker sees it: under /workspace, where its workspace
    is bound (or, for a worker forked from a zygote, copied)."""
    inside = "/workspace/" + str(spec.module_dir.resolve().relative_to(spec.workspace.resolve()))
    return inside.rstrip("/.")


def _plain_dev() -> list[str]:
    """A /dev of the usual device nodes and links, without bwrap's devpts (see _bwrap_args)."""
    args = ["--tmpfs", "/dev"]
    for node in ("null", "zero", "full", "random", "urandom", "tty"):
        args += ["--dev-bind", f"/dev/{node}", f"/dev/{node}"]
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        args += ["--symlink", target, f"/dev/{name}"]
    return args + ["--dir", "/dev/shm"]


class _Binds:
    """Start bwrap as an unprivileged host user when we are root, with its mounts staged.

    bwrap started by root maps the sandbox's uid to host uid 0 (its user namespace maps the
    sandbox uid onto the uid that started it), so root-owned files that are owner-writable, such
    as kernel settings under /proc/sys, would stay writable from learner code. So as root we start
    bwrap as ``SANDBOX_UID`` (nobody): its sandbox uid is then host uid 65534 too. That user may
    not be able to reach the folders bwrap must mount (a runtime under /root, a workspace under a
    0700 folder), so each source is first bind-mounted, as root, onto an empty folder of a private
    stage (made with mkdtemp, 0755) inside a mount namespace of the launch alone (``unshare
    --mount``): the host never sees those mounts, and they vanish with the worker. Then ``setpriv``
    drops to the unprivileged uid (no groups, no capabilities) and execs bwrap, in the same process.

    Workers of different students share that uid, but each has its own pid, IPC, network and mount
    namespaces and a private /tmp, so none can see, signal or reach another's processes or files.
    """

    MOUNT_SCRIPT = 'while [ "$1" != "--" ]; do mount --bind "$1" "$2"; shift 2; done; shift; exec "$@"'

    def __init__(self, staged: bool) -> None:
        self.staged = staged
        self.pairs: list[tuple[str, str]] = []
        # the pid in the name lets the next run remove a stage left by a kill -9 (src/lumen_ex/sandbox/leftovers.py)
        self.stage = tempfile.mkdtemp(prefix=f"lumen-ex-stage-{os.getpid()}-") if staged else ""
        if staged:
            os.chmod(self.stage, 0o755)

    def source(self, path: str | os.PathLike[str]) -> str:
        """The path bwrap binds for ``path``: itself, or its staged copy (a bind mount) as root."""
        path = str(path)
        if not self.staged:
            return path
        target = os.path.join(self.stage, str(len(self.pairs)))
        if os.path.isdir(path):
            os.mkdir(target, 0o755)
        else:
            with open(target, "x"):
                pass
        self.pairs.append((path, target))
        return target

    def wrap(self, bwrap_args: list[str]) -> list[str]:
        if not self.staged:
            return bwrap_args
        mounts = [p for pair in self.pairs for p in pair]
        return ["unshare", "--mount", "--propagation", "private", "--",
                "sh", "-ec", self.MOUNT_SCRIPT, "sh", *mounts, "--",
                "setpriv", "--reuid", str(SANDBOX_UID), "--regid", str(SANDBOX_UID), "--clear-groups",
                "--inh-caps=-all", "--", *bwrap_args]

    def cleanup(self) -> None:
        """Remove the (empty, on the host) stage; idempotent."""
        if self.stage:
            shutil.rmtree(self.stage, ignore_errors=True)
            self.stage = ""


def _grader_dirs(mounts: Collection[Path]) -> list[str]:
    """The installed lumen-ex package's folder (hidden suites, reference, harness) and every exercise
    pack in use outside it (an instructor's suites, references and corpora: LUMEN_EX_PATH,
    --exercises), when a mount would expose them: each is masked whole. One folder per tree, so no
    list of subpackages or exercise files can forget one."""
    package = package_dir()
    folders = [package, *(p for p in pack_roots() if not p.is_relative_to(package))]
    return [str(f) for f in folders if any(f.is_relative_to(m) for m in mounts)]


def _editable_hooks(mounts: Collection[Path]) -> list[str]:
    """The .pth and finder files an editable install of lumen-ex leaves in site-packages."""
    import site

    hooks = []
    for folder in {*site.getsitepackages()}:
        if any(Path(folder).resolve().is_relative_to(m) for m in mounts):
            hooks += [str(p) for p in sorted(Path(folder).glob("__editable__*lumen_ex*"))]
    return hooks


def package_dir() -> Path:
    """The folder of the lumen_ex package this process imports (src/lumen_ex in a checkout)."""
    return Path(__file__).resolve().parents[1]


def _cuda_args() -> list[str]:
    """GPU passthrough: device nodes need --dev-bind, and cuInit needs /sys."""
    args = []
    for node in sorted(glob.glob("/dev/nvidia*")):
        if not os.path.isdir(node):
            args += ["--dev-bind", node, node]
    args += ["--ro-bind", "/sys", "/sys"]
    return args


_PROBE_LOCK = threading.Lock()
_PROBED: list[Availability] = []    # the probe's answer, once known (one per process)


def _probe() -> Availability:
    """Whether bwrap can make a sandbox here, found once per process (a thread that asks while
    :func:`probe_soon`'s thread is probing waits for its answer)."""
    with _PROBE_LOCK:
        if not _PROBED:
            _PROBED.append(_run_probe())
        return _PROBED[0]


def probe_soon() -> None:
    """Start the probe in a background thread: ``lumen-ex check`` calls this first, so that the probe's
    sandbox start (about 50 ms) overlaps with the command's own imports instead of following them."""
    threading.Thread(target=_probe, daemon=True, name="lumen-ex-bwrap-probe").start()


def _run_probe() -> Availability:
    if shutil.which("bwrap") is None:
        return Availability(False, "bubblewrap (bwrap) is not installed", INSTALL)
    if os.geteuid() == 0 and not all(shutil.which(t) for t in ("unshare", "setpriv", "mount")):
        return Availability(False, "as root, the bwrap sandbox needs unshare, setpriv and mount (util-linux)",
                            "Install them: sudo apt-get install -y util-linux mount")
    try:
        binds = _Binds(staged=os.geteuid() == 0)   # the same way real workers start
        try:
            subprocess.run(
                binds.wrap(["bwrap", "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID),
                            "--disable-userns", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--", "true"]),
                check=True, capture_output=True, timeout=20,
            )
        finally:
            binds.cleanup()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        reason = detail.decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
        return Availability(False, f"bwrap cannot create a sandbox here: {reason[0]}",
                            "Enable unprivileged user namespaces: sudo sysctl -w kernel.unprivileged_userns_clone=1")
    return Availability(True)
