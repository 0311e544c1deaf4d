"""`lumen-ex grade` against submissions built to hang, exhaust or mislead the coordinator.

The coordinator (src/lumen_ex/classroom/scheduler.py, src/lumen_ex/classroom/submissions.py) reads every submission as trusted
code, outside any sandbox. Here a real class holds students whose files are a FIFO, links to
/dev/zero and /etc/shadow, a zip bomb, a zip that climbs out with ``../`` or carries links, a 50 MiB
exercise file, more files than the coordinator will list, and a tree deeper than it will look. The
real command grades them under bwrap with a time limit: it must finish, write a gradebook with one
row per student and a clear reason for each refusal, and grade the honest students normally.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from conftest import LUMEN_EX, requires_bwrap

from lumen_ex.classroom import submission_limits, submissions, zips
from lumen_ex.core import bounded, catalog
from lumen_ex.core.workspace import Workspace

CAT = catalog.load()
EX1 = CAT.find(1)
REF1 = (EX1.reference_path).read_text()
SHA = "0123456789abcdef0123456789abcdef01234567"
RUN_LIMIT_S = 540           # the whole class; a hang anywhere would exceed it


def put(folder: Path, rel: str, text: str) -> Path:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def link(folder: Path, rel: str, target: str) -> None:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def fifo(folder: Path, rel: str) -> None:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def link_member(zf: zipfile.ZipFile, name: str, target: str) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = 0o120777 << 16
    zf.writestr(info, target)


def make_class(root: Path) -> tuple[Path, dict[str, str]]:
    """The class, and for each student who must be refused a piece of the reason to expect."""
    subs = root / "submissions"
    subs.mkdir(parents=True)
    expect: dict[str, str] = {}

    honest = Workspace.create(subs / "alice", CAT)                     # honest: a workspace
    (honest.root / EX1.path).write_text(REF1)
    put(subs / "bob", EX1.file, REF1)                                  # honest: a git checkout
    put(subs / "bob", ".git/HEAD", "ref: refs/heads/main\n")
    put(subs / "bob", ".git/refs/heads/main", SHA + "\n")
    put(subs / "carol", EX1.path, REF1)                                # honest, with a FIFO beside it
    fifo(subs / "carol", f"{EX1.dir}/helper.py")
    fifo(subs / "carol", "notes.txt")

    put(subs / "git-zero", EX1.path, REF1)                             # .git/HEAD -> /dev/zero
    link(subs / "git-zero", ".git/HEAD", "/dev/zero")
    expect["git-zero"] = ".git/HEAD is a symbolic link"
    put(subs / "git-fifo", EX1.path, REF1)                             # its branch ref is a FIFO
    put(subs / "git-fifo", ".git/HEAD", "ref: refs/heads/main\n")
    fifo(subs / "git-fifo", ".git/refs/heads/main")
    expect["git-fifo"] = ".git/refs/heads/main is a FIFO"

    fifo(subs / "fifo", EX1.path)                                      # the exercise file is a FIFO
    expect["fifo"] = f"{EX1.path} is a FIFO"
    link(subs / "shadow", EX1.path, "/etc/shadow")                     # ... a link to /etc/shadow
    expect["shadow"] = f"{EX1.path} is a symbolic link"
    link(subs / "dir-link", "01-attention", "/etc")                    # its folder is a link
    expect["dir-link"] = f"{EX1.dir} is a symbolic link"
    with open(put(subs / "huge", EX1.path, REF1), "a") as f:           # 50 MiB
        f.write("#" * (50 << 20))
    expect["huge"] = f"{EX1.path} is 50 MiB"

    with zipfile.ZipFile(subs / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as zf:     # a zip bomb
        zf.writestr(EX1.path, REF1)
        for i in range(8):
            zf.writestr(f"zeros{i}.bin", b"\0" * (15 << 20))
    assert (subs / "bomb.zip").stat().st_size < 1 << 20
    expect["bomb"] = "the zip unpacks to more than"
    with zipfile.ZipFile(subs / "climb.zip", "w") as zf:                          # ../ and a link
        zf.writestr(EX1.path, REF1)
        link_member(zf, "notes.md", "/etc/shadow")
        zf.writestr("../../climbed.py", "print('out')\n")
    expect["climb"] = "would be written outside its folder"
    with zipfile.ZipFile(subs / "zip-link.zip", "w") as zf:                       # the file is a link
        link_member(zf, EX1.path, "/etc/shadow")
    expect["zip-link"] = f"{EX1.path} is a symbolic link in the zip"
    os.mkfifo(subs / "fifo-entry.zip")                                            # the zip is a FIFO
    expect["fifo-entry"] = "fifo-entry.zip is a FIFO"

    many = subs / "many"                                               # more files than are listed
    put(many, EX1.path, REF1)
    for i in range(submission_limits.MAX_TREE_ENTRIES + 10):                 # beside the exercise's file
        (many / EX1.dir / f"f{i}").touch()
    expect["many"] = f"more than {submission_limits.MAX_TREE_ENTRIES} files and folders"
    deep = subs / "deep" / "src"                                      # deeper than anyone looks
    for _ in range(60):
        deep = deep / "d"
    put(deep, EX1.file, REF1)
    put(subs / "deep", "README.md", "hi\n")
    expect["deep"] = f"no {EX1.path} in the submission"
    return subs, expect


def gradebook(out: Path) -> dict[str, dict]:
    return {row["student"]: row for row in csv.DictReader(io.StringIO((out / "gradebook.csv").read_text()))}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-inputs")
    subs, expect = make_class(root)
    out = root / "out"
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "TERM": "dumb"}
    started = time.monotonic()
    proc = subprocess.run([LUMEN_EX, "grade", str(subs), "--exercise", "1", "--out", str(out), "--jobs", "2",
                           "--sandbox", "bwrap", "--seed", "5"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=RUN_LIMIT_S)
    return root, subs, out, proc, expect, time.monotonic() - started


@requires_bwrap
@pytest.mark.slow
def test_the_run_finishes_with_a_row_per_student(graded):
    root, subs, out, proc, expect, took = graded
    assert proc.returncode == 0, proc.stdout + proc.stderr      # every check reached a verdict
    assert "Traceback" not in proc.stdout + proc.stderr
    book = gradebook(out)
    assert set(book) == {"alice", "bob", "carol", *expect}
    assert not list(root.rglob("climbed.py"))


@requires_bwrap
@pytest.mark.slow
def test_each_refusal_is_a_fail_row_with_its_reason(graded):
    _, _, out, _, expect, _ = graded
    book = gradebook(out)
    for student, reason in expect.items():
        row = book[student]
        assert row["status"] == "fail" and float(row["total"]) == 0, (student, row)
        assert reason in row["first_failure"], (student, row["first_failure"])
        doc = json.loads((out / "results" / student / f"{EX1.dir}.json").read_text())
        assert doc["status"] == "fail" and reason in doc["message"], (student, doc["message"])


@requires_bwrap
@pytest.mark.slow
def test_honest_students_are_graded_normally(graded):
    _, _, out, _, _, _ = graded
    book = gradebook(out)
    for student in ("alice", "bob", "carol"):
        assert book[student]["status"] == "pass" and float(book[student]["total"]) == EX1.max_score, \
            (student, book[student])
    assert book["bob"]["commit"] == SHA
    info = json.loads((out / "results" / "carol" / "submission.json").read_text())
    assert info["graded"] == {EX1.slug: EX1.path}


# -- the bounded reader on its own -------------------------------------------------------------------


def test_bounded_reader_refuses_what_is_not_a_small_regular_file(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "big").write_bytes(b"x" * 101)
    (tmp_path / "ok").write_bytes(b"fine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    inside = tmp_path / "inside"
    inside.mkdir()
    (inside / "door").symlink_to(outside)
    started = time.monotonic()
    with pytest.raises(bounded.NotRegular, match="is a FIFO"):
        bounded.read_regular(tmp_path / "pipe", 100)
    with pytest.raises(bounded.NotRegular, match="is a symbolic link"):
        bounded.read_regular(tmp_path / "zero", 100)
    with pytest.raises(bounded.NotRegular, match="is a device file"):
        bounded.read_regular(Path("/dev/zero"), 100)
    with pytest.raises(bounded.NotRegular, match="is a folder"):
        bounded.read_regular(tmp_path, 100)
    with pytest.raises(bounded.TooLarge, match="is 101 B"):
        bounded.read_regular(tmp_path / "big", 100)
    with pytest.raises(bounded.NotRegular, match="outside the submission"):
        bounded.read_regular(inside / "door" / "secret", 100, within=inside)
    with pytest.raises(bounded.NotReadable, match="does not exist"):
        bounded.read_regular(tmp_path / "nothing", 100)
    assert bounded.read_regular(tmp_path / "ok", 100) == b"fine"
    assert time.monotonic() - started < 5


def test_a_zip_with_a_huge_member_list_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(zips, "MAX_ZIP_DIRECTORY_BYTES", 4096)
    path = tmp_path / "list.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(500):
            zf.writestr(f"f{i:04}.txt", "")
    with pytest.raises(submission_limits.SubmissionRefused, match="list of members"):
        zips.extract_zip(path, tmp_path / "d")


def test_a_deep_zip_is_refused(tmp_path):
    path = tmp_path / "deep.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("/".join(["d"] * (zips.MAX_ZIP_DEPTH + 1)) + "/x.py", "x = 1\n")
    with pytest.raises(submission_limits.SubmissionRefused, match="folders deep"):
        zips.extract_zip(path, tmp_path / "d")


def test_the_time_budget_refuses_a_slow_submission(tmp_path):
    put(tmp_path / "s", "a/b/c.txt", "x")
    budget = submission_limits.Budget(seconds=0.0)
    time.sleep(0.01)
    with pytest.raises(submission_limits.SubmissionRefused, match="took longer than"):
        submissions.locate(tmp_path / "s", EX1, budget)
    shutil.rmtree(tmp_path / "s")
