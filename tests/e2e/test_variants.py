"""The known wrong answers can be told apart on the inputs the hidden tests actually use.

A diagnosis names the first variant (src/lumen_ex/graders/*/variants.py) whose values equal the learner's. That
is only sound if, on each hidden test's own inputs, every variant differs from the reference and
from every other variant by far more than the tolerance it is matched at; where two coincide, the
hidden inputs must change until they do not.

The inputs are obtained from the hidden suites themselves, not rebuilt here: the reference solution
is graded through the real entry point with ``expect.tensors`` wrapped, so every comparison a hidden
test makes is recorded with its reference values, its variants (computed on the same inputs), its
dtype, tolerance and axis sizes. Per-test seeds derive from the run seed, so several run seeds are
recorded: the corpus's, the CLI goldens' and two more.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
import torch
from conftest import BUILTIN, CORPORA, REFERENCES, ROOT, grade_source

from lumen_ex.core import catalog, exercise_modules
from lumen_ex.core.results import Status
from lumen_ex.graders.support import expect

attention_variants = exercise_modules.load(BUILTIN["attention"].root, "mistakes")
kv_variants = exercise_modules.load(BUILTIN["kv_cache"].root, "mistakes")

SEEDS = (1234, 7, 20261129, 99)
EXERCISES = {1: ("attention.py", attention_variants.CATALOGUE), 2: ("kv_cache.py", kv_variants.CATALOGUE)}
# "Far more than the tolerance": variants must be this many match tolerances apart. float64 is matched
# at 1e-9 and float32 at 1e-5, where learner noise is ~1e-15 and ~3e-7: 100 tolerances is a wide
# margin (measured separations are mostly 1e3 to 1e14). float16 and bfloat16 are matched at 1e-2 and
# 2e-2 (plus as much relative), where correct solutions already deviate by up to 0.15 and 0.55
# tolerances and conceptual mistakes are O(0.1 to 1) apart: 10 and 5 tolerances are still 9x and
# more the largest deviation of a correct solution. Bool masks are compared exactly.
SEPARATION = {torch.float64: 100.0, torch.float32: 100.0, torch.float16: 10.0, torch.bfloat16: 5.0,
              torch.bool: 1.0}


@dataclass
class Comparison:
    test: str
    what: str
    dtype: torch.dtype
    tol: expect.Tolerance          # the match tolerance (expect.match_tolerance)
    expected: torch.Tensor
    variants: list
    sizes: dict


_RECORDED: dict[tuple[int, int], list[Comparison]] = {}


def recorded(exercise: int, seed: int, tmp: Path, launcher) -> list[Comparison]:
    """Every comparison the hidden suite makes when the reference is graded with ``seed`` (by a
    worker of ``launcher``: tests/conftest.py ``forked_bwrap``, None for the default sandbox's own)."""
    key = (exercise, seed)
    if key in _RECORDED:
        return _RECORDED[key]
    found: list[Comparison] = []
    original = expect.tensors

    def recording(items, *, sizes, dtype, device):
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0].rsplit("/", 1)[-1]
        for it in items:
            if it.variants is None:
                continue
            tol = expect.match_tolerance(dtype, it.tol or expect.TOLERANCES.get(dtype, expect.Tolerance(0, 0)))
            found.append(Comparison(test, it.what, dtype, tol, it.value.detach().clone(), it.variants(), dict(sizes)))
        return original(items, sizes=sizes, dtype=dtype, device=device)

    with mock.patch.object(expect, "tensors", recording):
        result = grade_source(tmp, exercise, REFERENCES[CORPUS_DIRS[exercise]], seed=seed, launcher=launcher)
    assert result.status is Status.PASS, [(t.id, t.message) for t in result.tests if t.status is not Status.PASS]
    assert found, "no comparison was recorded: the suite no longer goes through expect.tensors"
    _RECORDED[key] = found
    return found


def apart(a: torch.Tensor, b: torch.Tensor, tol: expect.Tolerance) -> float:
    """How far apart two answers are, in match tolerances, whichever is taken as the reference."""
    return min(expect.separation(a, b, tol), expect.separation(b, a, tol))


