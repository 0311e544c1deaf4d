"""Resource limits for a sandboxed worker: a cgroup when we may make one, rlimits always.

bubblewrap sets no limits of its own (https://github.com/containers/bubblewrap/issues/233), and rlimits alone are weak:
RLIMIT_NPROC does nothing for root and RLIMIT_AS is unusable with CUDA. So:

- processes and memory: a per-worker cgroup (v1 ``pids`` + ``memory``, or v2) created under our own
  cgroup when it is writable (root, or a delegated subtree); otherwise RLIMIT_NPROC (only for a
  non-root user) and RLIMIT_AS (only on the CPU);
- CPU time, core dumps, file size, open files: rlimits, which hold for everyone.

``Enforcement.describe()`` says which mechanism holds each limit; it is shown by ``doctor`` and
stored in every result record, and tests/sandbox/test_sandbox.py proves each one with a real attack.
"""

from __future__ import annotations

import itertools
import os
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lumen_ex.core.limits import Limits
from lumen_ex.sandbox.processes import signal_process

CGROUP_ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()


class Cgroup:
    """A throwaway cgroup holding one worker and everything it forks."""

    def __init__(self, dirs: dict[str, Path], version: int):
        self.dirs = dirs          # controller -> directory (v2: {"unified": dir})
        self.version = version

    # -- creation ---------------------------------------------------------------------------

    @classmethod
    def create(cls, limits: Limits) -> Cgroup | None:
        """Make a cgroup with memory and pids limits, or return None where we may not."""
        name = f"lumen-ex-{os.getpid()}-{next(_counter)}"
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            return cls._create_v2(name, limits)
        return cls._create_v1(name, limits)

    @classmethod
    def _create_v1(cls, name: str, limits: Limits) -> Cgroup | None:
        dirs: dict[str, Path] = {}
        try:
            for ctrl in ("pids", "memory"):
                parent = _parent(ctrl)
                if not parent.is_dir():
                    raise OSError(f"no {ctrl} controller")
                _sweep_stale(parent)
                path = parent / name
                path.mkdir()
                dirs[ctrl] = path
            _write(dirs["pids"] / "pids.max", limits.processes)
            mem = limits.memory_mb * 1024 * 1024
            _write(dirs["memory"] / "memory.limit_in_bytes", mem)
            swap = dirs["memory"] / "memory.memsw.limit_in_bytes"
            if swap.exists():
                _write(swap, mem)   # memory + swap = memory: no swap at all
            return cls(dirs, 1)
        except OSError:
            cls(dirs, 1).remove()
            return None

    @classmethod
    def _create_v2(cls, name: str, limits: Limits) -> Cgroup | None:
        parent = _parent("")
        path = parent / name
        _sweep_stale(parent)
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            missing = [c for c in ("memory", "pids") if c not in enabled]
            if missing:
                _write(parent / "cgroup.subtree_control", " ".join("+" + c for c in missing))
            path.mkdir()
            _write(path / "pids.max", limits.processes)
            _write(path / "memory.max", limits.memory_mb * 1024 * 1024)
            if (path / "memory.swap.max").exists():
                _write(path / "memory.swap.max", 0)
            return cls({"unified": path}, 2)
        except OSError:
            if path.exists():
                cls({"unified": path}, 2).remove()
            return None

    # -- use --------------------------------------------------------------------------------

    def add_self(self) -> None:
        """Move the calling process into this cgroup (run in the child before exec)."""
        self.add(os.getpid())

    def add(self, pid: int) -> None:
        """Move process ``pid`` into this cgroup (what it forks from then on is in it too)."""
        for path in self.dirs.values():
            with open(path / "cgroup.procs", "w") as f:
                f.write(str(pid))

    def pids(self) -> list[int]:
        path = self.dirs.get("pids") or self.dirs.get("unified")
        if path is None:    # neither controller: no process is known to be here
            return []
        try:
            return [int(p) for p in (path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError, TypeError):
            return []

    def oom_killed(self) -> bool:
        """Whether the kernel killed something here for using too much memory."""
        try:
            if self.version == 1:
                stats = (self.dirs["memory"] / "memory.oom_control").read_text()
                if "oom_kill " in stats:
                    return int(stats.split("oom_kill ")[1].split()[0]) > 0
                return int((self.dirs["memory"] / "memory.failcnt").read_text()) > 0
            events = (self.dirs["unified"] / "memory.events").read_text()
            return int(events.split("oom_kill ")[1].split()[0]) > 0
        except (OSError, IndexError, ValueError, KeyError):
            return False

    # -- memory use, read by the harness (the worker, uid 65534 with no /sys, cannot touch these) --

    def memory_usage(self) -> int | None:
        """Bytes charged to this cgroup now (v1 memory.usage_in_bytes, v2 memory.current)."""
        name = ("memory", "memory.usage_in_bytes") if self.version == 1 else ("unified", "memory.current")
        try:
            return int((self.dirs[name[0]] / name[1]).read_text())
        except (OSError, ValueError, KeyError):
            return None

    def peak_window(self) -> PeakWindow | None:
        """Start measuring this cgroup's peak memory from now on (None: no memory controller)."""
        if self.version == 1 and "memory" in self.dirs:
            return PeakWindow.v1(self.dirs["memory"])
        if self.version == 2:
            return PeakWindow.v2(self.dirs["unified"])
        return None

    def kill_all(self, wait: float = 5.0) -> None:
        """SIGKILL every process in the cgroup until none is left (forks race with us)."""
        kill_file = self.dirs.get("unified", Path("/nonexistent")) / "cgroup.kill"
        if kill_file.exists():
            try:
                _write(kill_file, 1)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                # gone, or unkillable by us (a setuid program in the unisolated mode): either way
                # the clean-up of the rest goes on
                signal_process(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        for path in self.dirs.values():
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


class PeakWindow:
    """The peak memory of one cgroup (every process in it, forks included) over a window.

    v1: writing 0 to memory.max_usage_in_bytes resets the peak to the current usage, for everyone.
    v2: since Linux 6.12, writing to memory.peak resets it for reads through that same open file;
    on older kernels memory.peak holds the peak since the cgroup was made, so a window's peak is
    known only when the window raised it (else only an upper bound, ``exact`` False), and before
    5.19 there is no memory.peak at all.
    """

    def __init__(self, how: str, read: Callable[[], int], close: Callable[[], None] = lambda: None, *, exact: bool,
                 before: int | None = None) -> None:
        self.how, self._read, self._close, self.exact, self._before = how, read, close, exact, before

    @classmethod
    def v1(cls, path: Path) -> PeakWindow | None:
        peak = path / "memory.max_usage_in_bytes"
        try:
            _write(peak, 0)
        except OSError:
            return None
        return cls("cgroup v1 memory.max_usage_in_bytes (reset by the grader before the call)",
                   lambda: int(peak.read_text()), exact=True)

    @classmethod
    def v2(cls, path: Path) -> PeakWindow | None:
        try:
            fd = os.open(path / "memory.peak", os.O_RDWR)
        except OSError:
            return None

        def read() -> int:
            return int(os.pread(fd, 64, 0).split()[0])

        def close() -> None:
            os.close(fd)

        try:
            os.write(fd, b"reset")      # Linux >= 6.12: a peak of this file's own from now on
        except OSError:
            try:
                before = read()
            except (OSError, ValueError, IndexError):
                close()
                return None
            return cls("cgroup v2 memory.peak (the cgroup's lifetime peak: an upper bound unless the call raised it)",
                       read, close, exact=False, before=before)
        return cls("cgroup v2 memory.peak (reset per open file by the grader before the call)", read, close, exact=True)

    def finish(self) -> tuple[int | None, bool]:
        """(the peak over the window in bytes, whether it is exact rather than an upper bound)."""
        try:
            peak = self._read()
        except (OSError, ValueError, IndexError):
            return None, False
        finally:
            self._close()
        # A lifetime peak that the window raised was reached in the window: then it is exact.
        return peak, self.exact or (self._before is not None and peak > self._before)


def _sweep_stale(parent: Path) -> None:
    """Remove empty lumen-ex cgroups left by a harness that was killed before it could clean up."""
    try:
        children = list(parent.glob("lumen-ex-*-*"))
    except OSError:
        return
    for child in children:
        try:
            owner = int(child.name.split("-")[2])
        except (IndexError, ValueError):
            continue
        if owner != os.getpid() and not Path(f"/proc/{owner}").exists():
            try:
                child.rmdir()   # fails harmlessly while the cgroup still holds a process
            except OSError:
                pass


def worker_cgroups(pid: int) -> list[Path]:
    """The worker cgroups that process ``pid`` made and that still exist (v1 and v2 alike), looked
    for where this process makes its own: next to its cgroup."""
    found: list[Path] = []
    for ctrl in ("pids", "memory", ""):
        found += sorted(_parent(ctrl).glob(f"lumen-ex-{pid}-*"))
    return found


def _parent(controller: str) -> Path:
    """Where this process makes worker cgroups: its own cgroup of a v1 controller (v2 for "")."""
    return CGROUP_ROOT / controller / _own_path(controller).lstrip("/")


def _own_path(controller: str) -> str:
    """Our own cgroup path for a v1 controller (or v2 when controller is "")."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if (controller and controller in ctrls.split(",")) or (not controller and ctrls == ""):
            return path
    return "/"


def _write(path: Path, value: object) -> None:
    with open(path, "w") as f:
        f.write(str(value))


@dataclass
class Enforcement:
    """How the limits of one worker are enforced, and the child-side hook that applies them."""

    limits: Limits
    cgroup: Cgroup | None
    cuda: bool = False

    @classmethod
    def prepare(cls, limits: Limits, *, cuda: bool = False) -> Enforcement:
        return cls(limits, Cgroup.create(limits), cuda)

    @property
    def nproc_rlimit(self) -> bool:
        return self.cgroup is None and os.geteuid() != 0

    @property
    def as_rlimit(self) -> bool:
        return self.cgroup is None and not self.cuda

    def describe(self) -> dict[str, str]:
        lim = self.limits
        cg = f"cgroup v{self.cgroup.version}" if self.cgroup else None
        if cg:
            memory, processes = f"{cg} ({lim.memory_mb} MiB, no swap)", f"{cg} ({lim.processes})"
        else:
            memory = f"rlimit address space ({lim.memory_mb} MiB)" if self.as_rlimit else "none (no cgroup; CUDA forbids RLIMIT_AS)"
            processes = f"rlimit nproc ({lim.processes})" if self.nproc_rlimit else "none (root without a cgroup)"
        return {
            "memory": memory,
            "processes": processes,
            "cpu_time": f"rlimit ({lim.cpu_seconds} s)",
            "file_size": f"rlimit ({lim.file_mb} MiB)",
        }

    def preexec(self) -> None:
        """Runs in the child between fork and exec: join the cgroup, set rlimits."""
        if self.cgroup is not None:
            self.cgroup.add_self()
        for name, soft, hard in self.rlimits():
            resource.setrlimit(getattr(resource, name), (soft, hard))

    def rlimits(self) -> list[tuple[str, int, int]]:
        """The resource limits a worker sets on itself, as (resource name, soft, hard): by
        :meth:`preexec`, or by a worker forked from a zygote (src/lumen_ex/sandbox/inside/zygote.py)."""
        lim = self.limits
        out = [("RLIMIT_CPU", lim.cpu_seconds, lim.cpu_seconds + 1), ("RLIMIT_CORE", 0, 0),
               ("RLIMIT_FSIZE", lim.file_mb << 20, lim.file_mb << 20),
               ("RLIMIT_NOFILE", lim.open_files, lim.open_files)]
        if self.nproc_rlimit:
            n = _user_process_count() + lim.processes
            out.append(("RLIMIT_NPROC", n, n))
        if self.as_rlimit:
            size = lim.memory_mb << 20
            out.append(("RLIMIT_AS", size, size))
        return out

    def cleanup(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill_all()
            self.cgroup.remove()

    def out_of_memory(self) -> bool:
        return self.cgroup is not None and self.cgroup.oom_killed()


def _user_process_count() -> int:
    uid, n = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n
