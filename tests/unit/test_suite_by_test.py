"""bench/suite_by_test.py: its plugin writes one record per test, and its report sums them by module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import suite_by_test  # noqa: E402  (bench/suite_by_test.py)

RECORDS = [
    {"id": "tests/e2e/test_a.py::test_one", "busy": 10.0, "wall": 6.0},
    {"id": "tests/e2e/test_a.py::test_two[x]", "busy": 2.5, "wall": 2.0},
    {"id": "tests/unit/test_b.py::test_three", "busy": 30.0, "wall": 1.0},
]


def test_the_report_sums_each_module_and_lists_the_costliest_tests_first():
    assert suite_by_test.by_module(RECORDS) == [
        ("tests/unit/test_b.py", 30.0, 1.0, 1), ("tests/e2e/test_a.py", 12.5, 8.0, 2)]
    assert [r["id"] for r in suite_by_test.top(RECORDS, 2)] == [
        "tests/unit/test_b.py::test_three", "tests/e2e/test_a.py::test_one"]
    text = suite_by_test.report(RECORDS, 1)
    assert text.splitlines()[0] == "3 tests, 42 busy core-seconds, 9 s wall one at a time"
    assert "70.6%" in text and "tests/e2e/test_a.py::test_one" not in text.split("most core-seconds")[1]


def test_the_plugin_records_every_test_of_a_real_run(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n\ndef test_passes():\n    assert sum(range(10**5)) > 0\n\n"
        "@pytest.mark.parametrize('n', [1, 2])\ndef test_fails(n):\n    assert n == 1\n")
    out = tmp_path / "records.jsonl"
    # Nothing of this session's pytest settings (an in-process grading may hold PYTEST_* variables).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update({suite_by_test.OUT_VARIABLE: str(out), "PYTHONPATH": str(ROOT / "bench")})
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suite_by_test",
                           "-p", "no:cacheprovider", "test_sample.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr       # one test fails on purpose
    records = suite_by_test.read_records(out)
    assert [r["id"] for r in records] == [
        "test_sample.py::test_passes", "test_sample.py::test_fails[1]", "test_sample.py::test_fails[2]"]
    assert all(r["busy"] >= 0 and r["wall"] > 0 for r in records), records
