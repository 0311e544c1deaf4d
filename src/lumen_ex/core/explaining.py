"""Which failure explains a run: the rank of each failed test, the failure every view shows first,
and the run's likely mistake (the named mistake that most of its value tests matched).

The result record (core/results.py) holds the tests; the terminal, the web page, the gradebook and
the class report all lead with the failure chosen here, so they agree (docs/result-schema.md, "The
first failure").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar


class DiagnosisLike(Protocol):
    """What this module reads of a diagnosis (core/results.py Diagnosis)."""

    kind: str
    misconception: str | None
    hint: str | None
    details: dict[str, Any]


class Diagnosed(Protocol):
    """What this module reads of a test's result (core/results.py TestResult)."""

    @property
    def diagnosis(self) -> DiagnosisLike | None: ...

# The first failure every view shows is the one that explains the most, not the first in the suite:
# lower rank first, ties in the suite's order (docs/result-schema.md, "The first failure").
CONTRACT_KINDS = ("file", "import", "missing", "signature", "forbidden", "arity", "type",
                  "timeout", "crash", "protocol", "grader")   # nothing else can be judged until these are fixed
DETAIL_KINDS = ("dtype", "device")                            # a detail beside a conceptual mistake
# A result in a lower precision than asked explains the value and property differences it causes.
CAUSES_OTHERS = ("dtype-downcast",)


def explanatory_rank(status: str | None, kind: str | None, misconception: str | None) -> int:
    """0 the contract itself (the file, the call, a hang), 1 a side effect on the caller's tensors
    (it spoils what other tests see), 2 a named mistake (a dtype detail only when it causes others),
    3 a shape or an exception the learner's code raised (one is often the other's consequence: a
    wrong shape meets the gradient check, a mask that raises leaves a later output misshapen; the
    suite's order decides), 5 a property or NaN, 6 an unnamed value difference, 7 a dtype or device detail."""
    if kind is None or kind in CONTRACT_KINDS or status in ("error", "timeout"):
        return 0
    if kind == "side-effect":
        return 1
    if kind in DETAIL_KINDS:
        return 2 if misconception in CAUSES_OTHERS else 7
    if misconception:
        return 2
    return {"shape": 3, "exception": 3, "property": 5, "nonfinite": 5}.get(kind, 6)


_T = TypeVar("_T")


def most_explanatory(tests: Iterable[_T], key: Callable[[_T], tuple[str | None, str | None, str | None]]) -> _T | None:
    """The failed test of ``tests`` that explains the most (:func:`explanatory_rank`), or None;
    ``key(test)`` gives its (status, kind, misconception)."""
    best, best_rank = None, None
    for test in tests:
        status, kind, misconception = key(test)
        if status in ("pass", "skipped"):
            continue
        rank = explanatory_rank(status, kind, misconception)
        if best_rank is None or rank < best_rank:
            best, best_rank = test, rank
    return best


# Diagnoses that compared values with the reference: the tests a named mistake is counted over.
VALUE_KINDS = ("values", "nonfinite")
FLOAT64_EVIDENCE = 1e-9      # the match tolerance of float64 values (src/lumen_ex/graders/support/expect.py)


def ranked_mistake(diag: DiagnosisLike | dict[str, Any] | None, explaining: set[str]) -> str | None:
    """The named mistake a failed test is ranked by: a value test's only when it explains the run (its
    id among ``explaining``, :func:`summarise_misconceptions`); a match on one value test of several
    can be chance (a small input on which two mistakes give one answer) and must not be put first."""
    kind, name = (diag.get("kind"), diag.get("misconception")) if isinstance(diag, dict) else \
        (diag.kind, diag.misconception) if diag is not None else (None, None)
    return name if kind not in VALUE_KINDS or name in explaining else None


def summarise_misconceptions(tests: Sequence[Diagnosed]) -> list[dict[str, Any]]:
    """The mistakes named by value comparisons across a run that explain it: each matched more
    than half of the run's failing value tests (at most one can), the most consistent first.

    Each entry: ``id``; ``sentence`` (what the output equals and what to do); ``matched``, the number
    of value tests (tests whose values differed from the reference) that named it; ``of``, the number
    of value tests that could show it (it was among the mistakes compared there: one that gives the
    reference's answer on a test's input, or that a test does not look for, cannot be seen there);
    ``max_error``, its largest deviation from the learner's values over the tests that named it;
    ``max_error_float64`` (only when some of them compared float64 values, matched at 1e-9), the
    largest over those: the strongest evidence, since lower precisions match at their own tolerance.
    """
    # The diagnoses of the value tests, one per test.
    value_diags = [t.diagnosis for t in tests if t.diagnosis is not None and t.diagnosis.kind in VALUE_KINDS]
    found: dict[str, dict[str, Any]] = {}
    for d in value_diags:
        if not d.misconception:
            continue
        entry = found.setdefault(d.misconception, {
            "id": d.misconception, "sentence": str(d.details.get("misconception_sentence") or d.hint or d.misconception),
            "matched": 0, "of": sum(1 for v in value_diags if _could_show(v, d.misconception)),
            "max_error": 0.0})
        entry["matched"] += 1
        err = d.details.get("variant_max_error")
        if isinstance(err, (int, float)) and err == err:
            entry["max_error"] = max(entry["max_error"], float(err))
            tol = d.details.get("variant_tolerance")
            if isinstance(tol, (int, float)) and tol <= FLOAT64_EVIDENCE:
                entry["max_error_float64"] = max(entry.get("max_error_float64", 0.0), float(err))
    # A likely mistake explains the run: it is named only when it matched most of the failing value
    # tests (more than half). One that matched 1 of 10 explains nothing; the test that matched it
    # shows it as what was seen there (src/lumen_ex/cli/render.py), without a guess for the run.
    explaining = [e for e in found.values() if 2 * e["matched"] > len(value_diags)]
    return sorted(explaining, key=lambda e: (-e["matched"], e["max_error"], e["id"]))


def _could_show(diag: DiagnosisLike, misconception: str) -> bool:
    """Whether a value test compared the learner's values with this mistake (documents without
    ``variants_compared`` predate it: every value test counts)."""
    compared = diag.details.get("variants_compared")
    return not isinstance(compared, list) or misconception in compared or diag.misconception == misconception
