"""System calls the zygote (zygote.py) needs to give each forked worker a sandbox of its own.

Python has no unshare() before 3.12, no mount(), capset() or seccomp: these are thin ctypes calls
into the C library, each raising OSError when the kernel refuses. Only zygote.py uses them, inside
the slot's bwrap sandbox (src/lumen_ex/sandbox/zygote.py starts it), before any learner code runs:

- :func:`unshare`: fresh mount, pid, IPC, network and UTS namespaces for one submission;
- :func:`mount`: its own /proc, /tmp, /dev/shm and /workspace, and read-only bind remounts;
- :func:`drop_capabilities`: the worker keeps no capability at all (bwrap gave the zygote
  CAP_SYS_ADMIN in the sandbox's own user namespace, for the mounts above);
- :func:`forbid_namespaces_and_keys`: a seccomp filter. The learner's code may not create user
  namespaces (bwrap's --disable-userns would also stop the zygote's own unshare) nor use the
  kernel keyrings (one keyring per uid and user namespace: workers of one zygote would share it).
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import struct

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
# The flags /proc/self/mountinfo names, which a remount must repeat (a mount inherited from another
# user namespace keeps them locked: dropping one is refused).
MOUNT_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                 "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}

PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SECCOMP_MODE_FILTER = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def c(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    _check(_libc.mount(c(source), c(target), c(fstype), ctypes.c_ulong(flags), c(data)), f"mount {target}")


def bind_read_only(path: str) -> None:
    """Make ``path`` read-only in this mount namespace alone (a bind remount: the file system
    itself, which other namespaces may share, is left as it is)."""
    mount(path, path, None, MS_BIND | MS_REC)
    mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def mounts() -> list[tuple[str, list[str]]]:
    """This mount namespace's mounts, in order: (mount point, options), from /proc/self/mountinfo."""
    with open("/proc/self/mountinfo") as f:
        lines = f.read().splitlines()
    out = []
    for line in lines:
        fields = line.split()
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])   # \040 is a space
        out.append((point, fields[5].split(",")))
    return out


def remount_read_only(point: str, options: list[str]) -> None:
    """Make the mount at ``point`` read-only, keeping every flag it has."""
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    for option in options:
        flags |= MOUNT_OPTIONS.get(option, 0)
    mount(None, point, None, flags)


def prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)), f"prctl {option}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Empty the effective, permitted, inheritable and ambient sets of this thread."""
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(0x20080522, 0)     # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


# seccomp: struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}, on x86_64 only (the zygote is not
# used elsewhere: src/lumen_ex/sandbox/zygote.py ``supported``).
AUDIT_ARCH_X86_64 = 0xC000003E
SYS_CLONE, SYS_UNSHARE, SYS_CLONE3 = 56, 272, 435
SYS_ADD_KEY, SYS_REQUEST_KEY, SYS_KEYCTL = 248, 249, 250
X32_BIT = 0x40000000
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000
_EPERM, _ENOSYS = 0x00050000 | 1, 0x00050000 | 38


def filter_supported() -> bool:
    return platform.machine() == "x86_64"


def _program() -> list[tuple[int, int, int, int]]:
    def jump_to(label: str, at: int) -> int:
        return labels[label] - at - 1

    # (code, jt, jf, k), with jumps to the return instructions at the end filled in below
    body: list[tuple[int, int | str, int | str, int]] = [
        (_LD_W_ABS, 0, 0, 4),                     # seccomp_data.arch
        (_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        (_RET_K, 0, 0, _KILL),
        (_LD_W_ABS, 0, 0, 0),                     # seccomp_data.nr
        (_JGE_K, "eperm", 0, X32_BIT),            # the x32 system calls: refused
        (_JEQ_K, "eperm", 0, SYS_UNSHARE),
        (_JEQ_K, "enosys", 0, SYS_CLONE3),        # glibc then falls back to clone()
        (_JEQ_K, "eperm", 0, SYS_ADD_KEY),
        (_JEQ_K, "eperm", 0, SYS_REQUEST_KEY),
        (_JEQ_K, "eperm", 0, SYS_KEYCTL),
        (_JEQ_K, 0, "allow", SYS_CLONE),
        (_LD_W_ABS, 0, 0, 16),                    # clone's flags (args[0], low word)
        (_JSET_K, "eperm", "allow", CLONE_NEWUSER),
    ]
    labels = {"allow": len(body), "eperm": len(body) + 1, "enosys": len(body) + 2}
    out = []
    for at, (code, jt, jf, k) in enumerate(body):
        out.append((code, jump_to(jt, at) if isinstance(jt, str) else jt,
                    jump_to(jf, at) if isinstance(jf, str) else jf, k))
    return out + [(_RET_K, 0, 0, _ALLOW), (_RET_K, 0, 0, _EPERM), (_RET_K, 0, 0, _ENOSYS)]


def forbid_namespaces_and_keys() -> None:
    """Install the seccomp filter (with no_new_privs, which it requires) on this thread and every
    thread and process it starts from now on."""
    program = _program()
    raw = b"".join(struct.pack("HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = _Prog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    _check(_libc.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER),
                       ctypes.c_void_p(ctypes.addressof(prog)), ctypes.c_ulong(0), ctypes.c_ulong(0)),
           "seccomp")
