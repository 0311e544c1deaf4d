"""The first failure every view shows is the one that explains the most (docs/result-schema.md).

A named mistake beats an unnamed value difference (one that value tests name, only when most of the
failing value tests name it), a conceptual mistake beats a dtype detail, a side
effect on the caller's tensors beats the values it spoils; ties keep the suite's order; the record
read back (the gradebook reads dicts) picks the same test.
"""

from __future__ import annotations

from lumen_ex.classroom.gradebook import first_failure as gradebook_first_failure
from lumen_ex.core import catalog, results
from lumen_ex.core.results import Diagnosis, RunResult, SandboxInfo, Status


def row(name: str, kind: str | None, misconception: str | None = None, status: Status = Status.FAIL) -> results.TestResult:
    diagnosis = Diagnosis(kind, f"{name} failed", misconception=misconception) if kind else None
    return results.TestResult(f"t.py::{name}", name, "values", status, message=f"{name} failed", diagnosis=diagnosis)


def first(*tests: results.TestResult) -> str:
    result = RunResult({"number": 1, "slug": "attention", "title": "t"}, Status.FAIL, SandboxInfo("none", False),
                       "cpu", 1, tests=list(tests))
    picked = result.first_failure
    again = RunResult.from_dict(result.to_dict()).first_failure
    assert (picked.name if picked else None) == (again.name if again else None)
    doc_line = gradebook_first_failure(catalog.load().find(1), result.to_dict())
    assert picked is None or f"{picked.name}: " in doc_line, doc_line
    return picked.name if picked else ""


def test_a_named_mistake_beats_an_unnamed_value_difference():
    assert first(row("plain", "values"), row("named", "values", "no-scale"), row("again", "values", "no-scale")) == "named"
    assert first(row("plain", "property"), row("named", "values", "no-scale")) == "named"    # the only value test


def test_a_mistake_one_value_test_of_several_matched_does_not_lead():
    """On a small input two mistakes can give one answer (exercise 12 with one draft token: keeping the
    batch's fewest accepted looks like argmax without a rejection): a match that most of the failing
    value tests do not share is chance, and the suite's order decides."""
    assert first(row("first", "values"), row("lone", "values", "argmax-no-rejection"), row("third", "values")) == "first"
    assert first(row("lone", "values", "argmax-no-rejection"), row("second", "values"),
                 row("rows", "property")) == "rows"
    # a mistake named by a check of its own (not a value comparison) needs no majority
    assert first(row("first", "values"), row("forbidden", "forbidden", "forbidden-api")) == "forbidden"


def test_a_conceptual_mistake_beats_a_dtype_detail():
    assert first(row("lse_dtype", "dtype", "lse-not-float32"), row("memory", "property", "quadratic-memory")) == "memory"
    assert first(row("dtype", "dtype"), row("plain", "values")) == "plain"
    # a lower precision explains the differences it causes: it ranks with the named mistakes
    assert first(row("half", "dtype", "dtype-downcast"), row("rows", "property", "weight-rows-not-normalised")) == "half"


def test_a_side_effect_beats_the_values_it_spoils():
    assert first(row("tiny_diff", "values"), row("named", "values", "no-scale"),
                 row("cache_written", "side-effect", "caller-cache-mutated")) == "cache_written"


def test_the_contract_comes_first_and_ties_keep_the_suite_order():
    assert first(row("named", "values", "no-scale"), row("raised", "exception"), row("hung", None, status=Status.TIMEOUT)) == "hung"
    assert first(row("raised", "exception"), row("named", "shape", "axes-transposed")) == "named"   # a consequence
    assert first(row("plain", "values"), row("raised", "exception")) == "raised"
    assert first(row("a", "values"), row("b", "values")) == "a"
    assert first(row("shape", "shape"), row("nan", "nonfinite"), row("v", "values")) == "shape"
    assert first(row("raised", "exception"), row("shape", "shape")) == "raised"         # each often the other's
    assert first(row("shape", "shape"), row("raised", "exception")) == "shape"          # cause: the suite's order


def test_passing_and_skipped_tests_are_never_the_first_failure():
    assert first(row("ok", "values", status=Status.PASS), row("gpu", None, status=Status.SKIPPED)) == ""
