"""Failing fast and fairly, through the real entry point and the real sandbox.

- A hanging function costs one call's time limit: the tests that need it afterwards are marked at
  once ("not run: ... did not return in an earlier test"), the other function's tests still run
  and pass, and no message blames the sandbox or torch's import for the learner's loop.
- A file that does not parse is reported once, with its line, and the terminal folds the rows that
  fail for the same reason. (Its speed beside a passing check is a benchmark: bench/fail_fast.py.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REFERENCES, best_sandbox, workspace_with

from lumen_ex.core import catalog
from lumen_ex.core.results import Status
from lumen_ex.harness.check import run_check

EXERCISE = catalog.load().find(1)
REFERENCE = (REFERENCES["attention"]).read_text()
HANGS = REFERENCE.replace("    d_k = q.size(-1)", "    while True:\n        pass\n    d_k = q.size(-1)", 1)
SYNTAX_ERROR = "import torch\n\ndef scaled_dot_product_attention(q, k, v, mask=None)\n    return q, q\n"
LUMEN_EX = str(Path(sys.executable).parent / "lumen-ex")


@pytest.mark.slow
def test_a_hang_costs_one_call_and_the_other_function_still_scores(tmp_path):
    assert HANGS != REFERENCE
    result = run_check(1, workspace=workspace_with(tmp_path, 1, HANGS), sandbox=best_sandbox(), seed=5,
                       device="cpu", record=False)
    assert result.status is Status.FAIL, result.message
    hung = [t for t in result.tests if "did not return within" in t.message]
    marked = [t for t in result.tests if t.message.startswith("not run: scaled_dot_product_attention")]
    assert len(hung) == 1, [t.message for t in result.tests]
    assert "scaled_dot_product_attention did not return" in hung[0].message
    assert len(marked) >= 10
    # only the hung call waited out the limit; the marked tests were never called (the first of them
    # pays for the fresh worker, which is load-dependent, so no tighter bound is asserted)
    waited = [t.id for t in result.tests if t.duration >= EXERCISE.times.call_seconds]
    assert waited == [hung[0].id], waited
    mask_tests = [t for t in result.tests if "::test_causal_mask" in t.id]
    assert mask_tests and all(t.status is Status.PASS for t in mask_tests)
    assert result.score > 0
    for t in result.tests:
        if t.status is Status.SKIPPED:
            continue          # the GPU test: "no GPU on the grading machine" is about the machine
        assert "sandbox" not in t.message and "torch import" not in t.message, t.message
    assert result.duration < EXERCISE.times.run_seconds     # not the whole run's limit


def test_a_syntax_error_is_reported_once_with_its_line(tmp_path):
    root = workspace_with(tmp_path, 1, SYNTAX_ERROR)
    done = subprocess.run([LUMEN_EX, "check", "1", "--workspace", str(root), "--sandbox", best_sandbox(),
                           "--seed", "2"], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "80", "LUMEN_EX_CHECK_SERVER": "off"})
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "first failure: your file does not parse" in out
    assert out.count("line 3") == 1, out                   # the line, once
    assert "more tests failed for the same reason" in out
    rows = [line for line in out.splitlines() if line.startswith(("!", "✗", "⏱"))]
    assert len(rows) <= 3, out
