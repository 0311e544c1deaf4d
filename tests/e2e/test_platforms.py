"""The grader image as a Gradescope autograder and a PrairieLearn external grader (src/lumen_ex/classroom/platforms.py).

On the host, the platform entry point is run with a host launcher (bwrap where it works) on
submission folders laid out as each platform lays them out; in the grader image it is run exactly as
each platform runs it: Gradescope's documented local run (``docker run -v SUB:/autograder/submission
-v RES:/autograder/results IMG /autograder/run_autograder``) and PrairieLearn's (``/grade`` bound,
the entry point named in the question's info.json), with PrairieLearn's container limits. Each
results.json is parsed back and checked field by field; a hostile submission tries to forge it.
"""

from __future__ import annotations

import subprocess

import pytest
from conftest import CORPORA
from docker_support import needs_docker
from helpers.platforms import load, run_on_host, submission

from lumen_ex.classroom import platforms
from lumen_ex.core import catalog

CAT = catalog.load()
EX1, EX2 = CAT.find(1), CAT.find(2)
CORRECT_1 = CORPORA["attention"] / "correct" / "where_mask.py"
NO_SCALE_1 = CORPORA["attention"] / "buggy" / "no_scale.py"
CORRECT_2 = CORPORA["kv_cache"] / "correct" / "loop_over_heads.py"

FORGER = '''
import json, os, time
FORGED = {"score": 1000, "tests": [], "gradable": True, "output": "forged"}
PATHS = ("/autograder/results/results.json", "/grade/results/results.json")


def forge():
    for path in PATHS:
        try:
            with open(path, "w") as f:
                json.dump(FORGED, f)
        except OSError:
            pass


forge()
if os.fork() == 0:                 # and keep at it from a detached process, after the grader is done
    os.setsid()
    for _ in range(600):
        forge()
        time.sleep(0.05)
    os._exit(0)
''' + CORRECT_1.read_text()


# -- field by field, on the host ---------------------------------------------------------------


@pytest.mark.slow
def test_gradescope_results_for_a_flat_upload_of_one_exercise_and_a_missing_other(tmp_path):
    # Gradescope users drag files in: attention.py at the top, no kv_cache.py at all.
    sub = submission(tmp_path / "submission", {"attention.py": NO_SCALE_1})
    doc = run_on_host("gradescope", sub, tmp_path / "results" / "results.json", "1", "2")
    assert set(doc) >= {"score", "execution_time", "output", "tests", "visibility", "stdout_visibility"}
    tests = doc["tests"]
    numbers = [t["number"] for t in tests]
    assert len(set(numbers)) == len(numbers) and {n.split(".")[0] for n in numbers} == {"1", "2"}
    for t in tests:
        assert set(t) >= {"name", "score", "max_score", "output", "visibility"}
        assert 0 <= t["score"] <= t["max_score"] or t["max_score"] == 0
    ex1 = [t for t in tests if t["number"].startswith("1.")]
    ex2 = [t for t in tests if t["number"].startswith("2.")]
    assert any(t.get("status") == "failed" and "no-scale" in t["output"] for t in ex1)
    assert any(t.get("status") == "passed" for t in ex1)
    assert ex2 == [t for t in ex2 if t["score"] == 0] and len(ex2) == 1
    assert ex2[0]["status"] == "failed" and "kv_cache.py" in ex2[0]["output"]
    assert doc["score"] == pytest.approx(sum(t["score"] for t in tests), abs=1e-3)
    assert 0 < doc["score"] < EX1.max_score
    assert "lumen-ex check 1" in doc["output"] and "lumen-ex check 2" in doc["output"]
    assert [e["exercise"]["number"] for e in doc["extra_data"]["exercises"]] == [1, 2]


@pytest.mark.slow
def test_prairielearn_results_for_a_workspace_shaped_submission(tmp_path):
    sub = submission(tmp_path / "student", {f"{EX1.dir}/{EX1.file}": CORRECT_1,
                                             f"{EX2.dir}/{EX2.file}": CORRECT_2})
    doc = run_on_host("prairielearn", sub, tmp_path / "results" / "results.json", "1", "2")
    assert doc["gradable"] is True and "format_errors" not in doc
    assert doc["score"] == pytest.approx(1.0)
    for t in doc["tests"]:
        assert set(t) >= {"name", "description", "points", "max_points", "message", "output"}
        assert t["points"] == t["max_points"]
    # each test's points are rounded to 4 decimals (a group's points shared by 3 tests, say)
    assert sum(t["max_points"] for t in doc["tests"]) == pytest.approx(EX1.max_score + EX2.max_score, abs=0.01)


