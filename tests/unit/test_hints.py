"""Which hint `lumen-ex hint` shows: the one that answers the last check's first failure first
(exercise.toml [hint_for]), else the next in order (src/lumen_ex/learner/progress.py)."""

from __future__ import annotations

import dataclasses

from lumen_ex.core import catalog
from lumen_ex.core.workspace import Workspace
from lumen_ex.learner.progress import choose_hint, next_hint, seen_hints


def _ws(tmp_path) -> Workspace:
    return Workspace.create(tmp_path / "ws", catalog.load())


def test_every_built_in_exercise_maps_its_mistakes_to_hints_that_exist():
    cat = catalog.load()
    assert not [p for p in catalog.validate(cat) if "hint_for" in p]
    for ex in cat.exercises:
        assert ex.hint_for, f"exercise {ex.number} has no [hint_for]"
        assert all(0 <= i < len(ex.hints) for i in ex.hint_for.values())


def test_a_hint_number_out_of_range_is_a_manifest_problem():
    ex = catalog.load().find(1)
    bad = dataclasses.replace(ex, hint_for={"no-scale": len(ex.hints)})
    problems = catalog.validate(catalog.Catalog("x", (bad,)))
    assert any("[hint_for] 'no-scale'" in p and f"from 1 to {len(ex.hints)}" in p for p in problems), problems


def test_choose_hint_prefers_the_failures_hint_then_goes_in_order():
    ex = dataclasses.replace(catalog.load().find(1), hint_for={"no-scale": 1, "shape": 0})
    assert choose_hint(ex, [], ["no-scale", "values"]) == (1, "no-scale")
    assert choose_hint(ex, [1], ["no-scale", "values"]) == (0, "")            # shown: back to the order
    assert choose_hint(ex, [], ["other", "shape"]) == (0, "shape")              # the kind when no mistake maps
    assert choose_hint(ex, [], []) == (0, "")
    everything = list(range(len(ex.hints)))
    assert choose_hint(ex, everything, ["no-scale"]) == (1, "no-scale")         # all shown: the relevant again
    assert choose_hint(ex, everything, []) == (len(ex.hints) - 1, "")


def test_the_workspace_remembers_the_failure_and_the_order_hints_were_shown(tmp_path):
    ws = _ws(tmp_path)
    ex = catalog.load().find(1)
    mistake = next(k for k, i in ex.hint_for.items() if i > 0)
    ws.record_check(ex.slug, "fail", 2.0, 10.0, (mistake, "values"))
    first = next_hint("1", ws.root)
    assert (first.index, first.because, first.more) == (ex.hint_for[mistake], mistake, True)
    second = next_hint("1", ws.root)
    assert (second.index, second.because) == (0, "")
    assert [h.index for h in seen_hints("1", ws.root)] == [ex.hint_for[mistake], 0]
    ws.record_check(ex.slug, "pass", 10.0, 10.0, ())
    assert ws.last_failure(ex.slug) == []                       # a pass leaves no failure to answer
    assert next_hint("1", ws.root).because == ""


def test_a_workspace_from_before_keeps_the_hints_it_had_seen(tmp_path):
    ws = _ws(tmp_path)
    data = {"exercises": {"attention": {"hints_shown": 2}}}
    ws._save(data)
    assert ws.hints_revealed("attention") == [0, 1]
    assert next_hint("1", ws.root).index == 2
