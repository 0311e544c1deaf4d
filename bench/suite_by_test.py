"""Where the test command's CPU goes, test by test: the work behind the README's test-command time.

    python bench/suite_by_test.py [--top N] [--json PATH] [PYTEST_ARGS ...]

bench/suite_cpu.py says what kind of process does the work; this says which test asks for it. It
runs the README's test command (``python -m pytest`` from this checkout, PYTEST_ARGS added) on one
process (``-n 0``), with this file as a pytest plugin that reads the machine's busy time
(/proc/stat, as bench/suite_cpu.py does) before and after each test's setup, call and teardown. With
one test at a time, the busy time during a test is that test's, with every process it started (a
``lumen-ex`` command, a grading process, a sandboxed worker, a container, a browser). It prints:

- per test module: busy core-seconds, their share, wall seconds, tests;
- the N tests of most core-seconds.

Read it knowing that:

- a session- or module-scoped fixture is counted in the first test that uses it (the built-in pack's
  dev check is counted in tests/e2e/test_corpus.py's first test);
- the run takes about as long as the core-seconds it measures (28 min on a 2-core machine at the stop
  that added this script, against 16 to 20 min for the parallel command), because one test runs at a time;
- nothing else on the machine should run meanwhile: the busy time is the whole machine's.

``--json PATH`` writes every test's record (``{"id", "busy", "wall"}``) there as well.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from busy_time import busy_seconds  # bench/busy_time.py (the plugin runs with bench/ on PYTHONPATH)

OUT_VARIABLE = "LUMEN_EX_SUITE_BY_TEST"     # where the plugin appends its records (a JSON line per test)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """The plugin: one record per test, over its setup, call and teardown."""
    out = os.environ.get(OUT_VARIABLE)
    busy0, started = busy_seconds(), time.monotonic()
    yield
    if out:
        record = {"id": item.nodeid, "busy": round(busy_seconds() - busy0, 2),
                  "wall": round(time.monotonic() - started, 3)}
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def by_module(records: list[dict]) -> list[tuple[str, float, float, int]]:
    """Per test module (the node id before ``::``): (module, busy, wall, tests), most busy first."""
    busy: collections.Counter[str] = collections.Counter()
    wall: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for record in records:
        module = record["id"].split("::")[0]
        busy[module] += record["busy"]
        wall[module] += record["wall"]
        count[module] += 1
    return sorted(((m, busy[m], wall[m], count[m]) for m in count), key=lambda row: (-row[1], row[0]))


def top(records: list[dict], n: int) -> list[dict]:
    """The n tests of most busy core-seconds."""
    return sorted(records, key=lambda r: (-r["busy"], r["id"]))[:n]


def report(records: list[dict], n: int) -> str:
    total = sum(r["busy"] for r in records)
    lines = [f"{len(records)} tests, {total:.0f} busy core-seconds, "
             f"{sum(r['wall'] for r in records):.0f} s wall one at a time",
             f"{'core-s':>8} {'share':>6} {'wall s':>7} {'tests':>5}  module"]
    lines += [f"{b:8.1f} {b / (total or 1.0):6.1%} {w:7.1f} {c:5d}  {m}" for m, b, w, c in by_module(records)]
    lines += ["", f"the {n} tests of most core-seconds", f"{'core-s':>8} {'wall s':>7}  test"]
    lines += [f"{r['busy']:8.1f} {r['wall']:7.1f}  {r['id']}" for r in top(records, n)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=30, help="how many tests to list (default 30)")
    parser.add_argument("--json", type=Path, help="also write every test's record there")
    args, pytest_args = parser.parse_known_args(argv)
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="lumen-ex-suite-by-test-") as scratch:
        out = Path(scratch) / "records.jsonl"
        out.touch()
        # The plugin is this file, found on PYTHONPATH; lumen-ex's own processes run with -I and
        # never see that variable (src/lumen_ex/core/trusted.py).
        env = {**os.environ, OUT_VARIABLE: str(out),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}
        code = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-p", Path(__file__).stem, *pytest_args],
                              cwd=root, env=env).returncode
        records = read_records(out)
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in records))
    print(f"\ntests exit {code}")
    print(report(records, args.top))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
