"""bench/suite_cpu.py's reading of the kernel's process accounting: each record in its row, by uid
before name (a learner's process may call itself anything), and the table's sums."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import suite_cpu  # noqa: E402  (bench/suite_cpu.py)

# dump-acct lines as Debian's acct prints them (comm|v3|utime|stime|etime|uid|gid|mem|io|pid|ppid|flags|exit|tty|btime)
DUMP = """\
python          |v3|   280.00|    40.00| 31527.00|     0|     0|615700.00|     0.00|   16241|   16065|S    |       0|__      |Sun Dec  6 18:17:16 2026
python          |v3|     1.00|     1.00|     5.00| 65534| 65534|634052.00|     0.00|   16300|   16247|S    |       0|__      |Sun Dec  6 18:17:20 2026
lx06bcc2a9ea    |v3|   150.00|   170.00|   700.00| 65534| 65534|634052.00|     0.00|   16400|   16300|S   X|       0|__      |Sun Dec  6 18:17:30 2026
python          |v3|   140.00|    18.00|   400.00| 61001| 61001|634052.00|     0.00|   22344|   22341|S    |       0|__      |Sun Dec  6 18:20:03 2026
lumen-ex-contai |v3|   130.00|    17.00|   420.00|     0|     0|634052.00|     0.00|   22340|   22330|S    |       0|__      |Sun Dec  6 18:20:02 2026
exe             |v3|     20.00|    23.00|    90.00|     0|     0|  4000.00|     0.00|   22320|   22310|S    |       0|__      |Sun Dec  6 18:20:01 2026
chromium        |v3|    90.00|    10.00|  2000.00|     0|     0|900000.00|     0.00|   30000|   16011|S    |       0|__      |Sun Dec  6 18:30:00 2026
kworker/u8:3    |v3|     60.00|   109.00|378450.00|     0|     0|     0.00|     0.00|   11835|       2|F    |       0|__      |Sun Dec  6 17:30:00 2026
not a record line
"""


def test_each_process_is_counted_in_its_row():
    records = suite_cpu.parse_dump(DUMP)
    assert len(records) == 8
    assert [suite_cpu.kind_of(r) for r in records] == [
        "trusted", "worker", "worker", "docker", "docker", "docker", "browser", "other"]
    assert records[0].cpu == 3.2 and records[1].cpu == 0.02


def test_the_table_sums_each_kind_and_its_processes_of_a_second_or_more():
    rows = {kind: rest for kind, *rest in suite_cpu.table(suite_cpu.parse_dump(DUMP))}
    assert list(rows) == list(suite_cpu.KINDS)
    count, cpu, big, big_cpu = rows["worker"]
    assert (count, big) == (2, 1) and abs(cpu - 3.22) < 1e-9 and abs(big_cpu - 3.2) < 1e-9
    count, cpu, big, big_cpu = rows["docker"]
    assert (count, big) == (3, 2) and abs(cpu - (1.58 + 1.47 + 0.43)) < 1e-9 and abs(big_cpu - 3.05) < 1e-9
    assert rows["other"][:2] == [1, 1.69]