CASES = [(ex, seed) for ex in EXERCISES for seed in SEEDS]


@pytest.mark.parametrize("exercise,seed", CASES, ids=[f"ex{e}-seed{s}" for e, s in CASES])
@pytest.mark.slow
def test_variants_are_distinguishable_on_the_hidden_inputs(tmp_path, exercise, seed, forked_bwrap):
    problems = []
    for c in recorded(exercise, seed, tmp_path, forked_bwrap):
        need = SEPARATION[c.dtype]
        usable = expect.candidates(c.expected, c.variants, c.tol)
        where = f"{c.test} {c.what} ({str(c.dtype).removeprefix('torch.')})"
        for v in usable:
            d = apart(v.value, c.expected, c.tol)
            if d < need:
                problems.append(f"{where}: {v.name} is only {d:.3g} tolerances from the reference")
        for a, b in itertools.combinations(usable, 2):
            d = apart(a.value, b.value, c.tol)
            if d < need:
                problems.append(f"{where}: {a.name} and {b.name} are only {d:.3g} tolerances apart")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("exercise", list(EXERCISES), ids=[f"ex{e}" for e in EXERCISES])
def test_every_value_mistake_can_be_named(tmp_path, exercise, forked_bwrap):
    """Each variant is a candidate (differs from the reference) on some hidden test's inputs, and every
    name a variant can carry is in the exercise's catalogue. Slow alone (20-30 s: the reference graded
    under four seeds), free after test_variants_are_distinguishable_on_the_hidden_inputs, which
    records the same comparisons."""
    catalogue = EXERCISES[exercise][1]
    named, usable = set(), set()
    for i, seed in enumerate(SEEDS):
        for c in recorded(exercise, seed, tmp_path / str(i), forked_bwrap):
            named |= {v.name for v in c.variants}
            usable |= {v.name for v in expect.candidates(c.expected, c.variants, c.tol)}
    assert named - set(catalogue) == set(), f"variant names missing from CATALOGUE: {named - set(catalogue)}"
    assert named - usable == set(), f"variants never distinguishable from the reference: {named - usable}"
    if exercise == 1:
        assert "softmax-overflow" in usable, "no hidden input makes a naive exp overflow"


@pytest.mark.parametrize("seed", SEEDS)
def test_attention_inputs_have_distinct_axis_sizes(tmp_path, seed, forked_bwrap):
    """Every axis of every exercise-1 comparison has its own size, so a swapped axis can be named."""
    for c in recorded(1, seed, tmp_path, forked_bwrap):
        sizes = dict(c.sizes)
        if sizes.get("L_q") is not None and sizes.get("L_q") == sizes.get("L_k"):
            sizes.pop("L_k")      # causal self-attention is square by design: one axis length L
        assert len(set(sizes.values())) == len(sizes), f"{c.test}: axis sizes collide: {c.sizes}"


def test_separation_is_not_vacuous():
    """The measure used above does tell a close variant from the reference, and NaN placement counts."""
    tol = expect.Tolerance(1e-5, 1e-5)
    ref = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    assert expect.separation(ref + 1e-7, ref, tol) < 1
    assert expect.separation(ref + 1e-3, ref, tol) > 10
    nan = torch.tensor([float("nan"), -2.0, 0.5], dtype=torch.float64)
    assert expect.separation(nan, ref, tol) == float("inf")
    assert expect.separation(nan, nan.clone(), tol) == 0.0
    variants = [expect.Variant("same", "s", ref + 1e-8), expect.Variant("other", "o", ref * 2)]
    assert [v.name for v in expect.candidates(ref, variants, tol)] == ["other"]


# -------------------------------------------------------------------------------------------------
# The corpus proves the catalogue

