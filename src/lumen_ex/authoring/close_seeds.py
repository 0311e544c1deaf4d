"""Which files ``lumen-ex dev check`` grades under its close seeds as well (src/lumen_ex/authoring/devcheck.py):
the files nearest the line between pass and fail, where a seed it was not graded under could change the
verdict. They are known from the gradings under the first seeds: how much of its tolerance a correct
file used (a passing test's ``tolerance_used``), how far past it a buggy file's first failure went.
"""

from __future__ import annotations

from lumen_ex.core.results import RunResult, Status

# A buggy file whose first failure is a value difference at most this many times the tolerance is
# near the line between pass and fail: it gets the close seeds too.
CLOSE_RATIO = 10.0
# A correct file that used at least this share of a tolerance (a passing test's tolerance_used) under
# some seed is near that line too. (At seed 1234 the built-in pack's correct files use 0.04 to 0.32, as
# their references do, except exercise 12's, whose outputs are integers: 0, and exercise 11's, whose
# half-precision codes may be one off: 1.0.)
CLOSE_SHARE = 0.5
ALWAYS_CLOSE = ("reference",)     # what files get the close seeds whatever their verdicts


def is_close(what: str, results: list[RunResult | None]) -> bool:
    """Is a file of kind ``what`` ("reference", "correct", "buggy", "stub"), graded with ``results``,
    near the line between pass and fail (so worth more seeds)? The reference always is; a correct file
    is when some test used at least CLOSE_SHARE of its tolerance (or when it did not pass: more seeds
    show more of what is wrong); a buggy file is when a first failure was a value difference of at
    most CLOSE_RATIO times the tolerance at the worst value."""
    if what in ALWAYS_CLOSE:
        return True
    if what == "correct":
        return any(result is None or result.status is not Status.PASS
                   or (tolerance_used(result) or 0.0) >= CLOSE_SHARE for result in results)
    if what != "buggy":
        return False
    for result in results:
        first = result.first_failure if result is not None else None
        d = first.diagnosis.details if first is not None and first.diagnosis is not None else {}
        try:
            allowed = float(d["atol"]) + float(d["rtol"]) * abs(float(d["expected_value"]))
            if float(d["max_abs_error"]) <= CLOSE_RATIO * allowed:
                return True
        except (KeyError, TypeError, ValueError):
            continue
    return False


def tolerance_used(result: RunResult) -> float | None:
    """The largest share of a tolerance any passing test of ``result`` used (None: no value compared)."""
    return max((t.tolerance_used for t in result.tests if t.tolerance_used is not None), default=None)
