"""Every result of `lumen-ex grade` belongs to the right student.

Through the real entry point, under bwrap: ``x.zip`` graded alone, then a new ``x/`` beside it
(both graded, distinct keys, the folder inherits nothing); names kept as given ("José García", an
NFD "Zoë") in the gradebook and the report, with the file-system-safe key in its own column;
``--student`` with the name as given; a row with the reason for every entry that is skipped; an
ambiguous submission flagged; ``--roster`` with a missing student and submissions on no roster.
"""

from __future__ import annotations

import csv
import io
import json
import unicodedata
from pathlib import Path

import pytest
from conftest import CORPORA, requires_bwrap
from helpers.classes import grade, put, zip_folder

from lumen_ex.core import catalog

CAT = catalog.load()
EX1 = CAT.find(1)
REF1 = EX1.reference_path
BUGGY = CORPORA["attention"] / "buggy" / "no_scale.py"
JOSE = "José García"
ZOE_NFD = unicodedata.normalize("NFD", "Zoë")
ZOE_NFC = unicodedata.normalize("NFC", "Zoë")


def rows(out: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO((out / "gradebook.csv").read_text(encoding="utf-8"))))


def by_key(out: Path) -> dict[str, dict]:
    return {r["key"]: r for r in rows(out)}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("attribution")
    subs = root / "submissions"
    subs.mkdir()
    zip_folder(subs / "x.zip", {EX1.file: REF1.read_text()})           # x.zip alone first
    put(subs / JOSE, EX1.file, REF1)
    zip_folder(subs / f"{ZOE_NFD}.zip", {f"{EX1.dir}/{EX1.file}": BUGGY.read_text()})
    put(subs / "amb", f"a/{EX1.file}", REF1)                             # two candidate files
    put(subs / "amb", f"b/{EX1.file}", BUGGY)
    (subs / "hw.tar.gz").write_bytes(b"\x1f\x8b not really")             # entries that are skipped
    (subs / "loose.py").write_text("x = 1\n")
    (subs / "nb.ipynb").write_text("{}\n")
    put(subs / ".secret", EX1.file, REF1)
    roster = root / "roster.csv"
    roster.write_text(f"student,login\n{JOSE},jgarcia\n{ZOE_NFC},zoe\nNadia Absent,nadia\n", encoding="utf-8")
    out = root / "out"
    args = [str(subs), "-e", "1", "--out", str(out), "--sandbox", "bwrap", "--jobs", "2", "--seed", "8",
            "--roster", str(roster)]
    first = grade(args, root)
    assert first.returncode == 0, first.stdout + first.stderr
    first_rows = by_key(out)
    put(subs / "x", EX1.file, BUGGY)                                      # then a folder x/ beside x.zip
    second = grade(args, root)
    assert second.returncode == 0, second.stdout + second.stderr
    return root, subs, out, args, first, first_rows, second


@requires_bwrap
@pytest.mark.slow
def test_a_new_folder_never_inherits_the_zips_result(graded):
    root, subs, out, args, first, first_rows, second = graded
    assert first_rows["x"]["status"] == "pass" and first_rows["x"]["attention"] == "10"     # x.zip, as "x"
    book = by_key(out)
    assert book["x.zip"]["student"] == book["x"]["student"] == "x"
    assert book["x.zip"]["status"] == "pass" and book["x.zip"]["attention"] == "10"          # graded again
    assert book["x"]["status"] == "fail" and float(book["x"]["attention"]) < 10              # its own grade
    assert f"regrading x {EX1.dir}: the stored result is of another entry (x.zip), this one is x" in second.stdout
    assert "grading 2 checks of 5 students" in second.stdout, second.stdout
    rec = {k: json.loads((out / "results" / k / f"{EX1.dir}.grading.json").read_text()) for k in ("x", "x.zip")}
    assert rec["x"]["fingerprint"]["entry"] == {"name": "x", "entry": "x", "kind": "folder"}
    assert rec["x.zip"]["fingerprint"]["entry"] == {"name": "x", "entry": "x.zip", "kind": "zip"}
    assert rec["x"]["fingerprint"]["files"] != rec["x.zip"]["fingerprint"]["files"]


@requires_bwrap
def test_names_are_kept_as_given_with_a_safe_key(graded):
    _, _, out, _, _, _, _ = graded
    book = by_key(out)
    assert book["Jose_Garcia"]["student"] == JOSE and book["Jose_Garcia"]["status"] == "pass"
    assert book["Zoe"]["student"] == ZOE_NFD and book["Zoe"]["student"] != ZOE_NFC       # the bytes as given
    assert (out / "results" / "Jose_Garcia").is_dir() and (out / "results" / "Zoe").is_dir()
    report = (out / "report.md").read_text(encoding="utf-8")
    assert ZOE_NFD in report               # the no-scale misconception names her, as given


@requires_bwrap
def test_skipped_entries_and_ambiguous_submissions_have_rows(graded):
    _, _, out, _, _, _, _ = graded
    book = {r["student"]: r for r in rows(out)}
    for entry, why in (("hw.tar.gz", "an archive lumen-ex does not unpack"), ("loose.py", "a loose .py file"),
                       ("nb.ipynb", "a Jupyter notebook"), (".secret", "a hidden entry")):
        assert book[entry]["status"] == "skipped" and why in book[entry]["note"], book[entry]
    amb = book["amb"]
    assert amb["status"] == "fail" and amb["note"].startswith(f"needs a look: several files could be {EX1.path}")
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Submissions flagged for a look" in report and "## Entries that were not graded" in report
    assert "| hw.tar.gz | an archive lumen-ex does not unpack" in report


@requires_bwrap
@pytest.mark.slow
def test_the_roster_lists_missing_students_and_unmatched_submissions(graded):
    _, _, out, _, _, _, second = graded
    listed = rows(out)
    assert [r["student"] for r in listed[:3]] == [JOSE, ZOE_NFD, "Nadia Absent"]      # the roster's order
    assert listed[2]["status"] == "missing" and listed[2]["note"] == "on the roster, nothing was submitted"
    unmatched = {r["key"] for r in listed if r["note"] == "not on the roster"}
    assert unmatched == {"x", "x.zip"}        # amb is flagged for a look, and on no roster either
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## On the roster, nothing submitted" in report and "| Nadia Absent |" in report
    assert "## Submissions that match no one on the roster" in report and "| x | graded as x.zip |" in report


@requires_bwrap
@pytest.mark.slow
def test_student_accepts_the_name_as_given(graded):
    root, _, out, args, _, _, _ = graded
    forced = grade([*args, "--force", "--student", JOSE], root)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "grading 1 checks of 1 students" in forced.stdout
    status = grade([*args, "--status", "--student", ZOE_NFC], root)      # another Unicode form of her name
    assert "Zoe" in status.stdout and "Jose_Garcia" not in status.stdout and "1 up to date" in status.stdout
    unknown = grade([*args, "--student", "Nobody"], root)
    assert unknown.returncode == 2 and "no submission for Nobody" in unknown.stderr
