"""How near the line between pass and fail a passing test stayed: the share of its tolerance its
value comparisons used (src/lumen_ex/graders/support/expect.py ``values``, kept per test by the
harness as ``tolerance_used``), and how ``lumen-ex dev check`` picks by it which correct files get
the close seeds (src/lumen_ex/authoring/close_seeds.py)."""

from __future__ import annotations

import pytest
import torch

from lumen_ex.authoring import close_seeds
from lumen_ex.core.results import CheckFailed, RunResult, SandboxInfo, Status, take_tolerance_share, tolerance_share
from lumen_ex.core.results import TestResult as Record
from lumen_ex.graders.support import expect
from lumen_ex.graders.support.tolerances import Tolerance

TOL = Tolerance(1e-3, 0.0)
EXPECTED = torch.zeros(4, dtype=torch.float64)


def compare(error: float) -> None:
    got = EXPECTED.clone()
    got[2] = error
    expect.values(got, EXPECTED, what="output", axes=("L",), tol=TOL)


def test_a_passing_comparison_records_the_share_of_the_tolerance_it_used():
    take_tolerance_share()
    compare(0.0)
    assert take_tolerance_share() == 0.0
    compare(2.5e-4)
    compare(7.5e-4)                        # the test's largest share is kept
    assert take_tolerance_share() == pytest.approx(0.75)
    assert take_tolerance_share() is None  # taken: forgotten


def test_a_failing_comparison_records_nothing():
    take_tolerance_share()
    with pytest.raises(CheckFailed):
        compare(2e-3)
    assert take_tolerance_share() is None


def test_exact_comparisons_use_nothing_and_shares_stay_within_0_and_1():
    take_tolerance_share()
    expect.values(EXPECTED.clone(), EXPECTED, what="mask", axes=("L",), tol=Tolerance(0.0, 0.0))
    assert take_tolerance_share() == 0.0
    tolerance_share(float("nan"))
    tolerance_share(3.0)
    assert take_tolerance_share() == 1.0


def test_the_record_keeps_it_and_leaves_it_out_where_nothing_was_compared():
    used = Record("t.py::a", "a", "values", Status.PASS, 1.0, 1.0, tolerance_used=0.123456)
    assert used.to_dict()["tolerance_used"] == 0.1235
    assert Record.from_dict(used.to_dict()).tolerance_used == 0.1235
    plain = Record("t.py::b", "b", "values", Status.PASS, 1.0, 1.0)
    assert "tolerance_used" not in plain.to_dict() and Record.from_dict(plain.to_dict()).tolerance_used is None


def _result(status: Status, *shares: float | None) -> RunResult:
    tests = [Record(f"t.py::{i}", str(i), "values", status, 0.0, 1.0, tolerance_used=s) for i, s in enumerate(shares)]
    return RunResult(exercise={"number": 1, "slug": "attention", "title": "t"}, status=status,
                     sandbox=SandboxInfo("bwrap", True), device="cpu", seed=1, tests=tests)


@pytest.mark.parametrize("what,results,close", [
    ("correct", [_result(Status.PASS, 0.1, None), _result(Status.PASS, 0.32)], False),
    ("correct", [_result(Status.PASS, 0.1), _result(Status.PASS, close_seeds.CLOSE_SHARE)], True),
    ("correct", [_result(Status.PASS, 0.1), _result(Status.FAIL, None)], True),     # did not pass: more seeds
    ("correct", [_result(Status.PASS, 0.1), None], True),                          # no result
    ("correct", [_result(Status.PASS, None)], False),                              # compared no values
    ("reference", [_result(Status.PASS, 0.0)], True),                              # always
    ("stub", [_result(Status.FAIL, None)], False),
], ids=["far", "half-a-tolerance", "failed", "no-result", "no-values", "reference", "stub"])
def test_which_files_get_the_close_seeds(what, results, close):
    assert close_seeds.is_close(what, results) is close
