"""The catalogue is data, validated: every stub fails its hidden suite, the reference passes it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lumen_ex.core import catalog
from lumen_ex.core.errors import UnknownExercise
from lumen_ex.core.results import Status

EXERCISES = catalog.load().exercises
REFERENCE = Path(catalog.exercises_root()).parent / "reference"


def test_catalogue_is_valid():
    assert catalog.validate(catalog.load()) == []


def test_validator_finds_real_problems(tmp_path):
    """The validator is not vacuous: a broken copy of the exercises folder yields each problem."""
    root = tmp_path / "exercises"
    shutil.copytree(catalog.exercises_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "01-attention" / "attention.py").write_text("def scaled_dot_product_attention(q, k, v):\n    pass\n")
    (root / "02-kv-cache" / "README.md").unlink()
    (root / "03-orphan").mkdir()
    text = (root / "catalog.toml").read_text().replace('slug = "kv-cache"', 'slug = "Bad Slug"')
    text = text.replace("number = 2", "number = 1")
    (root / "catalog.toml").write_text(text)
    problems = "\n".join(catalog.validate(catalog.load(root / "catalog.toml"), root))
    assert "needs TODO markers" in problems
    assert "does not define causal_mask()" in problems
    assert "README.md is missing" in problems
    assert "03-orphan is not listed" in problems
    assert "used twice" in problems
    assert "slug must be unique" in problems


@pytest.mark.parametrize("key", ["1", "01", "attention", "01-attention", " Attention "])
def test_exercise_found_by_number_or_slug(key):
    assert catalog.load().find(key).slug == "attention"


def test_unknown_exercise_names_the_choices():
    with pytest.raises(UnknownExercise, match=r"Choose one of: 1 \(attention\), 2 \(kv-cache\)"):
        catalog.load().find("3")


@pytest.mark.parametrize("ex", EXERCISES, ids=[e.slug for e in EXERCISES])
def test_stub_fails_its_hidden_suite(ex, grade):
    result = grade(ex.number, catalog.exercises_root() / ex.dir / ex.file)
    assert result.status is Status.FAIL
    assert result.score < result.max_score
    first = result.first_failure
    assert first is not None and first.diagnosis is not None
    assert "NotImplementedError" in first.message or first.diagnosis.kind in ("exception", "missing")


@pytest.mark.parametrize("ex", EXERCISES, ids=[e.slug for e in EXERCISES])
def test_reference_passes_with_full_marks(ex, grade):
    result = grade(ex.number, REFERENCE / ex.file)
    failures = [(t.id, t.message) for t in result.tests if t.status not in (Status.PASS, Status.SKIPPED)]
    assert failures == []
    assert result.status is Status.PASS
    assert result.score == pytest.approx(result.max_score)
    assert result.max_score == pytest.approx(ex.max_score)
    # Every scoring group is exercised, and every test belongs to a declared group.
    groups = {t.group for t in result.tests}
    assert groups == set(ex.points), f"groups in the suite {groups} vs the catalogue {set(ex.points)}"
