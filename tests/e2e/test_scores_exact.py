"""Fixed seeds and exact scores in `lumen-ex grade`, through the real entry point under bwrap.

One class (a correct file, a buggy one, one that does not parse) is graded, and a file that hangs at
import is graded on its own with a copy of the built-in pack whose run limit is short (LUMEN_EX_PATH), so
the run's time limit cuts it quickly. Then:

- the class seed is recorded in DIR/class.json, in every result and every gradebook row, and a
  ``--force`` rerun without ``--seed`` reuses it: the gradebook is byte for byte the same;
- per-test scores add up exactly (as decimals) to each total, in the result document and in every
  view written by ``--format`` (JSON, JUnit, Gradescope, GitHub, PrairieLearn) and the gradebook,
  and no total exceeds its maximum;
- without a GPU, the GPU test is ``skipped`` in every outcome, even when the file does not parse or
  the run timed out, and it is never among the pass rates of the class report.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import CORPORA, pack_copy, requires_bwrap
from helpers.classes import grade, put

from lumen_ex.core import catalog, scores
from lumen_ex.harness.check import GPU_GROUP, gpu_present

CAT = catalog.load()
EX1 = CAT.find(1)
REF1 = EX1.reference_path
STUDENTS = {"good": REF1.read_text(), "buggy": (CORPORA["attention"] / "buggy" / "no_scale.py").read_text(),
            "syntax": "def scaled_dot_product_attention(q, k, v, mask=None)\n    return q\n",
            "hang": "while True:\n    pass\n"}
FORMATS = ("json", "junit", "gradescope", "github", "prairielearn")


def D(x) -> Decimal:
    """A score as written (a JSON number, a CSV or XML cell), as the exact decimal it shows."""
    return Decimal(str(x))


def short_catalogue(tmp: Path) -> Path:
    """The built-in pack with exercise 1's run limit cut to 8 s (the same version and points)."""
    manifest = f"{EX1.dir}/exercise.toml"
    old = re.search(r"call_seconds = \d+\nrun_seconds = \d+", (EX1.root / "exercise.toml").read_text()).group(0)
    path = pack_copy(tmp, edits={manifest: (old, "call_seconds = 4\nrun_seconds = 8")})
    assert catalog.load({"LUMEN_EX_PATH": str(path)}).find(1).times.run_seconds == 8
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded, then graded again with --force and every --format; and the hanging
    submission graded on its own with the short catalogue (its outcome is a timeout anyway)."""
    root = tmp_path_factory.mktemp("exact")
    subs = root / "submissions"
    for name, text in STUDENTS.items():
        if name != "hang":
            put(subs / name, EX1.file, text)
    out = root / "out"
    args = [str(subs), "-e", "1", "--out", str(out), "--sandbox", "bwrap", "--jobs", "2"]
    first = grade(args, root)
    assert first.returncode == 0, first.stdout + first.stderr
    book = (out / "gradebook.csv").read_text()
    docs = {s: json.loads((out / "results" / s / f"{EX1.dir}.json").read_text()) for s in STUDENTS if s != "hang"}
    again = grade([*args, "--force", *(a for f in FORMATS for a in ("--format", f))], root)
    assert again.returncode == 0, again.stdout + again.stderr
    put(root / "hanging" / "hang", EX1.file, STUDENTS["hang"])
    hung = grade([str(root / "hanging"), "-e", "1", "--out", str(root / "hang-out"), "--sandbox", "bwrap"], root,
                 {"LUMEN_EX_PATH": str(short_catalogue(root))})
    assert hung.returncode == 0, hung.stdout + hung.stderr
    docs["hang"] = json.loads((root / "hang-out" / "results" / "hang" / f"{EX1.dir}.json").read_text())
    return root, out, book, docs


def book_rows(text: str) -> dict[str, dict]:
    return {r["key"]: r for r in csv.DictReader(io.StringIO(text))}


@requires_bwrap
@pytest.mark.slow
def test_one_class_seed_and_the_same_gradebook_twice(graded):
    """One class seed, the same gradebook twice. Over 30 s (its fixture): a class graded twice under bwrap."""
    _, out, book, docs = graded
    seed = json.loads((out / "class.json").read_text())["seed"]
    assert {d["seed"] for s, d in docs.items() if s != "hang"} == {seed}
    assert {r["seed"] for r in book_rows(book).values()} == {str(seed)}
    assert (out / "gradebook.csv").read_text() == book          # --force, same class, same seed: same book
    again = {s: json.loads((out / "results" / s / f"{EX1.dir}.json").read_text()) for s in docs if s != "hang"}
    strip = lambda d: [(t["id"], t["status"], t["score"]) for t in d["tests"]]   # noqa: E731
    assert {s: strip(d) for s, d in again.items()} == {s: strip(docs[s]) for s in again}
    assert docs["good"]["status"] == "pass" and docs["buggy"]["status"] == "fail"


def _check_sum(parts, total, maximum=None) -> None:
    assert sum((D(p) for p in parts), Decimal(0)) == D(total), (list(parts), total)
    if maximum is not None:
        assert D(total) <= D(maximum)


@requires_bwrap
def test_scores_add_up_exactly_in_every_format(graded):
    _, out, _, _ = graded
    rows = book_rows((out / "gradebook.csv").read_text())
    for student in ("good", "buggy", "syntax"):
        base = out / "results" / student / EX1.dir
        doc = json.loads(base.with_suffix(".json").read_text())
        _check_sum([t["score"] for t in doc["tests"]], doc["score"], doc["max_score"])
        _check_sum([t["max_score"] for t in doc["tests"]], doc["max_score"])
        assert D(doc["max_score"]) == D(EX1.max_score) or doc["status"] != "pass"
        assert all(D(t["score"]) == D(t["score"]).quantize(Decimal("0.01")) for t in doc["tests"])
        gs = json.loads((out / "results" / student / f"{EX1.dir}.gradescope.json").read_text())
        _check_sum([t["score"] for t in gs["tests"]], gs["score"])
        pl = json.loads((out / "results" / student / f"{EX1.dir}.prairielearn.json").read_text())
        _check_sum([t["points"] for t in pl["tests"]], doc["score"])
        assert D(pl["score"]) <= 1
        junit = ET.parse(out / "results" / student / f"{EX1.dir}.junit.xml").getroot()
        props = {p.get("name"): p.get("value") for p in junit.iter("property")}
        assert D(props["score"]) == D(doc["score"]) and D(props["score"]) <= D(props["max_score"])
        github = (out / "results" / student / f"{EX1.dir}.github.txt").read_text()
        assert f"Points {scores_text(doc['score'])}/{scores_text(doc['max_score'])}" in github
        encoded = re.search(r"^result=(\S+)$", github, re.M)
        if encoded:
            runner = json.loads(base64.b64decode(encoded.group(1)))
            _check_sum([t["score"] for t in runner["tests"]], doc["score"], runner["max_score"])
        assert D(rows[student]["attention"]) == D(doc["score"]) == D(rows[student]["total"])
        assert D(rows[student]["total"]) <= D(rows[student]["max"])
    assert rows["good"]["total"] == "10" and rows["good"]["max"] == "10"


def scores_text(x: float) -> str:
    from lumen_ex.core.results import points

    return points(x)


@requires_bwrap
@pytest.mark.skipif(gpu_present(), reason="this machine has a GPU: its GPU test runs")
def test_the_gpu_test_is_skipped_in_every_outcome_without_a_gpu(graded):
    _, out, _, docs = graded
    statuses = {}
    for student, doc in docs.items():
        gpu = [t for t in doc["tests"] if t["group"] == GPU_GROUP]
        assert gpu, student
        assert all(t["status"] == "skipped" and t["score"] == t["max_score"] == 0 for t in gpu), (student, gpu)
        statuses[student] = {t["status"] for t in doc["tests"] if t["group"] != GPU_GROUP}
    assert "error" in statuses["syntax"] and "timeout" in statuses["hang"], statuses
    report = (out / "report.md").read_text()
    gpu_names = {t["name"] for d in docs.values() for t in d["tests"] if t["group"] == GPU_GROUP}
    assert not any(f"| {name} |" in report for name in gpu_names)


def test_shares_are_whole_hundredths_that_add_up():
    for total in (1, 2, 3, 10):
        for parts in range(1, 12):
            shares = scores.share(scores.to_units(total), parts)
            assert sum(shares) == scores.to_units(total) and max(shares) - min(shares) <= 1
    assert scores.total([0.67, 0.67, 0.66]) == 2.0 and scores.total([0.1, 0.2]) == 0.3
