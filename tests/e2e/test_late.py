"""Deadlines and late penalties (src/lumen_ex/classroom/late.py): the policy's arithmetic, the submission time from
each source, and one class graded through the real `lumen-ex grade` with `--due`, whose gradebook
shows each student's submission time, its source, the penalty and the final score.

The same run checks two things about a run's surroundings: the note about two entries with one
name is printed before grading starts, the plain progress lines say who is being graded, and the
scratch folder, bwrap stage and docker slot folder that a killed run left (named with a pid that no longer exists)
are removed (src/lumen_ex/classroom/leftovers.py).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pytest
from conftest import REFERENCES, best_sandbox
from helpers.classes import grade

from lumen_ex.classroom import late
from lumen_ex.classroom.late import LatePolicy, assess, make_policy, parse_duration, parse_time, submission_time

UTC = dt.timezone.utc
REF1 = REFERENCES["attention"]
DUE = dt.datetime(2026, 3, 1, 23, 59, tzinfo=UTC)


def at(days: float = 0, hours: float = 0) -> dt.datetime:
    return DUE + dt.timedelta(days=days, hours=hours)


# -- the policy -------------------------------------------------------------------------------------


def test_penalty_per_started_day_with_a_cap_and_a_grace_period():
    policy = LatePolicy(DUE, penalty=10, per="day", cap=25, grace=dt.timedelta(minutes=15))
    on_time = assess(policy, "a", at(hours=-1), "git", 10, 10)
    assert (on_time.late, on_time.penalty, on_time.final) == (False, 0.0, 10)
    in_grace = assess(policy, "a", at(hours=0.2), "git", 10, 10)
    assert in_grace.penalty == 0.0
    one_day = assess(policy, "a", at(hours=1), "git", 10, 10)       # 45 min after the grace: one started day
    assert (one_day.periods, one_day.percent, one_day.penalty, one_day.final) == (1, 10, 1.0, 9.0)
    capped = assess(policy, "a", at(days=5), "git", 10, 10)
    assert (capped.periods, capped.percent, capped.penalty, capped.final) == (5, 25, 2.5, 7.5)
    low = assess(policy, "a", at(days=5), "git", 1.0, 10)             # never below zero
    assert (low.penalty, low.final) == (1.0, 0.0)


def test_per_hour_and_extensions():
    policy = make_policy("2026-03-01T23:59+00:00", penalty=5, per="hour", cap=100)
    assert assess(policy, "a", at(hours=2.5), "zip", 8, 10).penalty == 1.5        # 3 started hours x 5 % of 10
    ext = late.read_extensions("student,due,days\nbob,,2\ncarol,2026-03-10T12:00,\n", DUE)
    assert ext == {"bob": at(days=2), "carol": dt.datetime(2026, 3, 10, 12, tzinfo=UTC)}
    policy = LatePolicy(DUE, penalty=10, extensions=ext)
    assert assess(policy, "bob", at(days=1), "git", 10, 10).penalty == 0.0
    assert assess(policy, "dave", at(days=1), "git", 10, 10).penalty == 1.0
    assert assess(None, "x", at(days=9), "git", 10, 10).final == 10               # no --due: nobody is late
    assert LatePolicy.from_dict(policy.to_dict()) == policy


def test_times_and_durations_parse_or_say_why():
    assert parse_time("2026-03-01T23:59Z") == DUE
    assert parse_time("2026-03-01 23:59", UTC) == DUE
    assert parse_duration("15m") == dt.timedelta(minutes=15) and parse_duration("2h") == dt.timedelta(hours=2)
    assert parse_duration("30") == dt.timedelta(minutes=30)
    for bad in ("soon", "-1h"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    with pytest.raises(ValueError, match="percentages"):
        make_policy("2026-03-01", penalty=150)
    with pytest.raises(ValueError, match="line 2"):
        late.read_extensions("student,due\nbob,not a time\n", DUE)


# -- when a student submitted ----------------------------------------------------------------------------


def git(folder: Path, *args: str, env: dict | None = None) -> None:
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@x", "GIT_COMMITTER_NAME": "s",
                        "GIT_COMMITTER_EMAIL": "s@x", **(env or {})})


def git_checkout(folder: Path, when: dt.datetime, files: dict[str, str], pack: bool = False) -> Path:
    folder.mkdir(parents=True)
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    git(folder, "init", "-q")
    git(folder, "add", ".")
    stamp = when.isoformat()
    git(folder, "commit", "-qm", "work", env={"GIT_COMMITTER_DATE": stamp, "GIT_AUTHOR_DATE": stamp})
    if pack:
        git(folder, "gc", "-q")
    return folder


def zip_with(path: Path, members: dict[str, tuple[tuple, str]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, (date_time, text) in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time), text)
    return path


def folder_with(folder: Path, files: dict[str, tuple[dt.datetime, str]]) -> Path:
    for rel, (when, text) in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (when.timestamp(), when.timestamp()))
    return folder


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="no git on this machine")


@needs_git
@pytest.mark.parametrize("pack", [False, True], ids=["loose", "packed"])
def test_the_git_commit_time(tmp_path, pack):
    repo = git_checkout(tmp_path / "s", at(days=2), {"attention.py": "x = 1\n"}, pack=pack)
    found = submission_time(repo, "git")
    assert (found.source, found.time) == ("git", at(days=2))
    assert len(found.detail) == 12                           # the commit, shortened


def test_the_zips_newest_member_and_the_folders_newest_file(tmp_path):
    z = zip_with(tmp_path / "s.zip", {"a/attention.py": ((2026, 3, 2, 10, 0, 0), "x"),
                                      "a/notes.md": ((2026, 3, 1, 9, 0, 0), "y"),
                                      "__MACOSX/._x": ((2030, 1, 1, 0, 0, 0), "")})
    found = submission_time(z, "zip", UTC)
    assert (found.source, found.time, found.detail) == ("zip", dt.datetime(2026, 3, 2, 10, tzinfo=UTC), "a/attention.py")
    f = folder_with(tmp_path / "f", {"attention.py": (at(hours=3), "x"), "sub/old.py": (at(days=-3), "y"),
                                     "__pycache__/new.pyc": (at(days=30), "z")})
    os.symlink("/etc/hostname", f / "link.py")               # a link's own time is never taken
    found = submission_time(f, "folder")
    assert (found.source, found.time, found.detail) == ("folder", at(hours=3), "attention.py")


def test_gradescope_metadata_first_and_never_an_unsafe_file(tmp_path):
    f = folder_with(tmp_path / "f", {"attention.py": (at(days=5), "x")})
    (f / "submission_metadata.json").write_text(json.dumps({"id": 1, "created_at": "2026-03-02T01:00:00.000000-08:00"}))
    found = submission_time(f, "folder")
    assert (found.source, found.time) == ("gradescope", dt.datetime(2026, 3, 2, 9, tzinfo=UTC))
    (f / "submission_metadata.json").unlink()
    os.mkfifo(f / "submission_metadata.json")               # would block a naive read forever
    assert submission_time(f, "folder").source == "folder"
    (f / "submission_metadata.json").unlink()
    os.symlink("/dev/zero", f / "submission_metadata.json")
    assert submission_time(f, "folder").source == "folder"


# -- through `lumen-ex grade` ---------------------------------------------------------------------------


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@needs_git
@pytest.mark.slow
def test_a_class_with_a_deadline_through_the_real_command(tmp_path):
    subs = tmp_path / "submissions"
    subs.mkdir()
    files = {"01-attention/attention.py": REF1.read_text()}
    git_checkout(subs / "alice", at(days=1, hours=2), files, pack=True)              # 2 started days late
    zip_with(subs / "bob.zip", {"attention.py": (at(hours=-5).timetuple()[:6], REF1.read_text())})   # on time
    folder_with(subs / "carol", {"attention.py": (at(hours=0.1), REF1.read_text())})  # within the grace period
    folder_with(subs / "dave", {"attention.py": (at(days=9), REF1.read_text())})
    (subs / "dave" / "submission_metadata.json").write_text(json.dumps({"created_at": at(days=3).isoformat()}))
    folder_with(subs / "erin", {"attention.py": (at(), REF1.read_text())})             # erin and erin.zip
    zip_with(subs / "erin.zip", {"attention.py": (at().timetuple()[:6], REF1.read_text())})
    ext = tmp_path / "extensions.csv"
    ext.write_text("student,days\ndave,2\n")                                          # dave: 1 day late
    out = tmp_path / "out"
    out.mkdir()
    pid = dead_pid()                                  # what a run killed by SIGKILL would have left
    (out / f".scratch-{pid}-abc" / "ws" / "alice").mkdir(parents=True)
    (out / f".scratch-{pid}-abc" / "ws" / "alice" / "attention.py").write_text("a copy of student code\n")
    tmp = Path(tempfile.gettempdir())                 # where the bwrap launcher stages (its TMPDIR)
    (tmp / f"lumen-ex-stage-{pid}-xyz" / "0").mkdir(parents=True)
    (tmp / f"lumen-ex-stage-{pid}-xyz" / "1").write_text("")
    live = Path(tempfile.mkdtemp(prefix=f"lumen-ex-stage-{os.getpid()}-"))              # a live owner: kept
    (tmp / f"lumen-ex-slot-{pid}-xyz" / "control").mkdir(parents=True)                 # a docker slot's folder
    (tmp / f"lumen-ex-slot-{pid}-xyz" / "seccomp.json").write_text("{}")
    sandbox = best_sandbox()
    proc = grade([str(subs), "-e", "1", "--out", str(out), "--jobs", "2", "--sandbox", sandbox, "--seed", "3",
                  "--due", "2026-03-01T23:59+00:00", "--late-penalty", "10", "--late-cap", "50", "--grace", "15m",
                  "--extensions", str(ext), *(["--unsafe"] if sandbox == "none" else [])], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    starts = next(i for i, line in enumerate(lines) if line.startswith("grading "))
    assert any("same name" in line for line in lines[:starts]), proc.stdout     # before grading starts
    progress = [line for line in lines if line.startswith("[")]
    assert len(progress) == 6 and all("/min, ETA " in line for line in progress)

    rows = {r["student"]: r for r in csv.DictReader(io.StringIO((out / "gradebook.csv").read_text()))}
    assert {"submitted", "submitted_from", "due", "late_by", "penalty", "final"} <= set(next(iter(rows.values())))
    alice, bob, carol, dave = (rows[n] for n in ("alice", "bob", "carol", "dave"))
    assert alice["total"] == "10" and alice["submitted_from"] == "the git commit"
    assert (alice["penalty"], alice["final"], alice["late_by"]) == ("2", "8", "1 d 1 h 45 min")
    assert bob["submitted_from"] == "the zip's newest member" and (bob["penalty"], bob["final"]) == ("0", "10")
    assert carol["submitted_from"] == "the folder's newest file" and carol["penalty"] == "0"
    assert dave["submitted_from"] == "Gradescope's submission_metadata.json"
    assert dave["due"] == at(days=2).isoformat(timespec="seconds") and (dave["penalty"], dave["final"]) == ("1", "9")
    assert json.loads((out / "results" / "alice" / "submitted.json").read_text())["source"] == "git"
    assert json.loads((out / "late-policy.json").read_text())["cap"] == 50

    # the leftovers of the killed run are gone; the live one is kept
    assert not (out / f".scratch-{pid}-abc").exists()
    assert not (tmp / f"lumen-ex-stage-{pid}-xyz").exists()
    assert not (tmp / f"lumen-ex-slot-{pid}-xyz").exists()
    assert live.exists()
    live.rmdir()
    assert not list(out.glob(".scratch-*"))

    # a rerun without --due keeps the saved policy (nothing is regraded)
    again = grade([str(subs), "-e", "1", "--out", str(out), "--sandbox", sandbox,
                   *(["--unsafe"] if sandbox == "none" else [])], tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    rows = {r["student"]: r for r in csv.DictReader(io.StringIO((out / "gradebook.csv").read_text()))}
    assert rows["alice"]["final"] == "8"


def test_a_bad_policy_is_a_usage_error(tmp_path):
    (tmp_path / "subs" / "a").mkdir(parents=True)
    proc = grade([str(tmp_path / "subs"), "-e", "1", "--out", str(tmp_path / "out"), "--due", "next friday"], tmp_path)
    assert proc.returncode == 2 and "late policy is not valid" in proc.stdout + proc.stderr
