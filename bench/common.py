"""Shared helpers for the benchmarks: timed runs of real commands, medians, a scratch workspace.

Benchmarks print ratios measured in one run on one machine (never absolute targets in unit tests,
which flake on shared machines).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "src" / "lumen_ex" / "exercises"        # the built-in pack
CORPORA = {"attention": EXERCISES / "01-attention" / "corpus", "kv_cache": EXERCISES / "02-kv-cache" / "corpus"}
REFERENCES = {"attention": EXERCISES / "01-attention" / "reference.py", "kv_cache": EXERCISES / "02-kv-cache" / "reference.py"}
PYTHON = sys.executable
LUMEN_EX = str(Path(sys.executable).parent / "lumen-ex")
# A `lumen-ex check` a benchmark runs is cold unless the benchmark says otherwise: a repeated check
# would otherwise be answered by the background server the first one starts
# (src/lumen_ex/learner/check_server.py). bench/check_speed.py measures that warm path on purpose.
os.environ["LUMEN_EX_CHECK_SERVER"] = "off"


def timed(cmd: list[str], cwd: Path | None = None, ok_codes=(0,), env: dict | None = None) -> float:
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if proc.returncode not in ok_codes:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def median_of(n: int, fn) -> float:
    fn()  # warm the page cache once; not counted
    return statistics.median(fn() for _ in range(n))


def import_torch_seconds(n: int = 5) -> float:
    return median_of(n, lambda: timed([PYTHON, "-c", "import torch"]))


def reference_workspace() -> Path:
    """A fresh workspace whose exercise files are the reference solutions."""
    from lumen_ex.core import catalog

    tmp = Path(tempfile.mkdtemp(prefix="lumen-bench-"))
    subprocess.run([LUMEN_EX, "init", str(tmp / "ws")], check=True, capture_output=True)
    for ex in catalog.load().exercises:
        shutil.copyfile(ex.reference_path, tmp / "ws" / ex.dir / ex.file)
    return tmp / "ws"


def _pss(pid: int, rss: int) -> int:
    """A process's proportional set size in bytes, or ``rss`` where it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return rss


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class TreeMemory:
    """The peak memory of a process and all its descendants, sampled from /proc every ``interval``
    seconds while it runs: the sum of their proportional set sizes (PSS: a page shared by n
    processes counts 1/n in each, so torch's pages, shared by a zygote and the workers forked from
    it, count once), or of their RSS where smaps_rollup cannot be read (shared pages then counted
    once per process: an upper bound). Start it with the process's pid; ``stop()`` returns the peak
    in bytes. The processes of docker grading slots (src/lumen_ex/sandbox/docker_slot.py) count too:
    they are the docker engine's children, not the grading process's."""

    SLOT_MARK = b"/run/lumen/zygote.sock"    # on the command line of a slot's init and zygote

    def __init__(self, pid: int, interval: float = 0.2):
        import threading

        self.pid, self.interval, self.peak = pid, interval, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree_rss(self) -> int:
        parents, rss = {}, {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(stat[1])
                rss[int(entry.name)] = int(stat[21]) * 4096
            except (OSError, IndexError, ValueError):
                continue
        roots = {self.pid} | {pid for pid in rss if self.SLOT_MARK in _cmdline(pid)}
        total = 0
        for pid in rss:
            p, hops = pid, 0
            while p and p not in roots and hops < 64:
                p, hops = parents.get(p, 0), hops + 1
            if p in roots:
                total += _pss(pid, rss[pid])
        return total

    def _run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self._tree_rss())
            self._done.wait(self.interval)

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak
