"""Where the test command's CPU goes, by kind of process: the work behind the README's test-command time.

    python bench/suite_cpu.py [PYTEST_ARGS ...]

Runs the README's test command (``python -m pytest`` from this checkout, PYTEST_ARGS added) under the
kernel's process accounting, then prints three numbers and a table:

- the wall time, and the machine's busy core-seconds over the run (/proc/stat: user, nice, system,
  interrupts, steal). On a machine with N cores the run can end no sooner than busy / N seconds while
  its work stays the same: fewer xdist workers or a better order only move the idle time around;
- the CPU of every process that ended during the run, grouped by kind (see :data:`KINDS`): Python as
  root (the grader's trusted processes, and the unisolated mode's workers, which run as whoever runs
  the tests), bwrap's workers and zygotes (uid nobody), the docker side, the browser. A process of at
  least ``IMPORTS_TORCH_S`` of CPU is counted apart: on a 2-core machine a torch import alone costs
  about 1.5 s, so those are the processes that paid for one;
- what the accounting does not see (busy minus the processes it recorded): daemons still running at
  the end (dockerd, containerd) and the kernel's own threads.

It needs root and the kernel's BSD process accounting with Debian's ``acct`` package (``accton`` and
``dump-acct``); without them it says so and exits 2. The accounting file is a temporary one, turned off
whatever happens. Nothing else on the machine should run meanwhile: every process that ends is counted.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from busy_time import busy_seconds  # bench/busy_time.py: /proc/stat's busy time
from common import PYTHON, ROOT  # bench/common.py: the checkout and this interpreter (the venv's)

from lumen_ex.sandbox.bwrap import SANDBOX_UID  # the uid of bwrap's workers (nobody)
from lumen_ex.sandbox.docker_slot import WORKER_UID  # the grader image's lumen-worker

IMPORTS_TORCH_S = 1.0        # CPU seconds from which a process is counted as one that imported torch
# The kinds, in the order the table prints them.
KINDS = ("trusted", "worker", "docker", "browser", "other")
TITLES = {
    "trusted": "Python as root: lumen-ex commands, harnesses, grading processes, servers, pytest, unisolated workers",
    "worker": "bwrap's workers and zygotes, and what they start (uid nobody)",
    "docker": "docker: a container's harness and workers, runc, the docker command",
    "browser": "browser (chromium)",
    "other": "everything else",
}


@dataclass(frozen=True)
class Record:
    """One process that ended: its command name (as the kernel keeps it, 15 bytes at most), uid, CPU."""

    comm: str
    uid: int
    cpu: float


def parse_dump(text: str, ticks_per_second: int = 100) -> list[Record]:
    """The records of ``dump-acct`` output (``comm|v3|utime|stime|etime|uid|...``, times in ticks)."""
    records = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 6:
            continue
        try:
            cpu = (float(fields[2]) + float(fields[3])) / ticks_per_second
            records.append(Record(fields[0], int(fields[5]), cpu))
        except ValueError:
            continue
    return records


def kind_of(record: Record) -> str:
    """Which row of the table a process belongs to (:data:`KINDS`)."""
    comm, uid = record.comm, record.uid
    # By uid first: learner code and the hostile corpus may give their processes any name.
    if uid == WORKER_UID or comm.startswith(("lumen-ex-contai", "lumen-ex-platfo")) \
            or comm in ("exe", "runc", "docker", "docker-init", "containerd-shim"):
        return "docker"
    if uid == SANDBOX_UID:
        return "worker"
    if uid == 0 and comm in ("python", "python3", "lumen-ex"):
        return "trusted"
    if comm in ("chromium", "HangWatcher", "sandbox_ipc_thr", "chrome_crashpad") or comm.startswith("ThreadPool"):
        return "browser"
    return "other"


def table(records: list[Record]) -> list[tuple[str, int, float, int, float]]:
    """Per kind: (kind, processes, CPU seconds, processes of at least IMPORTS_TORCH_S, their CPU)."""
    count: collections.Counter[str] = collections.Counter()
    cpu: collections.Counter[str] = collections.Counter()
    big: collections.Counter[str] = collections.Counter()
    big_cpu: collections.Counter[str] = collections.Counter()
    for record in records:
        kind = kind_of(record)
        count[kind] += 1
        cpu[kind] += record.cpu
        if record.cpu >= IMPORTS_TORCH_S:
            big[kind] += 1
            big_cpu[kind] += record.cpu
    return [(kind, count[kind], cpu[kind], big[kind], big_cpu[kind]) for kind in KINDS]


def main(argv: list[str]) -> int:
    accton, dump = shutil.which("accton"), shutil.which("dump-acct")
    if os.geteuid() != 0 or accton is None or dump is None:
        print("suite_cpu: needs root and process accounting (apt-get install acct)", file=sys.stderr)
        return 2
    ticks = os.sysconf("SC_CLK_TCK")
    with tempfile.TemporaryDirectory(prefix="lumen-ex-suite-cpu-") as scratch:
        accounting = Path(scratch) / "acct"
        accounting.touch()
        subprocess.run([accton, str(accounting)], check=True, capture_output=True)
        busy0, started = busy_seconds(), time.monotonic()
        try:
            code = subprocess.run([PYTHON, "-m", "pytest", *argv], cwd=ROOT).returncode
        finally:
            subprocess.run([accton, "off"], capture_output=True)
        wall, busy = time.monotonic() - started, busy_seconds() - busy0
        records = parse_dump(subprocess.run([dump, str(accounting)], capture_output=True, text=True).stdout, ticks)
    cores = os.cpu_count() or 1
    recorded = sum(r.cpu for r in records)
    print(f"\ntests exit {code}: {wall:.0f} s wall, {busy:.0f} busy core-seconds on {cores} cores "
          f"(no sooner than {busy / cores:.0f} s with this work)")
    print(f"{'core-s':>8} {'share':>6} {'processes':>9} {'>=1 s':>6} {'their s':>8}  kind")
    for kind, n, cpu, n_big, cpu_big in table(records):
        print(f"{cpu:8.0f} {cpu / busy:6.0%} {n:9d} {n_big:6d} {cpu_big:8.0f}  {TITLES[kind]}")
    print(f"{busy - recorded:8.0f} {(busy - recorded) / busy:6.0%} {'':9} {'':6} {'':8}  "
          "not in the accounting: daemons still running (dockerd, containerd), the kernel's threads")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
