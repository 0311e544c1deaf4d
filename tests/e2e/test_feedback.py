"""Per-student feedback files (src/lumen_ex/classroom/feedback_files.py) written by the real `lumen-ex grade`.

One class of two: mallory's attention inverts the mask (a failing test with a heatmap picture) and
prints text that would be a heading, a link, a script and a terminal escape if it were written raw;
her folder's name is hostile too. trent submits the reference. Both get OUT/feedback/<name>.md and
.html written from their result records; the HTML embeds the picture as a PNG data URL.
"""

from __future__ import annotations

import base64
import json
import re

import pytest
from conftest import REFERENCES, best_sandbox
from helpers.classes import grade, put
from helpers.pictures import MASK_INVERTED

from lumen_ex.feedback.pictures.png import PNG_SIGNATURE

HOSTILE = "# Grade: 10/10\n[click](http://evil.example) <script>alert(1)</script> \x1b[2J done"
MALLORY = MASK_INVERTED.replace("def scaled_dot_product_attention(q, k, v, mask=None):",
                                f"print({HOSTILE!r})\n\n\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
                                f"    print({HOSTILE!r})", 1)
NAME = "mallory_<b>"          # becomes a file-safe key; shown neutralised wherever it appears


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("feedback")
    subs = root / "submissions"
    put(subs / NAME, "attention.py", MALLORY)
    put(subs / "trent", "attention.py", REFERENCES["attention"])
    out = root / "out"
    sandbox = best_sandbox()
    proc = grade([str(subs), "-e", "1", "--out", str(out), "--sandbox", sandbox, "--seed", "11",
                  *(["--unsafe"] if sandbox == "none" else [])], root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def student_files(out, prefix):
    (md,) = [p for p in (out / "feedback").glob("*.md") if p.name.startswith(prefix)]
    return md, md.with_name(md.name[:-3] + ".html")


@pytest.mark.slow
def test_each_student_gets_markdown_and_html_from_the_record(graded):
    out = graded
    md, page = student_files(out, "trent")
    doc = json.loads((out / "results" / "trent" / "01-attention.json").read_text())
    text = md.read_text()
    assert text.startswith("# Feedback for trent")
    assert "Total: 10 / 10 points (100.0 %)." in text
    assert "## Exercise 1: Scaled dot-product attention: 10 / 10 (pass)" in text
    assert text.count("| ✓ |") == sum(t["status"] == "pass" for t in doc["tests"])
    assert f"`lumen-ex check 1 --seed {doc['seed']}`" in text
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<h1>Feedback for trent</h1>" in html
    assert "default-src 'none'" in html                      # the page may load nothing from anywhere


@pytest.mark.slow
def test_the_failing_student_sees_the_explanation_and_the_embedded_picture(graded):
    out = graded
    md, page = student_files(out, "mallory")
    key = md.name[:-3]
    doc = json.loads((out / "results" / key / "01-attention.json").read_text())
    failing = [t for t in doc["tests"] if t["status"] == "fail"]
    pictured = [t for t in failing if (t.get("diagnosis") or {}).get("details", {}).get("heatmap")]
    assert failing and pictured, "the inverted mask gives a failing test with a heatmap"
    text, html = md.read_text(), page.read_text()
    assert "**First failure:**" in text and "(fail)" in text
    assert "A picture of the expected and your weights is in the HTML version of this file." in text
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) >= 1
    assert all(base64.b64decode(i).startswith(PNG_SIGNATURE) for i in images)
    assert images[0] == pictured[0]["diagnosis"]["details"]["heatmap"]["png_base64"]


def test_no_student_text_is_written_raw(graded):
    out = graded
    md, page = student_files(out, "mallory")
    text, html = md.read_text(), page.read_text()
    assert "\x1b" not in text + html                                   # escapes shown, never run
    assert "<script>" not in html and "<b>" not in html and "&lt;script&gt;" in html
    prose = re.sub(r"(?ms)^(`{3,})\n.*?^\1$", "", text)               # outside the fenced code blocks
    assert "<script>" not in prose and "](http" not in prose and "<b>" not in prose
    assert not any(line.startswith("# Grade") for line in prose.splitlines())
    assert "# Grade: 10/10" in text and "alert(1)" in text              # inside a code block, inert
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html               # shown as text in the page