@pytest.mark.slow
def test_one_exercise_from_the_environment_and_a_score_between_zero_and_one(tmp_path, monkeypatch):
    monkeypatch.setenv(platforms.EXERCISES_ENV, "1")
    sub = submission(tmp_path / "student", {"attention.py": NO_SCALE_1})
    doc = run_on_host("prairielearn", sub, tmp_path / "r" / "results.json")
    assert doc["gradable"] is True and 0 < doc["score"] < 1
    assert doc["score"] == pytest.approx(sum(t["points"] for t in doc["tests"]) / EX1.max_score, abs=1e-3)
    assert any("no-scale" in t["message"] for t in doc["tests"])


def test_an_exercise_the_catalogue_lacks_is_not_gradable_and_says_why(tmp_path):
    sub = submission(tmp_path / "student", {"attention.py": CORRECT_1})
    pl = run_on_host("prairielearn", sub, tmp_path / "pl.json", "99")
    assert pl["gradable"] is False and pl["score"] == 0
    assert any("no exercise '99'" in e for e in pl["format_errors"])
    gs = run_on_host("gradescope", sub, tmp_path / "gs.json", "99")
    assert gs["score"] == 0 and "not graded" in gs["output"]


# -- in the grader image, as each platform runs it ----------------------------------------------


def docker_run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "run", "--rm", "--network", "none", "--pull", "never", *args],
                          capture_output=True, text=True, timeout=timeout)


def current_image() -> str:
    from lumen_ex.image import tag as image

    return image.status().ref


@needs_docker
@pytest.mark.slow
def test_gradescope_local_run_of_the_image(tmp_path):
    sub = submission(tmp_path / "submission", {f"{EX1.dir}/{EX1.file}": NO_SCALE_1, "kv_cache.py": CORRECT_2})
    results = tmp_path / "results"
    results.mkdir()
    # As gradescope/autograder_samples docs/manual_docker.md runs an autograder image locally.
    proc = docker_run("-v", f"{sub}:/autograder/submission", "-v", f"{results}:/autograder/results",
                      current_image(), "/autograder/run_autograder")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load("gradescope", results / "results.json")
    ex1 = [t for t in doc["tests"] if t["number"].startswith("1.")]
    ex2 = [t for t in doc["tests"] if t["number"].startswith("2.")]
    assert any(t.get("status") == "failed" and "no-scale" in t["output"] for t in ex1)
    assert all(t.get("status", "passed") == "passed" for t in ex2) and ex2
    assert EX2.max_score < doc["score"] < EX1.max_score + EX2.max_score
    sandboxes = {e["sandbox"] for e in doc["extra_data"]["exercises"]}
    assert sandboxes == {"docker"} and all(e["isolated"] for e in doc["extra_data"]["exercises"])


@needs_docker
@pytest.mark.slow
def test_prairielearn_external_grader_run_of_the_image(tmp_path):
    grade = tmp_path / "grade"
    submission(grade / "student", {"attention.py": CORRECT_1})
    (grade / "data").mkdir()
    (grade / "data" / "data.json").write_text("{}")
    # PrairieLearn's grader host: /grade bound, no network, 2 GiB without swap, 1024 pids, the
    # entry point and environment from the question's info.json.
    proc = docker_run("-v", f"{grade}:/grade", "--memory", "2g", "--memory-swap", "2g",
                      "--pids-limit", "1024", "--ipc", "private", "--env", f"{platforms.EXERCISES_ENV}=1",
                      "--entrypoint", "/opt/lumen/venv/bin/lumen-ex-platform", current_image(), "prairielearn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load("prairielearn", grade / "results" / "results.json")
    assert doc["gradable"] is True and doc["score"] == pytest.approx(1.0)
    assert len(doc["tests"]) > 5 and all(t["points"] == t["max_points"] for t in doc["tests"])


@needs_docker
@pytest.mark.slow
def test_a_submission_cannot_forge_the_platform_results(tmp_path):
    sub = submission(tmp_path / "submission", {"attention.py": FORGER})
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)    # even where the platform leaves the folder open to everyone
    proc = docker_run("-v", f"{sub}:/autograder/submission", "-v", f"{results}:/autograder/results",
                      "--env", f"{platforms.EXERCISES_ENV}=1", current_image(), "/autograder/run_autograder")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load("gradescope", results / "results.json")
    # Ours, not the forger's: lumen-ex's tests, a score within the maximum that is their sum. (The
    # forger's own os/open calls make its code unverifiable to the source scan, so it does not
    # score full marks either: src/lumen_ex/harness/source_scan.py.)
    assert doc["output"] != "forged" and doc["tests"], doc
    assert 0 <= doc["score"] <= EX1.max_score
    assert doc["score"] == pytest.approx(sum(t["score"] for t in doc["tests"]))
    assert sorted(p.name for p in results.iterdir()) == ["results.json"]