# The mistakes issue 4 lists, by the id a diagnosis names them with.
ISSUE_LIST = {
    1: ["no-scale", "scale-1/d_k", "scale-1/sqrt(d_v)", "scale-sqrt(d_k)", "softmax-over-queries",
        "softmax-over-heads", "mask-inverted", "mask-after-softmax", "mask-added", "mask-multiplied",
        "mask-ignored", "causal-top-left", "causal-no-diagonal", "causal-future-visible", "weights-are-scores",
        "outputs-swapped", "axes-transposed", "fixed-axes-transposed", "no-gradient", "dtype-upcast",
        "inputs-modified", "softmax-overflow", "forbidden-api"],
    2: ["attend-before-append", "cache-ignored", "wrong-concat-axis", "gqa-repeat", "heads-split-wrong-order",
        "no-output-projection", "softmax-over-query-axis", "softmax-over-heads", "cache-not-grown",
        "caller-cache-mutated", "quadratic-cost", "forbidden-api"],
}
# Named by a check that an earlier test always pre-empts on the hidden inputs (weights whose rows do
# not sum to 1 already differ in the value tests): kept as a second line of defence.
NEVER_FIRST = {1: {"weight-rows-not-normalised"}, 2: set()}
CORPUS_DIRS = {1: "attention", 2: "kv_cache"}


def declared(exercise: int) -> dict[str, list[str]]:
    """misconception id -> the buggy corpus files whose first failure must name it."""
    found: dict[str, list[str]] = {}
    for path in sorted((CORPORA[CORPUS_DIRS[exercise]] / "buggy").glob("*.py")):
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                break
            if line.startswith("# expect-misconception:"):
                found.setdefault(line.split(":", 1)[1].strip(), []).append(path.name)
    return found


@pytest.mark.parametrize("exercise", list(EXERCISES), ids=[f"ex{e}" for e in EXERCISES])
def test_corpus_proves_every_catalogue_entry(exercise):
    """Every catalogue id (the issue's list included) has a buggy submission whose first failure must
    name it (tests/e2e/test_corpus.py grade them), and every id the corpus declares is catalogued."""
    catalogue = set(EXERCISES[exercise][1])
    proven = declared(exercise)
    assert set(ISSUE_LIST[exercise]) <= catalogue, set(ISSUE_LIST[exercise]) - catalogue
    assert set(proven) <= catalogue, f"declared but not catalogued: {set(proven) - catalogue}"
    missing = catalogue - set(proven) - NEVER_FIRST[exercise]
    assert not missing, f"catalogue ids with no buggy corpus file naming them: {sorted(missing)}"


# -------------------------------------------------------------------------------------------------
# The evidence, per test and across the run, through the real entry point


@pytest.mark.slow
def test_a_named_mistake_carries_its_evidence_across_the_run(grade):
    import json

    from rich.console import Console

    from lumen_ex.cli.render import render_result

    result = grade(1, CORPORA["attention"] / "buggy" / "no_scale.py")
    value_tests = [t for t in result.tests if t.diagnosis is not None and t.diagnosis.kind in ("values", "nonfinite")]
    named = [t for t in value_tests if t.diagnosis.misconception == "no-scale"]
    assert len(named) >= 8, [(t.id, t.diagnosis.misconception) for t in value_tests]
    for t in named:
        d = t.diagnosis
        assert d.details["variant_max_error"] <= d.details["variant_tolerance"] * 3, (t.id, d.details)
        assert "no-scale" in d.details["variants_compared"]
        assert " on this test's input: divide the scores by math.sqrt(d_k)" in d.hint
    f64 = [t for t in named if t.diagnosis.details["variant_tolerance"] == expect.MATCH_TOLERANCE_FLOAT64.atol]
    assert f64, "no float64 value test named the mistake: no 1e-9 evidence"
    top = result.misconceptions[0]
    assert top["id"] == "no-scale" and top["matched"] == len(named)
    assert top["of"] == sum("no-scale" in t.diagnosis.details.get("variants_compared", []) for t in value_tests)
    assert top["max_error_float64"] <= 1e-9 < top["max_error"]
    doc = result.to_dict()
    assert doc["misconceptions"] == result.misconceptions
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads(result.to_json()), json.loads((ROOT / "docs" / "result.schema.json").read_text()))
    con = Console(width=200, record=True, color_system=None)
    render_result(con, result)
    text = con.export_text()
    assert f"likely mistake (matches {top['matched']} of {top['of']} value tests" in text, text


