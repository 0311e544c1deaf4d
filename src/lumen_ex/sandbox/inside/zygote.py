"""The zygote: one warm process per grading slot, from which each submission's worker is forked.

    python -I -B -u zygote.py CONTROL [EXTRA_SITE ...]

CONTROL is a descriptor number (the zygote of a bwrap sandbox, started by
src/lumen_ex/sandbox/zygote.py) or the absolute path of a unix socket the harness listens on (the
zygote of a grading slot's container, src/lumen_ex/sandbox/docker_slot.py, which cannot inherit one).
It imports torch
and its meta kernels once (worker.py ``prepare``) and never imports a learner's code. For each
``{"op": "fork"}`` message on CONTROL_FD (a SOCK_SEQPACKET socket carrying four descriptors: the
worker's request and reply pipe ends, its output pipe, and a socket of its own to the harness) it
makes one worker in three forks:

1. a first child enters fresh mount, pid, IPC, network and UTS namespaces and forks again (in a
   container, where the zygote holds no capability, it enters a user namespace of its own first,
   mapping only its own uid and gid, and so holds CAP_SYS_ADMIN there, as bwrap's zygote does in
   bwrap's);
2. that child is pid 1 of the new pid namespace (the worker's init). It tells the harness it
   exists (one byte on its socket, which the harness reads with SO_PASSCRED: the kernel gives it
   this process's pid as the host sees it), waits while the harness puts it in a fresh cgroup,
   then reads the setup (limits and the workspace's files) and builds the worker's file system:
   its own /proc, an empty /tmp and /dev/shm, /dev read-only, and the workspace on a tmpfs of its
   own, written from the files sent and then made read-only. It says so (one byte: a sandbox that
   could not be built is the grader's failure, and the harness starts a fresh worker instead of
   charging it to the submission), forks the worker and waits for
   it; when it exits, the init reports its wait status and exits, and the kernel kills everything
   else left in that pid namespace;
3. the worker (pid 2, as in a fresh bwrap sandbox) sets its resource limits, drops every
   capability, installs a seccomp filter (confine.py) and serves the harness exactly as worker.py
   does.

No learner's code ever runs in the zygote or the init: a worker cannot see either (another pid
namespace), signal them (they are outside its namespace, or its init, which ignores signals from
inside), trace them (both are not dumpable and keep capabilities the worker lacks), nor reach a
file another worker can see (every writable folder is its own).
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import signal
import socket
import struct
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SETUP_HEADER_CAP = 1 << 20      # bytes of a setup's JSON header
SETUP_DATA_CAP = 64 << 20       # bytes of the files that follow it
LENGTH = struct.Struct(">I")
SCRATCH = ("/tmp", "/dev/shm")  # a worker's only writable folders (each its own tmpfs)
NAMESPACES = 0                  # set in main(): confine.CLONE_NEW{NS,PID,IPC,NET,UTS}
RUNTIME_KEPT: list[str] = []    # set in main(): the interpreter's folders a worker's scratch tmpfs would hide
TYPE_CHECKING = False   # typing.TYPE_CHECKING, without importing typing here (as in worker.py)
if TYPE_CHECKING:
    import types
    from typing import Any


def _inside_module(name: str) -> types.ModuleType:
    """A file of this folder as a module, by its path (nothing is put on sys.path)."""
    spec = importlib.util.spec_from_file_location(f"lumen_{name}", os.path.join(HERE, f"{name}.py"))
    assert spec is not None and spec.loader is not None   # always, for a path ending in .py
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from . import confine
else:
    confine = _inside_module("confine")


def main(argv: list[str]) -> int:
    global NAMESPACES, RUNTIME_KEPT
    control = _control(argv[1])
    worker = _inside_module("worker")
    worker.prepare(argv[2:], warm=True)
    RUNTIME_KEPT = _runtime_under_scratch()     # once: sys.path is final now, and the same for every fork
    NAMESPACES = (confine.CLONE_NEWNS | confine.CLONE_NEWPID | confine.CLONE_NEWIPC | confine.CLONE_NEWNET
                  | confine.CLONE_NEWUTS | (0 if _has_sys_admin() else confine.CLONE_NEWUSER))
    confine.prctl(confine.PR_SET_DUMPABLE, 0)    # no process of the same uid may trace it or read its memory
    # Everything imported so far is permanent: the garbage collector of a forked worker then never
    # walks (and so never writes to, copying their pages) the objects it shares with the zygote.
    gc.collect()
    gc.freeze()
    control.send(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 4096, 8)
        except OSError:
            return 0
        _reap()
        if not message:
            return 0        # the harness closed its end
        try:
            request = json.loads(message)
        except ValueError:
            request = {}
        if isinstance(request, dict) and request.get("op") == "fork" and len(fds) == 4:
            if os.fork() == 0:
                try:
                    control.close()
                    _first_child(worker, fds[0], fds[1], fds[2], fds[3], argv[2:])   # (four: checked above)
                except BaseException:
                    traceback.print_exc()     # into the zygote's log (the harness shows its last line)
                finally:
                    os._exit(70)    # never back into the zygote's loop
        for fd in fds:
            os.close(fd)


def _control(where: str) -> socket.socket:
    """The socket fork requests arrive on: inherited (a descriptor number) or connected to (a path)."""
    if not where.startswith("/"):
        return socket.socket(fileno=int(where))
    control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    control.connect(where)
    return control


def _has_sys_admin() -> bool:
    """Whether this process may make namespaces and mounts without a user namespace of its own."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> 21 & 1)    # CAP_SYS_ADMIN is bit 21
    return False


