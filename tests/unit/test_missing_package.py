"""An exercise whose package is missing on this machine (exercise 14 without Triton): `lumen-ex list`
marks it, and a check grades nothing and says how to add it, as an error of the machine, not a fail
of the learner's file."""

from __future__ import annotations

import importlib.util

from lumen_ex.core import catalog
from lumen_ex.core.results import Status
from lumen_ex.harness.check import run_check
from lumen_ex.learner.progress import list_exercises

EX14 = catalog.load().find(14)


def _without_triton(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))


def test_the_exercise_says_what_is_missing_and_how_to_add_it(monkeypatch):
    assert EX14.kernel == "triton"
    _without_triton(monkeypatch)
    assert "pip install 'lumen-ex[triton]'" in (EX14.missing() or "")
    assert catalog.load().find(13).missing() is None      # an exercise without a kernel needs nothing more


def test_list_marks_it_and_a_check_grades_nothing(monkeypatch, tmp_path):
    _without_triton(monkeypatch)
    _, rows = list_exercises(None)
    assert {r.number: r.status for r in rows}[14] == "needs triton"
    ws = tmp_path / "ws"
    (ws / EX14.dir).mkdir(parents=True)
    (ws / "lumen-ex.toml").write_text("")
    (ws / EX14.dir / EX14.file).write_text(EX14.stub_path.read_text())
    result = run_check(14, workspace=ws, sandbox="none", seed=1, record=False)
    assert result.status is Status.ERROR and result.score == 0
    (row,) = result.tests
    assert row.diagnosis is not None and row.diagnosis.kind == "grader"
    assert "lumen-ex[triton]" in row.message and row.max_score == EX14.max_score
