"""Exercise 2's hidden suite, graded against a corpus of known-correct and known-buggy submissions.

Every file under tests/corpus/kv_cache/ is graded for real (workspace, sandbox, worker, hidden
suite) through the ``grade`` fixture. Correct files must pass with full marks. Each buggy file
declares in its header what its first failing test must report:

    # bug: <one line>
    # expect-kind: <the diagnosis kind of the first failure: values, shape, property, exception ...>
    # expect-misconception: <the variant name that must be named>      (optional)

and must fail (never pass, never a grader error) with exactly that diagnosis.
"""

from __future__ import annotations

import pytest
from conftest import CORPUS, ROOT
from corpus_headers import headers

from lumen_ex.core import catalog
from lumen_ex.core.results import DIAGNOSIS_KINDS, Status

HERE = CORPUS / "kv_cache"
CORRECT = sorted((HERE / "correct").glob("*.py"))
BUGGY = sorted((HERE / "buggy").glob("*.py"))
def describe(result) -> str:
    """The tests that did not pass, one line each, for assertion messages."""
    lines = [f"status={result.status.value} score={result.score}/{result.max_score} {result.message}"]
    for t in result.tests:
        if t.status is not Status.PASS:
            d = t.diagnosis
            lines.append(f"  {t.status.value} {t.id}: {t.message}"
                         + (f" [kind={d.kind} misconception={d.misconception}]" if d else ""))
    return "\n".join(lines)


def test_corpus_is_complete():
    assert len(CORRECT) >= 6 and len(BUGGY) >= 10
    for path in BUGGY:
        fields = headers(path)
        assert fields.get("bug"), f"{path.name}: no '# bug:' line"
        assert fields.get("expect-kind") in DIAGNOSIS_KINDS, f"{path.name}: bad '# expect-kind:'"


@pytest.mark.parametrize("path", CORRECT, ids=[p.stem for p in CORRECT])
def test_correct_submission_passes(grade, path):
    result = grade(2, path)
    assert result.status is Status.PASS, describe(result)
    assert result.score == pytest.approx(result.max_score) and result.max_score > 0, describe(result)


@pytest.mark.parametrize("path", BUGGY, ids=[p.stem for p in BUGGY])
def test_buggy_submission_is_diagnosed(grade, path):
    fields = headers(path)
    result = grade(2, path)
    assert result.status is Status.FAIL, describe(result)
    first = result.first_failure
    assert first is not None and first.diagnosis is not None, describe(result)
    assert first.diagnosis.kind == fields["expect-kind"], describe(result)
    if "expect-misconception" in fields:
        assert first.diagnosis.misconception == fields["expect-misconception"], describe(result)
    assert result.score < result.max_score


def test_stub_fails(grade):
    result = grade(2, ROOT / "src/lumen_ex/exercises" / "02-kv-cache" / "kv_cache.py")
    assert result.status is Status.FAIL, describe(result)
    assert result.score < result.max_score, describe(result)
    assert result.first_failure.diagnosis.kind == "exception"


def test_reference_scores_full_marks(grade):
    result = grade(2, ROOT / "src/lumen_ex/reference" / "kv_cache.py")
    assert result.status is Status.PASS, describe(result)
    assert result.score == pytest.approx(result.max_score) == catalog.load().find(2).max_score