def _map_own_ids(uid: int, gid: int) -> None:
    """In a user namespace just made: map our own uid and gid as they were outside (the only ones
    an unprivileged process may map) and forbid setgroups, which an unprivileged gid map requires."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _reap() -> None:
    """Collect the first children that have exited (each exits as soon as it has forked)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _first_child(worker: types.ModuleType, request_fd: int, reply_fd: int, output_fd: int, channel_fd: int,
                 sites: list[str]) -> None:
    uid, gid = os.getuid(), os.getgid()
    confine.unshare(NAMESPACES)
    if NAMESPACES & confine.CLONE_NEWUSER:
        # A process that is not dumpable has its /proc/self files owned by the host's root, so it
        # could not write its maps: dumpable for those three writes, which no worker can see (it
        # does not exist yet; every other process of this uid here is ours).
        confine.prctl(confine.PR_SET_DUMPABLE, 1)
        _map_own_ids(uid, gid)
        confine.prctl(confine.PR_SET_DUMPABLE, 0)
    if os.fork() != 0:
        os._exit(0)     # its child, pid 1 of the new namespace, is reparented to the sandbox's init
    _init(worker, request_fd, reply_fd, output_fd, socket.socket(fileno=channel_fd), sites)


def _init(worker: types.ModuleType, request_fd: int, reply_fd: int, output_fd: int, channel: socket.socket,
          sites: list[str]) -> None:
    os.setsid()                                     # its own process group: the harness kills it whole
    signal.signal(signal.SIGINT, signal.SIG_DFL)    # an init ignores every signal it has no handler for
    channel.sendall(b"p")                           # the harness reads this one with our pid
    setup = _read_setup(channel)
    _build_file_system(setup)
    channel.sendall(b"r")                           # its sandbox is built: the harness may rely on it
    child = os.fork()
    if child == 0:
        try:
            _worker(worker, request_fd, reply_fd, output_fd, channel, setup, sites)
        except BaseException:
            traceback.print_exc()     # as a fresh worker's would be: into its output
        finally:
            os._exit(70)
    for fd in (request_fd, reply_fd, output_fd):
        os.close(fd)
    status = _wait_for(child)
    try:
        channel.sendall(b"x" + struct.pack(">i", status))
    except OSError:
        pass
    os._exit(0)


def _wait_for(child: int) -> int:
    """Reap every process that ends (an init's duty) until ``child`` does; its wait status."""
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        if pid == child:
            return status


