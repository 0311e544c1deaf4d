"""The pictures of a failure through the real entry point (the installed `lumen-ex` script), against
goldens in tests/golden/ (LUMEN_EX_UPDATE_GOLDEN=1 rewrites them; read the diff): the heatmap of a
misaligned causal mask, of a mask that lets the future leak in, of an inverted mask, exercise 12's
accepted drafts (a mask whose True is its own word), and the shape diagram of an output that lost an axis (tests/golden/check-shape.txt has the transposed output).
Each golden is the first-failure panel down to its picture, without colour (NO_COLOR, not a terminal): the picture
must read from its characters alone. The JSON form must carry the same picture as a decodable PNG
and still validate against docs/result.schema.json. The checks share one workspace under bwrap whose
check server answers all but the first (tests/helpers/cli.py ``WarmWorkspace``)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from conftest import requires_bwrap
from helpers.cli import REFERENCE_1, compare, normalise
from helpers.pictures import CORRECT_ATTENTION, MASK_INVERTED, decode_png, submission

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "result.schema.json"
CORRECT = REFERENCE_1.read_text()
CAUSAL_TOP_LEFT = submission(CORRECT_ATTENTION, causal="torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril()")
MASK_MULTIPLIED = submission(CORRECT_ATTENTION.replace('scores.masked_fill(~mask, float("-inf"))', "scores * mask"))
OUTPUT_LOSES_AN_AXIS = submission(CORRECT_ATTENTION, output="(weights @ v).flatten(-2)")


def first_failure_panel(stdout: str) -> str:
    """The first-failure panel down to the end of its picture: the named-mistake sentence after it
    ("likely mistake: ..." / "try: ...") is the misconception catalogue's, with goldens of its own."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "first failure:" in line and line.startswith("╭"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("╰"))
    cut = next((i for i in range(start, end) if lines[i].startswith(("│ likely mistake", "│ try:"))), end)
    return "\n".join(lines[start:cut] + [lines[end]]) + "\n"


@pytest.mark.parametrize("case,source,marks", [
    ("pictures-causal-top-left", CAUSAL_TOP_LEFT, ["causal_mask: rows = queries, columns = keys", "■ ■ ■ ■ · · ·", "- - -"]),
    ("pictures-mask-multiplied", MASK_MULTIPLIED, ["weights [B=", "+ yours larger"]),
    ("pictures-mask-inverted", MASK_INVERTED, ["weights [B=", "- yours smaller"]),
    ("pictures-shape-missing-axis", OUTPUT_LOSES_AN_AXIS, ["expected  B  H  L_q  d_v", "^"]),
])
@requires_bwrap
@pytest.mark.slow
def test_pictures_in_the_terminal(warm_workspace, case, source, marks):
    ws = warm_workspace
    ws.put(source)
    proc = ws.run(["check", "1", "--sandbox", "bwrap", "--seed", "7"], ws.root / "01-attention")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "\x1b[" not in proc.stdout, "colour escapes with NO_COLOR set"
    panel = normalise(first_failure_panel(proc.stdout), ws.root.parent)
    for mark in marks:
        assert mark in panel, f"{mark!r} not in\n{panel}"
    compare(case, panel)


@requires_bwrap
@pytest.mark.slow
def test_a_pictures_own_word_for_true_reaches_the_terminal(warm_workspace):
    """Exercise 12 draws the accepted drafts as a mask whose True reads "accepted" (its suite's
    ``on``), not "may attend": a count of 0 where every draft is accepted shows every cell missing."""
    ws = warm_workspace
    buggy = Path(__file__).resolve().parents[2] / "src/lumen_ex/exercises/12-speculative-verify/corpus/buggy"
    ws.put(buggy / "argmax_first_rejection.py", "12")
    proc = ws.run(["check", "12", "--sandbox", "bwrap", "--seed", "7"], ws.root / "12-speculative-verify")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    panel = normalise(first_failure_panel(proc.stdout), ws.root.parent)
    for mark in ["accepted drafts: rows = sequences, columns = positions", "■ True (accepted)   · False (not accepted)",
                 "+ yours True, expected False", "s0   ■ ■ ■ ■    · · · ·    - - - -"]:
        assert mark in panel, f"{mark!r} not in\n{panel}"
    assert "may attend" not in panel and "weight" not in panel
    compare("pictures-accepted-drafts", panel)


@requires_bwrap
@pytest.mark.slow
def test_json_embeds_the_png_and_validates(warm_workspace):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    warm_workspace.put(MASK_INVERTED)
    proc = warm_workspace.run(["check", "1", "--sandbox", "bwrap", "--seed", "7", "--format", "json"])
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, schema)
    heatmaps = [t["diagnosis"]["details"]["heatmap"] for t in doc["tests"]
                if t["diagnosis"] and "heatmap" in t["diagnosis"].get("details", {})]
    assert len(heatmaps) >= 5
    first = heatmaps[0]
    assert first["kind"] == "weights" and first["rows"] == "queries" and first["cols"] == "keys"
    n_rows, n_cols = len(first["expected"]), len(first["expected"][0])
    assert [n_rows, n_cols] == first["shape"] == [5, 7] and not first["cropped"]
    img = decode_png(base64.b64decode(first["png_base64"]))
    assert img["width"] > img["height"] > 0 and img["text"]["Title"] == first["title"]
    # an inverted mask: each row's expected zeros are where yours is not, and the other way round
    for exp_row, got_row in zip(first["expected"], first["got"]):
        assert all((e == 0) != (g == 0) for e, g in zip(exp_row, got_row))
    # small: every picture together stays a fraction of the document
    pictures = sum(len(json.dumps(h)) for h in heatmaps)
    assert all(len(h["png_base64"]) < 6000 for h in heatmaps)
    assert pictures < 60_000, pictures
