"""Every exercise's corpus, graded for real by `lumen-ex dev check` on the built-in pack: every correct
solution gets full marks, every buggy one fails with the diagnosis its header declares, the stub
fails, the reference passes under several seeds, and every known mistake is named by some file.

The exercises come from the built-in pack (src/lumen_ex/exercises, one folder each); each one's
corpus is <folder>/corpus/correct/ and <folder>/corpus/buggy/, and each buggy file starts with header
comments (src/lumen_ex/authoring/corpus.py)::

    # bug: <one line>                          what the learner got wrong
    # expect-kind: <kind>                      the diagnosis kind of the FIRST failing test
    # expect-misconception: <mistake id>       (optional) the named mistake that test must report
    # expect-test: <test id>                   (optional) which hidden test must fail first

The command runs once for the session (the installed `lumen-ex`, so the CLI, the batch grader, the
sandbox and the harness are all the real ones: the ``corpus_report`` fixture of tests/conftest.py,
which tests/e2e/test_seed_stability.py reads too); each file's test below reads its own lines of the
JSON report (one per seed), so a failure names the file and the seed. The reference is also graded
under every sandbox here, which must agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import BUILTIN, CORPUS_SEEDS, bwrap_ok

from lumen_ex.authoring.corpus import corpus_files
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.results import Status

EXERCISES = list(BUILTIN.values())
# The least each corpus must hold: (correct files, buggy files).
MINIMUM = {"attention": (7, 14), "kv_cache": (6, 10), "prefill": (5, 10), "rope": (5, 10),
           "flash_attention": (6, 12), "paged_decode": (6, 12), "gqa_module": (5, 10),
           "attention_backward": (5, 10), "flash_backward": (5, 10), "sink_window": (5, 10), "int8_kv": (5, 10),
           "speculative_verify": (5, 10), "tiny_model": (5, 10), "triton_flash": (5, 10)}
# Every test that reads the one dev check run goes to the same xdist worker (pyproject.toml: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("corpus")


@pytest.fixture(scope="session")
def report(corpus_report) -> dict:
    return corpus_report


def entries(report: dict, where: str) -> list[dict]:
    found = [f for f in report["files"] if f["where"] == where]
    assert found, f"dev check graded no {where}"
    return found


def by_exercise():
    return pytest.mark.parametrize("ex", EXERCISES, ids=[ex.suite for ex in EXERCISES])


def by_file(kind: str):
    cases = [pytest.param(item, id=f"{item.exercise.suite}-{item.path.stem}")
             for ex in EXERCISES for item in corpus_files(ex, kind)]
    return pytest.mark.parametrize("item", cases)


def test_every_exercise_has_a_corpus():
    assert EXERCISES, "the built-in pack lists no exercise"
    for ex in EXERCISES:
        assert (ex.corpus_dir / "correct").is_dir() and (ex.corpus_dir / "buggy").is_dir(), \
            f"exercise {ex.number} ({ex.slug}) has no corpus: add {ex.dir}/corpus/correct and buggy"
        assert ex.suite in MINIMUM, f"exercise {ex.number} ({ex.slug}): say in MINIMUM how big its corpus must be"


@by_exercise()
def test_corpus_is_big_enough(ex: Exercise):
    correct, buggy = corpus_files(ex, "correct"), corpus_files(ex, "buggy")
    least_correct, least_buggy = MINIMUM[ex.suite]
    assert len(correct) >= least_correct, [c.path.name for c in correct]
    assert len(buggy) >= least_buggy, [b.path.name for b in buggy]


@pytest.mark.slow
def test_dev_check_finds_no_problem(report):
    assert report["problems"] == [], "\n".join(f"{p['where']}: {p['what']}" for p in report["problems"])
    assert report["ok"] is True
    assert {e["number"] for e in report["exercises"]} == {ex.number for ex in EXERCISES}


@by_file("correct")
@pytest.mark.slow
def test_correct_solution_gets_full_score(report, item):
    found = entries(report, item.label)
    assert {e["seed"] for e in found} >= set(CORPUS_SEEDS)
    for entry in found:
        assert entry["ok"] and entry["outcome"] == "full marks", entry


@by_file("buggy")
@pytest.mark.slow
def test_buggy_solution_fails_with_declared_diagnosis(report, item):
    found = entries(report, item.label)
    assert {e["seed"] for e in found} >= set(CORPUS_SEEDS)
    for entry in found:
        assert entry["outcome"] != "false pass", f"FALSE PASS of {item.path.name} ({item.headers['bug']}): {entry}"
        assert entry["ok"] and entry["outcome"] == "fails as declared", entry


@by_exercise()
@pytest.mark.slow
def test_stub_fails(report, ex: Exercise):
    (entry,) = entries(report, f"{ex.dir}/{ex.file}")
    assert entry["ok"] and entry["outcome"] == "fails", entry


@by_exercise()
@pytest.mark.slow
def test_reference_scores_full_marks_under_every_seed(report, ex: Exercise):
    found = entries(report, f"{ex.dir}/reference.py")
    assert sorted(e["seed"] for e in found) == sorted(report["seeds"] + report["close_seeds"])
    assert len(found) >= 5
    assert all(e["ok"] and e["outcome"] == "full marks" for e in found), found


@by_exercise()
@pytest.mark.slow
def test_every_own_mistake_is_named_by_a_corpus_file(report, ex: Exercise):
    (summary,) = [e for e in report["exercises"] if e["number"] == ex.number]
    missing = [p for p in report["problems"] if p["where"] == ex.dir and "named by no buggy" in p["what"]]
    assert summary["mistakes_named"] and missing == [], missing


SANDBOXES = ["bwrap", "none"] if bwrap_ok() else ["none"]


@by_exercise()
@pytest.mark.slow
def test_reference_full_score_under_every_sandbox(grade, ex: Exercise):
    """The reference, test by test the same under bwrap and the unisolated mode. bwrap's worker is
    forked from the session's zygote (conftest.py ``grade``), as `lumen-ex grade`, watch and the
    playground start it; a worker started on its own is held to the same verdicts by
    tests/sandbox/test_zygote.py and grades the reference cold in tests/sandbox/test_docker_backend.py."""
    results = {sb: grade(ex.number, ex.reference_path, sandbox=None if sb == "bwrap" else sb, seed=4321)
               for sb in SANDBOXES}
    for sb, result in results.items():
        assert result.sandbox.backend == sb
        assert result.status is Status.PASS, f"{sb}: {result.message}"
        assert result.score == pytest.approx(result.max_score), f"{sb}: {result.message}"
    views = {sb: [(t.id, t.status, round(t.score, 6), round(t.max_score, 6)) for t in r.tests]
             for sb, r in results.items()}
    first = next(iter(views.values()))
    for sb, view in views.items():
        assert view == first, f"per-test results differ between sandboxes ({sb})"
    if not bwrap_ok():
        pytest.skip("bubblewrap unavailable: only the unisolated mode was compared")


@pytest.mark.slow
def test_the_report_lists_every_file_once_per_seed(report):
    expected = {item.label for ex in EXERCISES for item in corpus_files(ex)}
    graded = {f["where"] for f in report["files"] if f["what"] in ("correct", "buggy")}
    assert graded == expected
    assert report["seeds"] == list(CORPUS_SEEDS)
    seen = [(f["where"], f["seed"]) for f in report["files"]]
    assert len(seen) == len(set(seen)), "a file was graded twice under one seed"
    for where in expected:
        assert {f["seed"] for f in report["files"] if f["where"] == where} >= set(CORPUS_SEEDS), where
    assert all(Path(p["root"]).is_dir() for p in report["packs"])
