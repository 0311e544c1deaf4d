"""A rerun of `lumen-ex grade` never keeps a result that is no longer true (src/lumen_ex/classroom/store.py).

Through the real entry point, under bwrap: a student edits a file (regraded, with the reason), a
result that was a grader error ("no result from the cluster job") is retried, a bumped catalogue
version makes every result stale (a copy of the built-in pack, through LUMEN_EX_PATH), and so does an
edit to the pack that nobody gave a new version (the exercise's files are hashed), `--status`
says all this without grading, `--format` on a resumed run writes the views of kept results, and a
SIGKILL in the middle of `--force` leaves the results from before it, never a mix.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import CORPORA, LUMEN_EX, pack_copy, requires_bwrap
from helpers.classes import grade, put
from proc_support import running_with, wait_until

from lumen_ex.classroom import store as grade_store
from lumen_ex.classroom.store import record
from lumen_ex.classroom.ungraded import grader_error_result
from lumen_ex.core import catalog
from lumen_ex.core.results import SandboxInfo

CAT = catalog.load()
EX1 = CAT.find(1)
REF1 = EX1.reference_path
BUGGY = CORPORA["attention"] / "buggy" / "no_scale.py"


def records(out: Path) -> dict[str, dict]:
    """Student key -> the record of its exercise 1 result."""
    return {p.parent.name: json.loads(p.read_text())
            for p in sorted((out / "results").glob(f"*/{EX1.dir}{grade_store.RECORD_SUFFIX}"))}


def document(out: Path, key: str) -> dict:
    return json.loads((out / "results" / key / f"{EX1.dir}.json").read_text())


def bumped_catalogue(tmp: Path, version: str) -> Path:
    """The built-in pack copied with another version (LUMEN_EX_PATH puts it in place of the built-in one)."""
    copy = pack_copy(tmp, version=version)
    assert catalog.load({"LUMEN_EX_PATH": str(copy)}).version == version
    return copy


@requires_bwrap
@pytest.mark.slow
def test_a_rerun_regrades_what_changed_and_says_why(tmp_path):
    """A rerun regrades what changed, and says why. Over 30 s: five real `lumen-ex grade` runs of a class."""
    subs = tmp_path / "submissions"
    put(subs / "alice", EX1.file, REF1)
    put(subs / "bob", EX1.file, BUGGY)
    out = tmp_path / "out"
    args = [str(subs), "-e", "1", "--out", str(out), "--sandbox", "bwrap", "--jobs", "2"]
    first = grade(args, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert [p.name for p in (out / ".logs").glob("grader-*.log")] == ["grader-0.log"]    # two checks: one process
    seed = json.loads((out / "class.json").read_text())["seed"]
    before = records(out)
    assert set(before) == {"alice", "bob"}
    for key, rec in before.items():
        fp = rec["fingerprint"]
        assert fp["seed"] == seed and document(out, key)["seed"] == seed
        assert fp["versions"] == {"lumen_ex": document(out, key)["versions"]["lumen_ex"], "catalog": CAT.version}
        assert fp["files"][EX1.path] == document(out, key)["source"]["sha256"]     # exactly the bytes graded

    # nothing changed: nothing is graded, and --status says so
    same = grade(args, tmp_path)
    assert "nothing left to grade" in same.stdout and records(out) == before
    status = grade([*args, "--status"], tmp_path)
    assert status.returncode == 0 and "2 up to date" in status.stdout, status.stdout

    # bob fixes his file; alice's result is a grader error from the cluster
    (subs / "bob" / EX1.file).write_text(REF1.read_text())
    record(out, "alice", EX1, grader_error_result(
        EX1, "no result from the cluster job for index 0 (the pod failed, was not run, or ran past its deadline)",
        sandbox=SandboxInfo("docker", True), device="cpu", seed=seed))
    status = grade([*args, "--status"], tmp_path)
    assert status.returncode == 1, status.stdout
    assert "1 failed, 1 stale" in status.stdout
    assert records(out)["bob"] == before["bob"]                                      # --status grades nothing
    rerun = grade(args, tmp_path)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"regrading bob {EX1.dir}: {EX1.path} changed" in rerun.stdout, rerun.stdout
    assert f"regrading alice {EX1.dir}: the last grading was a grader error (no result from the cluster job" \
        in rerun.stdout
    assert "grading 2 checks of 2 students" in rerun.stdout
    assert document(out, "bob")["status"] == "pass" and document(out, "alice")["status"] == "pass"
    after = records(out)
    assert after["bob"]["fingerprint"]["files"] != before["bob"]["fingerprint"]["files"]

    # a new catalogue version: every result is stale; regrading one student records the new version
    env = {"LUMEN_EX_PATH": str(bumped_catalogue(tmp_path, "2099.1.1"))}
    status = grade([*args, "--status"], tmp_path, env)
    assert status.stdout.count(f"the catalogue {CAT.version} -> 2099.1.1") == 2 and "2 stale" in status.stdout, \
        status.stdout
    one = grade([*args, "--student", "alice"], tmp_path, env)
    assert f"regrading alice {EX1.dir}: the catalogue {CAT.version} -> 2099.1.1" in one.stdout, one.stdout
    assert document(out, "alice")["versions"]["catalog"] == "2099.1.1"
    assert records(out)["alice"]["fingerprint"]["versions"]["catalog"] == "2099.1.1"
    assert records(out)["bob"] == after["bob"]

    # --format on a resumed run writes the views of the results it keeps (alice's), not only of bob's
    views = grade([*args, "--format", "junit", "--format", "gradescope"], tmp_path, env)
    assert "resuming: 1 checks already graded are kept" in views.stdout and "regrading alice" not in views.stdout
    assert f"regrading bob {EX1.dir}: the catalogue {CAT.version} -> 2099.1.1" in views.stdout
    for key in ("alice", "bob"):
        assert (out / "results" / key / f"{EX1.dir}.junit.xml").is_file()
        assert (out / "results" / key / f"{EX1.dir}.gradescope.json").is_file()

    # the same version, other points: the results are stale by the exercise's hashed files, and the
    # regraded one has the new maximum in its document and in the gradebook
    edited = pack_copy(tmp_path / "edited", version="2099.1.1",
                       edits={f"{EX1.dir}/exercise.toml": ("\ncontract = 1\n", "\ncontract = 3\n")})
    env = {"LUMEN_EX_PATH": str(edited)}
    status = grade([*args, "--status"], tmp_path, env)
    assert status.stdout.count("the exercise changed: exercise.toml") == 2 and "2 stale" in status.stdout, \
        status.stdout
    again = grade([*args, "--student", "alice"], tmp_path, env)
    assert f"regrading alice {EX1.dir}: the exercise changed: exercise.toml" in again.stdout, again.stdout
    assert document(out, "alice")["max_score"] == EX1.max_score + 2
    assert f"{EX1.max_score + 2:g}" in (out / "gradebook.csv").read_text()


@requires_bwrap
@pytest.mark.slow
def test_a_kill_during_force_never_leaves_a_mix(tmp_path):
    """A kill during --force never leaves a mix. Over 30 s: a class graded, killed mid-run, graded again."""
    subs = tmp_path / "submissions"
    for i in range(3):
        put(subs / f"s{i}", EX1.file, REF1 if i % 2 == 0 else BUGGY)
    out = tmp_path / "out"
    args = [str(subs), "-e", "1", "--out", str(out), "--sandbox", "bwrap", "--jobs", "1", "--seed", "4"]
    first = grade(args, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    before = records(out)
    old_run = {r["run"] for r in before.values()}
    assert len(old_run) == 1

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORCE_COLOR", "CLICOLOR"))}
    proc = subprocess.Popen([LUMEN_EX, "grade", *args, "--force"], cwd=tmp_path, env={**env, "NO_COLOR": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    staged = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None and not staged:
        staged = list((out / grade_store.STAGING).glob(f"*/results/*/{EX1.dir}.json"))
        time.sleep(0.05)
    assert staged and proc.poll() is None, "the --force run finished before a new result was staged"
    proc.send_signal(signal.SIGKILL)        # no clean-up of its own
    proc.wait(timeout=30)
    wait_until(lambda: not running_with(str(out)), 120, step=0.2)   # its grading processes finish and go
    assert records(out) == before, "a killed --force run replaced some results"

    kept = grade(args, tmp_path)                                          # without --force: all kept
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "an earlier --force run did not finish" in kept.stdout and "nothing left to grade" in kept.stdout
    assert records(out) == before and not list((out / grade_store.STAGING).glob("*/results"))

    forced = grade([*args, "--force"], tmp_path)                          # a complete --force: all new
    assert forced.returncode == 0, forced.stdout + forced.stderr
    after = records(out)
    assert set(after) == set(before) and len({r["run"] for r in after.values()} | old_run) == 2
    assert len({r["run"] for r in after.values()}) == 1


def test_a_swap_cut_short_is_finished_by_the_next_run(tmp_path):
    """The journal of src/lumen_ex/classroom/store.py: a kill between the moves is rolled forward."""
    out = tmp_path / "out"
    for key in ("a", "b"):
        grade_store.write_result(out, key, EX1.dir, '{"old": 1}\n', None, "")
    staged = grade_store.staging_dir(out, "run-2")
    for key in ("a", "b"):
        grade_store.write_result(staged, key, EX1.dir, '{"new": 2}\n', None, "")
    (out / grade_store.STAGING / grade_store.JOURNAL).write_text(json.dumps({"staged": "run-2"}))
    os.replace(grade_store.document_path(staged, "a", EX1.dir), grade_store.document_path(out, "a", EX1.dir))
    notes = grade_store.recover(out)          # as if killed after moving a's result
    assert notes == ["an earlier --force run was stopped while it stored its results: they are now all in place"]
    assert {k: grade_store.document_path(out, k, EX1.dir).read_text() for k in "ab"} == \
        {"a": '{"new": 2}\n', "b": '{"new": 2}\n'}
    assert not (out / grade_store.STAGING / grade_store.JOURNAL).exists() and not staged.exists()


@pytest.mark.parametrize("old,new,expected", [
    ({"entry": {"entry": "lee.zip"}}, {"entry": {"entry": "lee"}}, "the stored result is of another entry (lee.zip)"),
    ({"versions": {"lumen_ex": "0.1.0"}}, {"versions": {"lumen_ex": "0.2.0"}}, "lumen-ex 0.1.0 -> 0.2.0"),
    ({"versions": {"image": "sha256:a"}}, {"versions": {"image": "sha256:b"}}, "the grader image sha256:a -> sha256:b"),
    ({"seed": 1}, {"seed": 2}, "the class seed 1 -> 2"),
    ({"exercise": {"suite/test_a.py": "1", "exercise.toml": "1"}},
     {"exercise": {"suite/test_a.py": "2", "exercise.toml": "1"}}, "the exercise changed: suite/test_a.py"),
    ({}, {"exercise": {"exercise.toml": "1"}}, "the exercise changed: exercise.toml"),
])
def test_each_difference_is_named(old, new, expected):
    base = grade_store.fingerprint(name="lee", entry="lee", kind="folder", files={}, problem="",
                                   versions={"lumen_ex": "0.1.0", "catalog": "1"}, seed=1, device="cpu")
    was = {**base, **old, "versions": {**base["versions"], **old.get("versions", {})}}
    now = {**base, **new, "versions": {**base["versions"], **new.get("versions", {})}}
    if "entry" in old:
        was["entry"] = {**base["entry"], **old["entry"]}
        now["entry"] = {**base["entry"], **new["entry"]}
    assert any(expected in why for why in grade_store.differences(was, now))
    assert grade_store.differences(base, base) == []
