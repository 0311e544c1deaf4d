"""The exercise-1 corpus, graded for real: every correct solution gets full marks, every buggy one
fails with the diagnosis its header declares.

Each file in corpus/attention/buggy/ starts with header comments::

    # bug: <one line>                          what the learner got wrong
    # expect-kind: <kind>                      the diagnosis kind of the FIRST failing test
    # expect-misconception: <variant name>     (optional) the named mistake that test must report
    # expect-test: <test id>                   (optional) which hidden test must fail first

The files are graded through the real entry point (lumen_ex.harness.check.run_check, via the ``grade``
fixture) in the best sandbox available, so each case exercises the worker, the pipe protocol and
the harness's own verdicts.
"""

from __future__ import annotations

import pytest
from conftest import CORPUS, ROOT, bwrap_ok
from corpus_headers import headers

from lumen_ex.core import catalog
from lumen_ex.core.results import DIAGNOSIS_KINDS, Status

CORRECT = sorted((CORPUS / "attention" / "correct").glob("*.py"))
BUGGY = sorted((CORPUS / "attention" / "buggy").glob("*.py"))
def describe(result) -> str:
    """One line per test, for assertion messages."""
    lines = [f"status={result.status.value} score={result.score:.3f}/{result.max_score:.3f} ({result.message})"]
    for t in result.tests:
        d = t.diagnosis
        lines.append(f"  {t.status.value:8} {t.id}" + (f"  [{d.kind}/{d.misconception}] {d.summary}" if d else ""))
    return "\n".join(lines)


def test_corpus_is_big_enough():
    assert len(CORRECT) >= 7, [p.name for p in CORRECT]
    assert len(BUGGY) >= 14, [p.name for p in BUGGY]


@pytest.mark.parametrize("path", BUGGY, ids=[p.stem for p in BUGGY])
def test_buggy_headers_are_valid(path):
    h = headers(path)
    assert h.get("bug"), f"{path.name}: missing '# bug:' header"
    assert h.get("expect-kind") in DIAGNOSIS_KINDS, f"{path.name}: expect-kind {h.get('expect-kind')!r} is not a diagnosis kind"
    if "expect-misconception" in h:
        assert h["expect-misconception"] in known_misconceptions(), \
            f"{path.name}: unknown misconception {h['expect-misconception']!r}"


def known_misconceptions() -> set[str]:
    """Every mistake id the exercise-1 suite can name: its CATALOGUE when it has one, else the
    names of its value variants on inputs with a 4-D batch and a mask."""
    import torch

    from lumen_ex.graders.attention import variants

    if hasattr(variants, "CATALOGUE"):
        return set(variants.CATALOGUE)
    q = k = v = torch.zeros(1, 1, 2, 2, dtype=torch.float64)
    mask = torch.ones(1, 1, 2, 2, dtype=torch.bool)
    return {x.name for x in variants.output_variants(q, k, v, mask)} | {x.name for x in variants.causal_variants(2, 3)}


@pytest.mark.parametrize("path", CORRECT, ids=[p.stem for p in CORRECT])
def test_correct_solution_gets_full_score(grade, path):
    result = grade(1, path)
    assert result.status is Status.PASS, describe(result)
    assert all(t.status in (Status.PASS, Status.SKIPPED) for t in result.tests), describe(result)
    assert result.max_score == pytest.approx(catalog.load().find(1).max_score)
    assert result.score == pytest.approx(result.max_score), describe(result)


@pytest.mark.parametrize("path", BUGGY, ids=[p.stem for p in BUGGY])
def test_buggy_solution_fails_with_declared_diagnosis(grade, path):
    h = headers(path)
    result = grade(1, path)
    assert result.status is not Status.PASS, f"FALSE PASS of {path.name} ({h['bug']}):\n{describe(result)}"
    assert result.status is Status.FAIL, describe(result)
    assert result.score < result.max_score, describe(result)
    first = result.first_failure
    assert first is not None and first.diagnosis is not None, describe(result)
    if "expect-test" in h:
        assert first.id.endswith("::" + h["expect-test"]), \
            f"first failure is {first.id}, expected {h['expect-test']}:\n{describe(result)}"
    assert first.diagnosis.kind == h["expect-kind"], \
        f"first failure {first.id} is {first.diagnosis.kind!r}, expected {h['expect-kind']!r}:\n{describe(result)}"
    if "expect-misconception" in h:
        assert first.diagnosis.misconception == h["expect-misconception"], \
            f"first failure {first.id} names {first.diagnosis.misconception!r}, expected {h['expect-misconception']!r}:\n{describe(result)}"
        assert first.diagnosis.hint, "a named misconception must come with its sentence as the hint"


def test_stub_fails(grade):
    stub = ROOT / "src/lumen_ex/exercises" / "01-attention" / "attention.py"
    result = grade(1, stub)
    assert result.status is Status.FAIL, describe(result)
    assert result.score < result.max_score
    first = result.first_failure
    assert first.diagnosis.kind == "exception" and "NotImplementedError" in first.diagnosis.summary, describe(result)


SANDBOXES = ["bwrap", "none"] if bwrap_ok() else ["none"]


def test_reference_full_score_under_every_sandbox(grade):
    reference = ROOT / "src/lumen_ex/reference" / "attention.py"
    results = {sb: grade(1, reference, sandbox=sb, seed=4321) for sb in SANDBOXES}
    for sb, result in results.items():
        assert result.sandbox.backend == sb
        assert result.status is Status.PASS, f"{sb}:\n{describe(result)}"
        assert result.score == pytest.approx(result.max_score), f"{sb}:\n{describe(result)}"
    views = {sb: [(t.id, t.status, round(t.score, 6), round(t.max_score, 6)) for t in r.tests]
             for sb, r in results.items()}
    first = next(iter(views.values()))
    for sb, view in views.items():
        assert view == first, f"per-test results differ between sandboxes ({sb})"
    if not bwrap_ok():
        pytest.skip("bubblewrap unavailable: only the unisolated mode was compared")
