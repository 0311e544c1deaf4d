"""`lumen-ex grade` through the real entry point: a mixed class, resume, crash, hang, Ctrl-C, refusal.

Every class here is graded for real (sandboxed workers, hidden suites). The crash and hang paths use
real hostile submissions under the unisolated mode, where a submission can reach the grading process
itself: one SIGKILLs it, one SIGSTOPs it. Ctrl-C is a real SIGINT sent to the `lumen-ex grade`
process in the middle of a run, after which no process it started may remain.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from conftest import CORPORA, CORPUS, LUMEN_EX, ROOT, best_sandbox, interruptible, requires_bwrap, workspace_with
from helpers.classes import CAT, EX1, EX2, REF1, SHA, grade, make_class, put, zip_folder
from proc_support import descendants, running_with, still_running_after, wait_until

from lumen_ex.classroom.batch_types import Job
from lumen_ex.classroom.grading_processes import GradingProcess
from lumen_ex.classroom.messages import JobDone, WorkerPid
from lumen_ex.classroom.scheduler import processes_for
from lumen_ex.classroom.submission_limits import SubmissionRefused
from lumen_ex.classroom.submissions import locate, unwrap
from lumen_ex.classroom.zips import extract_zip

STOP_PARENT = '''
import os, signal
import torch

def scaled_dot_product_attention(q, k, v, mask=None):
    os.kill(os.getppid(), signal.SIGSTOP)   # freeze the grading process that called us
    return q, q

def causal_mask(L_q, L_k=None, device=None):
    os.kill(os.getppid(), signal.SIGSTOP)
    return torch.ones(L_q, L_k or L_q, dtype=torch.bool)
'''


def docs_of(out: Path) -> dict[tuple[str, str], dict]:
    return {(p.parent.name, p.stem): json.loads(p.read_text())
            for p in sorted((out / "results").glob("*/*.json")) if p.name not in ("submission.json", "submitted.json")
            and p.stem.count(".") == 0}


def gradebook(out: Path) -> dict[str, dict]:
    return {row["student"]: row for row in csv.DictReader(io.StringIO((out / "gradebook.csv").read_text()))}


# -- a mixed class ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    subs = make_class(root)
    out = root / "out"
    args = [str(subs), "-e", "1", "-e", "2", "--out", str(out), "--jobs", "2", "--sandbox", "bwrap", "--seed", "5",
            "--format", "gradescope", "--format", "junit"]
    started = time.monotonic()
    proc = grade(args, root)
    return root, subs, out, args, proc, time.monotonic() - started


@requires_bwrap
@pytest.mark.slow
def test_mixed_class_results(mixed):
    root, subs, out, args, proc, _ = mixed
    assert proc.returncode == 0, proc.stdout + proc.stderr          # eve's unsafe zip is her fail, not an error
    assert "grading 10 checks of 5 students" in proc.stdout
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] for line in progress] == [f"[{i}/10" for i in range(1, 11)]
    # ten checks with --jobs 2: two grading processes (one per 8 checks, scheduler.processes_for)
    assert sorted(p.name for p in (out / ".logs").glob("grader-*.log")) == ["grader-0.log", "grader-1.log"]
    assert all("/min, ETA" in line and "failed" in line and "errors" in line for line in progress)
    assert any(" now: " in line for line in progress), proc.stdout      # who the other process grades meanwhile
    docs = docs_of(out)
    assert set(docs) == {(s, ex.dir) for s in ("alice", "bob", "carol", "dave", "eve") for ex in (EX1, EX2)}
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "docs" / "result.schema.json").read_text())
    for doc in docs.values():
        jsonschema.validate(doc, schema)
        assert doc["sandbox"]["backend"] == "bwrap" and doc["sandbox"]["isolated"] is True
    status = {k: (d["status"], d["score"]) for k, d in docs.items()}
    assert status[("alice", EX1.dir)] == ("pass", 10) and status[("alice", EX2.dir)] == ("pass", 11)
    assert status[("bob", EX2.dir)] == ("pass", 11) and status[("bob", EX1.dir)][0] == "fail"
    assert any(t["diagnosis"] and t["diagnosis"].get("misconception") == "no-scale"
               for t in docs[("bob", EX1.dir)]["tests"])
    assert docs[("carol", EX1.dir)]["status"] == "fail" and docs[("carol", EX1.dir)]["message"] == \
        f"no {EX1.path} in the submission"
    assert any(t["diagnosis"] and t["diagnosis"].get("misconception") == "gqa-repeat"
               for t in docs[("carol", EX2.dir)]["tests"])
    assert docs[("dave", EX1.dir)]["status"] == "fail" and docs[("dave", EX1.dir)]["score"] < 10
    for ex in (EX1, EX2):      # refused as a whole: nothing of eve's zip was graded
        assert docs[("eve", ex.dir)]["status"] == "fail"
        assert "would be written outside its folder" in docs[("eve", ex.dir)]["message"]
    assert not list(root.rglob("evil.py")) and not (root.parent / "evil.py").exists()
    assert not glob.glob(str(out / ".scratch-*")), "the scratch folder was left behind"
    info = json.loads((out / "results" / "carol" / "submission.json").read_text())
    assert info["kind"] == "zip" and info["graded"] == {EX2.slug: EX2.path}
    assert json.loads((out / "results" / "dave" / "submission.json").read_text())["commit"] == SHA


@requires_bwrap
def test_gradebook_is_the_documents(mixed):
    _, _, out, _, _, _ = mixed
    docs = docs_of(out)
    book = gradebook(out)
    assert book.pop("notes.txt")["status"] == "skipped"        # a row with the reason, not only a note
    assert list(book) == ["alice", "bob", "carol", "dave", "eve"]
    assert list(next(iter(book.values())))[:12] == ["student", "key", EX1.slug, EX2.slug, "total", "max", "percent",
                                                    "status", "first_failure", "commit", "seed", "note"]
    for student, row in book.items():
        scores = [docs[(student, ex.dir)]["score"] for ex in (EX1, EX2)]
        assert [float(row[ex.slug]) for ex in (EX1, EX2)] == pytest.approx(scores, abs=1e-4)
        assert float(row["total"]) == pytest.approx(sum(scores), abs=1e-3)
        assert float(row["max"]) == EX1.max_score + EX2.max_score
    assert {s: r["status"] for s, r in book.items()} == {
        "alice": "pass", "bob": "fail", "carol": "fail", "dave": "fail", "eve": "fail"}
    assert book["alice"]["first_failure"] == ""
    assert book["bob"]["first_failure"].startswith(f"{EX1.path}: ") and "(misconception: no-scale)" in \
        book["bob"]["first_failure"]
    assert book["carol"]["first_failure"] == f"{EX1.path}: no {EX1.path} in the submission"
    assert "SystemExit" in book["dave"]["first_failure"] and book["dave"]["commit"] == SHA


@requires_bwrap
def test_class_report(mixed):
    _, _, out, _, proc, _ = mixed
    report = (out / "report.md").read_text()
    docs = docs_of(out)
    for heading in ("## Scores", "### Distribution of totals", "## Most frequent misconceptions",
                    "## Pass rate per test", "## Checks that need a look"):
        assert heading in report
    bands = [line for line in report.splitlines() if line.startswith("| ") and " % | " in line and "–" in line]
    assert len(bands) == 10 and sum(int(b.split("|")[2]) for b in bands) == 5
    assert "| `no-scale` | 1 attention | 1 |" in report and "| `gqa-repeat` | 2 kv-cache | 1 |" in report
    # one hidden test's pass rate, recomputed from the documents
    test_id = docs[("alice", EX1.dir)]["tests"][5]["id"]
    ran = [t for (s, d), doc in docs.items() if d == EX1.dir for t in doc["tests"] if t["id"] == test_id]
    name = ran[0]["name"].replace("|", "\\|")
    assert f"| {name} | {ran[0]['group']} | {sum(t['status'] == 'pass' for t in ran)}/{len(ran)} |" in report
    # eve's refused zip is her fail (with the reason), not a check of the grader's that needs a look
    assert "| eve | 01-attention/attention.py |" not in report
    # the terminal report says the same
    assert "most frequent misconceptions" in proc.stdout and "no-scale" in proc.stdout
    assert "could not be graded (status error)" not in proc.stdout


@requires_bwrap
@pytest.mark.slow
def test_extra_formats_beside_each_document(mixed):
    _, _, out, _, _, _ = mixed
    import xml.etree.ElementTree as ET

    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).parents[1] / "schemas" / "gradescope-results.schema.json").read_text())
    for (student, folder), doc in docs_of(out).items():
        gs = json.loads((out / "results" / student / f"{folder}.gradescope.json").read_text())
        jsonschema.validate(gs, schema)
        assert gs["score"] == pytest.approx(doc["score"], abs=1e-4)
        suite = ET.parse(out / "results" / student / f"{folder}.junit.xml").getroot().find("testsuite")
        assert int(suite.get("tests")) == len(doc["tests"])


@requires_bwrap
@pytest.mark.slow
def test_rerun_resumes_and_force_regrades_one_student(mixed):
    root, _, out, args, _, first_seconds = mixed
    documents = [p for p in (out / "results").glob("*/*.json") if p.stem.count(".") == 0]   # not the views
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in documents}
    started = time.monotonic()
    again = grade(args, root)
    assert again.returncode == 0
    assert "resuming: 10 checks already graded are kept" in again.stdout and "nothing left to grade" in again.stdout
    assert time.monotonic() - started < first_seconds
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in before} == before
    forced = grade([*args, "--force", "--student", "bob", "--exercise", "1"], root)
    assert "grading 2 checks of 1 students" in forced.stdout, forced.stdout
    changed = {p for p in before if p.stat().st_mtime_ns != before[p][1]}
    assert {p.parent.name for p in changed} == {"bob"}


# -- crash, hang, refusal --------------------------------------------------------------------------


def test_a_batch_starts_one_grading_process_per_eight_checks_up_to_jobs():
    """A grading process costs two torch imports before its first check: a small batch (a rerun of a
    few checks, a class of four) gets one; --jobs is the most a batch starts."""
    assert [processes_for(n, 2) for n in (0, 1, 2, 8, 9, 16, 17, 1000)] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert [processes_for(n, 4) for n in (8, 9, 24, 25, 1000)] == [1, 2, 3, 4, 4]
    assert processes_for(1000, 1) == 1


def test_each_job_takes_the_worker_started_ahead_for_it(tmp_path):
    """A grading process starts the next job's worker while it grades the current one: each job must then
    use that worker, not start one more. Three jobs, three workers (the bug this catches: the worker
    started ahead was kept under another spec than the check asked for, so every job started a second)."""
    roots = [workspace_with(tmp_path / f"s{i}", 1, REF1) for i in range(3)]
    proc = GradingProcess(best_sandbox(), tmp_path / "log", "ahead")
    pids, done = [], {}
    try:
        for i, root in enumerate(roots):
            proc.send(Job(i, f"s{i}", EX1, 5), root, "cpu", "")
        deadline = time.monotonic() + 240
        while len(done) < len(roots) and time.monotonic() < deadline:
            replies, ended = proc.receive()
            pids += [r.pid for r in replies if isinstance(r, WorkerPid)]
            done.update((r.id, r.document) for r in replies if isinstance(r, JobDone))
            assert not ended or len(done) == len(roots), proc.log_tail()
            time.sleep(0.05)
    finally:
        proc.stop(polite=True)
    assert sorted(done) == [0, 1, 2], proc.log_tail()
    assert all(d["status"] == "pass" for d in done.values()), [d["status"] for d in done.values()]
    assert len(pids) == len(roots), pids


@pytest.mark.slow
def test_crashed_and_hung_grading_processes_still_get_a_row(tmp_path):
    """Crashed and hung grading processes still get a row. Over 30 s: a stopped grading process is
    waited out to its 30 s time-out, then replaced. (The time-out counts from the moment a grading
    process starts the submission, not from its own start-up: the good file needs about 1 s of it on a
    quiet machine, but its worker's torch import, unisolated, is part of it, and beside the other
    tests of a full run it once took over 10 s. The wait costs no CPU.)"""
    subs = tmp_path / "submissions"
    put(subs / "killer", EX1.file, CORPUS / "hostile" / "kill_parent.py")   # SIGKILLs the grading process
    put(subs / "stopper", EX1.file, STOP_PARENT)                             # SIGSTOPs it: a hang
    put(subs / "good", EX1.file, REF1)
    out = tmp_path / "out"
    proc = grade([str(subs), "-e", "1", "--out", str(out), "--sandbox", "none", "--unsafe", "--jobs", "2",
                  "--timeout", "30"], tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    docs = docs_of(out)
    killer, stopper, good = (docs[(s, EX1.dir)] for s in ("killer", "stopper", "good"))
    assert good["status"] == "pass"
    assert killer["status"] == "error" and killer["message"] == \
        "the grading process died (killed by SIGKILL) while grading this submission"
    assert stopper["status"] == "error" and stopper["message"].startswith("grading ran past its time limit of 30 s")
    book = gradebook(out)
    assert book["killer"]["status"] == book["stopper"]["status"] == "error" and book["good"]["status"] == "pass"
    assert wait_until(lambda: not running_with(str(out)), 10), [str(p) for p in running_with(str(out))]


def test_the_unisolated_mode_is_refused_without_unsafe(tmp_path):
    subs = tmp_path / "submissions"
    put(subs / "alice", EX1.file, REF1)
    proc = grade([str(subs), "-e", "1", "--out", str(tmp_path / "out"), "--sandbox", "none"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("Error: batch grading refuses the unisolated mode: --sandbox none runs every "
                                  "student's code with your permissions")
    assert "--unsafe" in proc.stderr and not (tmp_path / "out" / "results").exists()
    # auto with no sandbox on the machine (neither bwrap nor docker on PATH) is refused too
    venv_bin = str(Path(LUMEN_EX).parent)
    auto = grade([str(subs), "-e", "1", "--out", str(tmp_path / "out")], tmp_path, {"PATH": venv_bin})
    assert auto.returncode == 2 and "batch grading refuses the unisolated mode: no sandbox is available" in auto.stderr


def test_usage_errors(tmp_path):
    subs = tmp_path / "submissions"
    subs.mkdir()
    none = grade([str(subs), "-e", "1", "--out", str(tmp_path / "out")], tmp_path)
    assert none.returncode == 2 and "no submissions in" in none.stderr
    put(subs / "alice", EX1.file, REF1)
    no_ex = grade([str(subs), "--out", str(tmp_path / "out")], tmp_path)
    assert no_ex.returncode == 2 and "no exercise chosen" in no_ex.stderr
    who = grade([str(subs), "-e", "1", "--student", "zed", "--out", str(tmp_path / "out")], tmp_path)
    assert who.returncode == 2 and "no submission for zed" in who.stderr


# -- Ctrl-C ----------------------------------------------------------------------------------------


@requires_bwrap
@pytest.mark.slow
def test_ctrl_c_leaves_nothing_behind_and_a_rerun_resumes(tmp_path):
    """Ctrl-C while two grading processes (ten checks: scheduler.processes_for starts two) have
    sandboxes running: nothing is left behind, and a rerun resumes."""
    subs = tmp_path / "submissions"
    assert processes_for(10, 2) == 2
    for i in range(10):
        put(subs / f"s{i}", EX1.path, CORPORA["attention"] / "buggy" / "no_scale.py" if i % 2 else REF1)
    out = tmp_path / "out"
    args = [str(subs), "-e", "1", "--out", str(out), "--jobs", "2", "--sandbox", "bwrap", "--seed", "3"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORCE_COLOR", "CLICOLOR"))}
    proc = subprocess.Popen([LUMEN_EX, "grade", *args], cwd=tmp_path, env={**env, "NO_COLOR": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    snapshot: dict = {}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:   # until sandboxed workers are running
        snapshot = descendants(proc.pid)
        workers = [p for p in snapshot.values()     # not the sandbox probe (`bwrap ... -- true`)
                   if p.cmdline.startswith(b"bwrap") and not p.cmdline.endswith(b"\x00--\x00true\x00")]
        graders = [p for p in snapshot.values() if b"lumen_ex.classroom.grading_main" in p.cmdline]
        if len(workers) >= 2 and graders:
            break
        time.sleep(0.1)
    assert proc.poll() is None and graders, [str(p) for p in snapshot.values()]
    snapshot = descendants(proc.pid)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert "Interrupted:" in stderr and "Run the same command again to resume" in stderr
    alive = still_running_after(snapshot.values())     # zombies and processes gone since do not count
    assert not alive, f"left behind after Ctrl-C: {[str(p) for p in alive]}"
    graders = [pid for pid, p in snapshot.items() if b"lumen_ex.classroom.grading_main" in p.cmdline]
    from lumen_ex.sandbox import cgroups as limits

    for pid in graders:
        assert not limits.worker_cgroups(pid), "worker cgroups left behind"
    assert not glob.glob(str(out / ".scratch-*"))
    kept = {p.parent.name for p in (out / "results").glob(f"*/{EX1.dir}.json")}
    assert len(kept) < 10
    again = grade(args, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resuming: {len(kept)} checks already graded" in again.stdout or not kept
    assert {p.parent.name for p in (out / "results").glob(f"*/{EX1.dir}.json")} == {f"s{i}" for i in range(10)}
    book = gradebook(out)
    assert [book[f"s{i}"]["status"] for i in range(10)] == ["pass", "fail"] * 5


# -- reading submissions safely (the library, directly) ---------------------------------------------


@pytest.mark.parametrize("name", ["../up.py", "/abs.py", "a/../../up.py", "C:/win.py", "..\\win.py"])
def test_zip_paths_outside_are_refused(tmp_path, name):
    zpath = tmp_path / "s.zip"
    zip_folder(zpath, {"ok.py": "x = 1\n", name: "y = 2\n"})
    with pytest.raises(SubmissionRefused, match="outside its folder"):
        extract_zip(zpath, tmp_path / "dest")
    assert not (tmp_path / "up.py").exists() and not Path("/abs.py").exists()


def test_zip_bombs_links_and_duplicates(tmp_path):
    from lumen_ex.classroom import zips

    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", b"\0" * (zips.MAX_ZIP_MEMBER_BYTES + 1))
    assert bomb.stat().st_size < 100_000
    with pytest.raises(SubmissionRefused, match="unpacks to more than"):
        extract_zip(bomb, tmp_path / "d1")
    link = tmp_path / "link.zip"
    with zipfile.ZipFile(link, "w") as zf:
        info = zipfile.ZipInfo("attention.py")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "/etc/passwd")
        zf.writestr("other.py", "x = 1\n")
    notes = extract_zip(link, tmp_path / "d2")
    assert not (tmp_path / "d2" / "attention.py").exists() and (tmp_path / "d2" / "other.py").is_file()
    assert notes and "symbolic link" in notes[0]
    dup = tmp_path / "dup.zip"
    with zipfile.ZipFile(dup, "w") as zf:
        zf.writestr("a.py", "1")
        with pytest.warns(UserWarning):
            zf.writestr("a.py", "2")
    with pytest.raises(SubmissionRefused, match="same file twice"):
        extract_zip(dup, tmp_path / "d3")
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    with pytest.raises(SubmissionRefused, match="cannot be read"):
        extract_zip(tmp_path / "junk.zip", tmp_path / "d4")


def test_finding_the_learners_file(tmp_path):
    wrapped = tmp_path / "w"
    put(wrapped, f"outer/inner/{EX1.path}", "x = 1\n")
    root = unwrap(wrapped, CAT)
    assert root == wrapped / "outer" / "inner" and locate(root, EX1)[0] == root / EX1.path
    flat = tmp_path / "flat"
    put(flat, EX1.file, "x = 1\n")
    assert locate(flat, EX1)[0] == flat / EX1.file
    deep = tmp_path / "deep"
    put(deep, f"src/{EX1.file}", "x = 1\n")
    put(deep, "README.md", "hi\n")
    assert locate(deep, EX1)[0] == deep / "src" / EX1.file
    twice = tmp_path / "twice"
    put(twice, f"a/{EX1.file}", "1\n")
    put(twice, f"b/{EX1.file}", "2\n")
    path, why = locate(twice, EX1)
    assert path is None and why.startswith(f"several files could be {EX1.path}")
    linked = tmp_path / "linked"
    (linked / EX1.dir).mkdir(parents=True)
    (linked / EX1.path).symlink_to("/etc/passwd")
    path, why = locate(linked, EX1)
    assert path is None and "symbolic link" in why


# -- the docker sandbox ----------------------------------------------------------------------------


def _our_containers(path: Path) -> list[str]:
    """Containers (running or not) with a mount from below ``path`` (a check's own container, or a
    fresh worker's), and every grading slot (src/lumen_ex/sandbox/docker_slot.py: no mount of a
    student's folder, it is sent each workspace)."""
    from lumen_ex.image import engine

    listed = engine.docker("ps", "-aq", timeout=30)
    assert listed.ok, f"docker ps failed: {listed.err}"
    names = []
    for cid in listed.out.split():
        inspected = engine.docker("inspect", cid, timeout=60)
        if not inspected.ok:
            assert "No such" in inspected.err, inspected.err      # removed since `docker ps`
            continue
        info = json.loads(inspected.out)[0]
        if info["Name"].startswith("/lumen-slot-") or any(
                str(m.get("Source", "")).startswith(str(path)) for m in info.get("Mounts", [])):
            names.append(info["Name"])
    return names


@pytest.mark.docker
@pytest.mark.slow
def test_grade_in_docker_and_ctrl_c_leaves_no_container(tmp_path):
    from docker_support import DOCKER_OK, DOCKER_WHY

    if not DOCKER_OK:
        pytest.skip(DOCKER_WHY)
    subs = tmp_path / "submissions"
    for i in range(4):
        put(subs / f"s{i}", EX1.path, CORPORA["attention"] / "buggy" / "no_scale.py" if i % 2 else REF1)
    out = tmp_path / "out"
    args = [str(subs), "-e", "1", "--out", str(out), "--jobs", "2", "--sandbox", "docker", "--seed", "3"]
    # Another test's slot may still be on its way out (the docker tests run one after another): only
    # the containers that were not there before this run are this run's.
    before = set(_our_containers(tmp_path))
    ours = lambda: set(_our_containers(tmp_path)) - before     # noqa: E731
    proc = subprocess.Popen([LUMEN_EX, "grade", *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None and not ours():
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 130, stdout + stderr
    # each grading process removes its slot before it exits (src/lumen_ex/sandbox/docker.py remove_container);
    # a few seconds allow for a loaded machine's docker, not for a container that stays
    assert wait_until(lambda: not ours(), 10), f"containers left behind after Ctrl-C: {sorted(ours())}"
    again = grade(args, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    docs = docs_of(out)
    assert {d["sandbox"]["backend"] for d in docs.values()} == {"docker"}
    assert [docs[(f"s{i}", EX1.dir)]["status"] for i in range(4)] == ["pass", "fail", "pass", "fail"]
    assert not ours()