@pytest.mark.slow
def test_a_passing_run_has_no_named_mistakes(grade):
    result = grade(2, REFERENCES["kv_cache"])
    assert result.status is Status.PASS and result.misconceptions == []
    assert "misconceptions" not in result.to_dict()     # optional: documents without it stay as they were


@pytest.mark.slow
def test_a_forbidden_call_is_named_by_its_short_name(grade):

    result = grade(1, CORPORA["attention"] / "buggy" / "forbidden_sdpa_imported_alias.py")
    first = result.first_failure
    assert first.diagnosis.kind == "forbidden" and first.diagnosis.misconception == "forbidden-api"
    assert first.diagnosis.summary == ("implement it yourself; calling F.scaled_dot_product_attention "
                                       "is not allowed in this exercise")
    result = grade(1, CORPORA["attention"] / "buggy" / "forbidden_mha_instance.py")
    assert result.first_failure.diagnosis.summary == ("implement it yourself; calling nn.MultiheadAttention "
                                                      "is not allowed in this exercise")


@pytest.mark.slow
def test_a_forbidden_name_that_is_never_called_is_named_where_the_source_has_it(grade):
    """Exercise 8's README refuses every attribute named ``grad``: reading ``q.grad`` calls nothing, so
    the feedback says which line names it, not that torch.autograd.grad was called."""
    source = REFERENCES["attention_backward"].read_text()
    head, sep, body = source.partition("def attention_backward(")
    signature_end = body.index(":\n") + 2
    line = (head + sep + body[:signature_end]).count("\n") + 1
    edited = head + sep + body[:signature_end] + "    assert q.grad is None\n" + body[signature_end:]
    first = grade(8, edited).first_failure
    assert first.diagnosis.kind == "forbidden" and first.diagnosis.misconception == "forbidden-api"
    assert first.diagnosis.summary == (f"implement it yourself; line {line} reads .grad, and no name of torch.autograd.grad "
                                       "is allowed in this exercise"), first.diagnosis.summary


# -------------------------------------------------------------------------------------------------
# Forbidden APIs found in the source, by the harness (the worker's record can be erased)

FORBIDDEN = catalog.load().find(1).forbidden   # exercise 1's data, pack.toml's tables included


@pytest.mark.parametrize("source,expected", [
    ("import torch.nn.functional as F\ndef f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
     ["torch.nn.functional.scaled_dot_product_attention"]),
    ("from torch.nn.functional import scaled_dot_product_attention as fused\ndef f(q):\n    return fused(q, q, q)\n",
     ["torch.nn.functional.scaled_dot_product_attention"]),
    ("import torch\n_k = torch._C._nn.scaled_dot_product_attention\ndef g(q):\n    return _k(q, q, q)\ndef f(q):\n    return g(q)\n",
     ["torch.nn.functional.scaled_dot_product_attention"]),
    ("import torch\ndef f(q):\n    return torch.ops.aten._scaled_dot_product_attention_math(q, q, q)\n",
     ["torch.nn.functional.scaled_dot_product_attention"]),
    ("from torch import nn\nM = nn.MultiheadAttention(4, 1)\ndef f(q):\n    return M(q, q, q)\n", ["torch.nn.MultiheadAttention"]),
    ("import torch\nfn = torch.nn.functional\ndef f(q):\n    return getattr(fn, 'multi_head_attention_forward')\n",
     ["torch.nn.functional.multi_head_attention_forward"]),
    # not the learner's doing, or never reached from f: nothing to report
    ("import torch.nn.functional as F\nclass A:\n    def scaled_dot_product_attention(self, q):\n        return q\n"
     "def f(q):\n    return A().scaled_dot_product_attention(q)\n"
     "def unused(q):\n    return F.scaled_dot_product_attention(q, q, q)\n"
     "if __name__ == '__main__':\n    print(F.scaled_dot_product_attention(1, 2, 3))\n", []),
], ids=["attribute", "imported-alias", "saved-private-alias", "aten-kernel", "module-instance", "getattr-string",
        "own-method-unused-helper-main-guard"])
def test_source_scan_finds_what_a_graded_function_reaches(source, expected):
    from lumen_ex.harness.source_scan import SourceScan

    assert SourceScan(source, FORBIDDEN).reached_from("f") == expected