def _read_exactly(channel: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = channel.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the harness closed the setup channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_setup(channel: socket.socket) -> dict[str, Any]:
    (size,) = LENGTH.unpack(_read_exactly(channel, LENGTH.size))
    if size > SETUP_HEADER_CAP:
        raise ValueError("setup header too large")
    setup: dict[str, Any] = json.loads(_read_exactly(channel, size))
    total = sum(int(e.get("size", 0)) for e in setup["entries"] if e["kind"] == "file")
    if total > SETUP_DATA_CAP:
        raise ValueError("workspace too large")
    setup["data"] = _read_exactly(channel, total)
    return setup


def _build_file_system(setup: dict[str, Any]) -> None:
    c = confine
    c.mount(None, "/", None, c.MS_REC | c.MS_PRIVATE)        # nothing below propagates anywhere
    c.mount("proc", "/proc", "proc", c.MS_NOSUID | c.MS_NODEV | c.MS_NOEXEC)   # this namespace's processes
    for covered in ("sys", "sysrq-trigger", "irq", "bus"):   # what bwrap's --proc makes read-only too
        if os.path.exists(f"/proc/{covered}"):
            c.bind_read_only(f"/proc/{covered}")
    # The interpreter's own folders that live under /tmp or /dev/shm (a checkout under /tmp): the
    # empty scratch tmpfs below would hide them, and every module not imported yet with them. Each is
    # bound aside (on a staging tmpfs at /workspace, which the workspace's own tmpfs covers next),
    # then moved back onto the same path in the new /tmp; the loop at the end makes it read-only.
    kept = RUNTIME_KEPT
    if kept:
        c.mount("tmpfs", "/workspace", "tmpfs", c.MS_NOSUID | c.MS_NODEV, "size=64k,mode=0700")
        for i, path in enumerate(kept):
            os.mkdir(f"/workspace/{i}")
            c.mount(path, f"/workspace/{i}", None, c.MS_BIND | c.MS_REC)
    scratch = f"size={int(setup['tmp_bytes'])},mode=1777"
    c.mount("tmpfs", "/tmp", "tmpfs", c.MS_NOSUID | c.MS_NODEV, scratch)
    c.mount("tmpfs", "/dev/shm", "tmpfs", c.MS_NOSUID | c.MS_NODEV, scratch)
    for i, path in enumerate(kept):
        os.makedirs(path, 0o755)
        c.mount(f"/workspace/{i}", path, None, c.MS_MOVE)
    c.mount("tmpfs", "/workspace", "tmpfs", c.MS_NOSUID | c.MS_NODEV,
            f"size={len(setup['data']) + (1 << 20)},mode=0755")
    _write_workspace(setup["entries"], setup["data"])
    c.mount(None, "/workspace", None, c.MS_REMOUNT | c.MS_RDONLY | c.MS_NOSUID | c.MS_NODEV)
    # Whatever else the sandbox came with that is writable (/dev, a container's /dev/mqueue and
    # cgroup tmpfs, the folder of a slot's control socket) is shared by every worker forked here:
    # read-only, each mount keeping its own flags (a container's device nodes live on its /dev
    # tmpfs itself, so /dev must not become nodev).
    for point, options in c.mounts():
        if "rw" in options and point not in SCRATCH and point.split("/")[1] != "proc":
            c.remount_read_only(point, options)


def _runtime_under_scratch() -> list[str]:
    """The outermost of the interpreter's folders (its prefixes and import path) under /tmp or
    /dev/shm, which a worker's empty scratch folders would otherwise hide."""
    found: list[str] = []
    for path in sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path) if p}):
        if (os.path.isdir(path) and any(path.startswith(top + "/") for top in SCRATCH)
                and not any(path.startswith(kept + "/") for kept in found)):
            found.append(path)
    return found


def _write_workspace(entries: list[dict[str, Any]], data: bytes) -> None:
    """The learner's workspace as the harness read it: folders, files and links, in that order."""
    offset = 0
    for entry in entries:
        relative = os.path.normpath(str(entry["path"]))
        if relative.startswith(("/", "..")):
            raise ValueError(f"a path outside the workspace: {relative!r}")
        path = os.path.join("/workspace", relative)
        if entry["kind"] == "dir":
            os.makedirs(path, 0o755, exist_ok=True)
        elif entry["kind"] == "link":
            os.symlink(str(entry["target"]), path)
        else:
            size = int(entry["size"])
            with open(path, "xb") as f:
                f.write(data[offset:offset + size])
            offset += size
            os.chmod(path, 0o755 if int(entry.get("mode", 0)) & 0o111 else 0o644)


def _worker(worker: types.ModuleType, request_fd: int, reply_fd: int, output_fd: int, channel: socket.socket,
            setup: dict[str, Any], sites: list[str]) -> None:
    import resource

    channel.close()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    keep = {0, 1, 2, request_fd, reply_fd}
    for fd in [int(n) for n in os.listdir("/proc/self/fd")]:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    os.chdir("/tmp")
    signal.signal(signal.SIGINT, signal.default_int_handler)   # as in any fresh Python
    for name, soft, hard in setup["rlimits"]:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    confine.prctl(confine.PR_SET_DUMPABLE, 1)     # like any fresh process (the zygote's are not)
    confine.drop_capabilities()
    confine.forbid_namespaces_and_keys()
    # What a worker started on its own would see as its program (base.py worker_argv).
    sys.argv = [os.path.join(HERE, "worker.py"), "fds", str(request_fd), str(reply_fd), "+warm", *sites]
    worker.__name__ = "__main__"
    sys.modules["__main__"] = worker
    code = worker.serve(request_fd, reply_fd)
    _exit_like_python(code)


def _exit_like_python(code: int) -> None:
    """End as an interpreter does (threads joined, atexit handlers run, streams flushed), without
    unwinding into the zygote's frames."""
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]  # CPython's own, not in the type stubs
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001  the learner may have replaced them
                pass
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
