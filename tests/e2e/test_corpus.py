"""Every exercise's corpus, graded for real: every correct solution gets full marks, every buggy one
fails with the diagnosis its header declares, the stub fails and the reference passes.

The exercises come from the catalogue (lumen_ex.core.catalog.load().exercises); each one's corpus
is tests/corpus/<suite>/ (its ``suite`` field: attention, kv_cache), with known-correct files in
correct/ and known-buggy ones in buggy/. Each buggy file starts with header comments
(tests/corpus_headers.py reads them)::

    # bug: <one line>                          what the learner got wrong
    # expect-kind: <kind>                      the diagnosis kind of the FIRST failing test
    # expect-misconception: <variant name>     (optional) the named mistake that test must report
    # expect-test: <test id>                   (optional) which hidden test must fail first

and must fail (never pass, never a grader error) with exactly that diagnosis.

The files are graded through the real entry point (lumen_ex.harness.check.run_check, via the ``grade``
fixture) in the best sandbox available, so each case exercises the worker, the pipe protocol and
the harness's own verdicts. The reference is also graded under every sandbox, which must agree.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from conftest import CORPUS, ROOT, bwrap_ok
from corpus_headers import headers

from lumen_ex.core import catalog
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.results import DIAGNOSIS_KINDS, Status

EXERCISES = catalog.load().exercises
# The least each corpus must hold: (correct files, buggy files).
MINIMUM = {"attention": (7, 14), "kv_cache": (6, 10)}


def corpus(ex: Exercise, kind: str) -> list[Path]:
    """The corpus files of one kind ("correct" or "buggy") of an exercise: tests/corpus/<suite>/<kind>/."""
    return sorted((CORPUS / ex.suite / kind).glob("*.py"))


def by_exercise():
    return pytest.mark.parametrize("ex", EXERCISES, ids=[ex.suite for ex in EXERCISES])


def by_file(kind: str):
    cases = [pytest.param(ex, path, id=f"{ex.suite}-{path.stem}") for ex in EXERCISES for path in corpus(ex, kind)]
    return pytest.mark.parametrize("ex,path", cases)


def describe(result) -> str:
    """One line per test, for assertion messages."""
    lines = [f"status={result.status.value} score={result.score:.3f}/{result.max_score:.3f} ({result.message})"]
    for t in result.tests:
        d = t.diagnosis
        lines.append(f"  {t.status.value:8} {t.id}" + (f"  [{d.kind}/{d.misconception}] {d.summary}" if d else ""))
    return "\n".join(lines)


def known_misconceptions(ex: Exercise) -> set[str]:
    """Every mistake id the exercise's suite can name: the CATALOGUE of its variants module. (The
    attention suite's ids can also be computed: the names of its value variants on inputs with a
    4-D batch and a mask.)"""
    variants = importlib.import_module(f"lumen_ex.graders.{ex.suite}.variants")
    if hasattr(variants, "CATALOGUE"):
        return set(variants.CATALOGUE)
    assert ex.suite == "attention", f"lumen_ex.graders.{ex.suite}.variants has no CATALOGUE"
    import torch

    q = k = v = torch.zeros(1, 1, 2, 2, dtype=torch.float64)
    mask = torch.ones(1, 1, 2, 2, dtype=torch.bool)
    return {x.name for x in variants.output_variants(q, k, v, mask)} | {x.name for x in variants.causal_variants(2, 3)}


def test_every_exercise_has_a_corpus():
    assert EXERCISES, "the catalogue lists no exercise"
    for ex in EXERCISES:
        assert (CORPUS / ex.suite / "correct").is_dir() and (CORPUS / ex.suite / "buggy").is_dir(), \
            f"exercise {ex.number} ({ex.slug}) has no corpus: add tests/corpus/{ex.suite}/correct and buggy"
        assert ex.suite in MINIMUM, f"exercise {ex.number} ({ex.slug}): say in MINIMUM how big its corpus must be"


@by_exercise()
def test_corpus_is_big_enough(ex):
    correct, buggy = corpus(ex, "correct"), corpus(ex, "buggy")
    least_correct, least_buggy = MINIMUM[ex.suite]
    assert len(correct) >= least_correct, [p.name for p in correct]
    assert len(buggy) >= least_buggy, [p.name for p in buggy]


@by_file("buggy")
def test_buggy_headers_are_valid(ex, path):
    h = headers(path)
    assert h.get("bug"), f"{path.name}: missing '# bug:' header"
    assert h.get("expect-kind") in DIAGNOSIS_KINDS, f"{path.name}: expect-kind {h.get('expect-kind')!r} is not a diagnosis kind"
    if "expect-misconception" in h:
        assert h["expect-misconception"] in known_misconceptions(ex), \
            f"{path.name}: unknown misconception {h['expect-misconception']!r}"


@by_file("correct")
def test_correct_solution_gets_full_score(grade, ex, path):
    result = grade(ex.number, path)
    assert result.status is Status.PASS, describe(result)
    assert all(t.status in (Status.PASS, Status.SKIPPED) for t in result.tests), describe(result)
    assert result.max_score == pytest.approx(ex.max_score) and result.max_score > 0, describe(result)
    assert result.score == pytest.approx(result.max_score), describe(result)


@by_file("buggy")
def test_buggy_solution_fails_with_declared_diagnosis(grade, ex, path):
    h = headers(path)
    result = grade(ex.number, path)
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


@by_exercise()
def test_stub_fails(grade, ex):
    stub = ROOT / "src/lumen_ex/exercises" / ex.dir / ex.file
    result = grade(ex.number, stub)
    assert result.status is Status.FAIL, describe(result)
    assert result.score < result.max_score, describe(result)
    first = result.first_failure
    assert first.diagnosis.kind == "exception" and "NotImplementedError" in first.diagnosis.summary, describe(result)


def reference(ex: Exercise) -> Path:
    return ROOT / "src/lumen_ex/reference" / ex.file


@by_exercise()
def test_reference_scores_full_marks(grade, ex):
    result = grade(ex.number, reference(ex))
    assert result.status is Status.PASS, describe(result)
    assert result.score == pytest.approx(result.max_score) == ex.max_score, describe(result)


SANDBOXES = ["bwrap", "none"] if bwrap_ok() else ["none"]


@by_exercise()
def test_reference_full_score_under_every_sandbox(grade, ex):
    results = {sb: grade(ex.number, reference(ex), sandbox=sb, seed=4321) for sb in SANDBOXES}
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
