"""The machine's busy time, from /proc/stat: what bench/suite_cpu.py and bench/suite_by_test.py measure.

Imports nothing of the benchmarks' own (bench/common.py sets variables at import, and
bench/suite_by_test.py loads this inside the test run it measures)."""

from __future__ import annotations

import os
from pathlib import Path


def busy_seconds() -> float:
    """The machine's busy time so far, in seconds of all cores together (/proc/stat's first line:
    user, nice, system, then irq, softirq, steal; idle and iowait are not busy, and guest time is
    already inside user and nice)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values[0:3]) + sum(values[5:8])) / os.sysconf("SC_CLK_TCK")
