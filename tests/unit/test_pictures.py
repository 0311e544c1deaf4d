"""The pictures of a diagnosis: the PNG writer (proven by decoding its output with an independent
decoder, tests/helpers/pictures.py), the heatmap payload (src/lumen_ex/feedback/pictures/heatmap.py),
its terminal drawing and the shape diagram (src/lumen_ex/cli/pictures.py), and the payload against
docs/result.schema.json."""

from __future__ import annotations

import base64
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.pictures import decode_png
from rich.console import Console

from lumen_ex.cli.pictures import Heatmap, heatmap_lines, shape_diagram
from lumen_ex.core import catalog, exercise_modules
from lumen_ex.core.results import CheckFailed, Diagnosis
from lumen_ex.feedback.pictures import heatmap as pictures
from lumen_ex.feedback.pictures import png
from lumen_ex.graders.support import expect
from lumen_ex.graders.support.expect import Expected

ref = exercise_modules.load(catalog.load(environ={}).find(1).root, "reference")

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "result.schema.json"


def test_encode_indexed_round_trips():
    gen = torch.Generator().manual_seed(0)
    palette = [(i, 255 - i, (7 * i) % 256) for i in range(20)]
    rows = [bytes(torch.randint(0, 20, (13,), generator=gen).tolist()) for _ in range(9)]
    rows[4] = rows[5] = rows[3]                                  # repeated rows: filter type 2 (Up)
    data = png.encode_indexed(13, 9, rows, palette, text={"Title": "round trip"})
    img = decode_png(data)
    assert (img["width"], img["height"]) == (13, 9)
    assert img["filters"] == {0, 2}
    assert img["indices"] == rows
    assert img["palette"] == palette
    assert img["text"] == {"Title": "round trip"}


@pytest.mark.parametrize("bad", [
    dict(width=0, height=1, rows=[b""], palette=[(0, 0, 0)]),
    dict(width=2, height=1, rows=[b"\x00"], palette=[(0, 0, 0)]),
    dict(width=1, height=1, rows=[b"\x01"], palette=[(0, 0, 0)]),
    dict(width=1, height=1, rows=[b"\x00"], palette=[]),
])
def test_encode_indexed_refuses_bad_input(bad):
    with pytest.raises(ValueError):
        png.encode_indexed(**bad)


def _mask_payload() -> dict:
    """The top-left causal mask against the bottom-right one, 4 x 7."""
    top_left = torch.ones(4, 7, dtype=torch.bool).tril()
    return pictures.heatmap(top_left, ref.causal_mask(4, 7), what="causal_mask", axes=("L_q", "L_k"), atol=0, rtol=0)


def _cell_centre(panel: int, i: int, j: int, n_rows: int, n_cols: int) -> tuple[int, int]:
    s = png.cell_size(n_rows, n_cols)
    labels = ("EXPECTED", "YOURS", "DIFFERENCE")
    panel_w = max(n_cols * s + 1, max(png._text_width(t) for t in labels))
    x = png.MARGIN + panel * (panel_w + png.GAP) + j * s + 1
    y = png.MARGIN + png.LABEL_H + i * s + 1
    return x, y


def test_heatmap_png_decodes_to_the_picture():
    payload = _mask_payload()
    img = decode_png(base64.b64decode(payload["png_base64"]))
    s = png.cell_size(4, 7)
    assert s == 22
    panel_w = 7 * s + 1
    assert img["width"] == 2 * png.MARGIN + 3 * panel_w + 2 * png.GAP
    assert img["height"] == 2 * png.MARGIN + png.LABEL_H + 4 * s + 1
    assert "causal_mask" in img["text"]["Title"]
    px = img["pixels"]
    dark_blue, white, red, grey_dot = (33, 94, 168), (255, 255, 255), (220, 30, 30), (170, 170, 170)

    def at(panel, i, j, dx=0, dy=0):
        x, y = _cell_centre(panel, i, j, 4, 7)
        return px[y + dy][x + dx]

    half = (s - 1) // 2
    # expected: query 0 sees keys 0..3 (bottom-right alignment), not key 4
    assert at(0, 0, 3, half, half) == dark_blue
    assert at(0, 0, 4, 3, 3) == white and at(0, 0, 4, half, half) == grey_dot      # False: white, a dot
    # yours (top-left): query 0 sees key 0 only; key 1 differs, so its cell is framed in red
    assert at(1, 0, 0, half, half) == dark_blue
    assert at(1, 0, 1, 0, half) == red and at(1, 0, 1, half, 0) == red           # the frame
    assert at(1, 0, 1, 5, 5) == white                                             # inside the frame
    assert at(1, 0, 0, 0, 0) == dark_blue                                         # same cell: no frame
    # difference: yours False where True was expected -> blue; agreeing cells white with a dot
    diff = at(2, 0, 1, half, half)
    assert diff[2] > diff[0] and diff != white
    assert at(2, 0, 0, 3, 3) == white
    # the grid line between cells, the label text above the panels
    x, y = _cell_centre(0, 0, 0, 4, 7)
    assert px[y - 1][x + 3] == (214, 214, 214)
    assert (40, 40, 40) in set(px[png.MARGIN + 2])


def test_heatmap_png_weights_colours():
    e = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    g = torch.tensor([[0.25, 0.5, 0.25], [1.0, 0.0, float("nan")]])
    payload = pictures.heatmap(g, e, what="weights", axes=("L_q", "L_k"))
    assert payload["got"] == [[0.25, 0.5, 0.25], [1.0, 0.0, None]]
    assert payload["differs"] == [[1, 0, 1], [0, 0, 1]]
    img = decode_png(base64.b64decode(payload["png_base64"]))
    px, s = img["pixels"], png.cell_size(2, 3)

    def at(panel, i, j):
        x, y = _cell_centre(panel, i, j, 2, 3)
        return px[y + s // 2][x + 3]

    assert at(0, 1, 0) == png.PALETTE[png.BLUES0 + png.LEVELS - 1]                 # the largest weight: darkest
    assert at(1, 1, 2) == (200, 0, 200)                                            # NaN: magenta
    assert at(2, 0, 0)[2] > at(2, 0, 0)[0]                                         # yours smaller: blue
    assert at(2, 0, 2)[0] > at(2, 0, 2)[2]                                         # yours larger: red


# -------------------------------------------------------------------------------------------------
# The payload


def test_payload_picks_the_worst_slice_and_crops_around_the_worst_cell():
    gen = torch.Generator().manual_seed(3)
    expected = torch.softmax(torch.randn(2, 3, 40, 50, generator=gen, dtype=torch.float64), -1)
    got = expected.clone()
    got[0, 2, 5, 7] += 0.01
    got[1, 1, 30, 45] += 0.2                                    # the largest error
    p = pictures.heatmap(got.float(), expected, what="weights", axes=("B", "H", "L_q", "L_k"))
    assert p["index"] == {"B": 1, "H": 1} and p["title"] == "weights [B=1, H=1]"
    assert p["shape"] == [40, 50] and p["cropped"] is True
    assert (p["row_start"], p["col_start"]) == (22, 34)         # 30 - 8, min(45 - 8, 50 - 16)
    assert len(p["expected"]) == 16 and all(len(r) == 16 for r in p["expected"] + p["got"] + p["differs"])
    assert p["worst"] == [30, 45] and p["mismatched"] == 1
    assert p["differs"][30 - 22][45 - 34] == 1
    assert p["got"][8][11] == float(f"{float(got[1, 1, 30, 45]):.3g}")
    json.dumps(p, allow_nan=False)


@pytest.mark.parametrize("shape", [(7,), (2, 3), (4, 1, 5), (2, 3, 20, 37), (1, 1, 1)])
def test_unravel_agrees_with_torch(shape):
    for flat in range(0, math.prod(shape), max(1, math.prod(shape) // 50)):
        assert pictures.unravel(flat, shape) == tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))


# A values failure, in a fresh interpreter: the index of the largest error and the heatmap's slice,
# without importing sympy (torch.unravel_index does on its first call: 0.7 s of a grading process).
NO_SYMPY = """
import json, sys, torch
from lumen_ex.core.results import CheckFailed
from lumen_ex.graders.support import expect
expected = torch.softmax(torch.randn(2, 3, 4, 5, dtype=torch.float64), -1)
got = expected.clone()
got[1, 2, 3, 4] += 0.5
try:
    expect.tensors([expect.Expected(got.float(), expected, "weights", ("B", "H", "L_q", "L_k"))],
                   sizes={"B": 2, "H": 3, "L_q": 4, "L_k": 5}, dtype=torch.float32, device="cpu")
except CheckFailed as exc:
    d = exc.diagnosis.details
    print(json.dumps({"index": d["index"], "slice": d["heatmap"]["index"], "worst": d["heatmap"]["worst"],
                      "sympy": "sympy" in sys.modules}))
"""


def test_a_values_failure_is_located_without_importing_sympy():
    proc = subprocess.run([sys.executable, "-I", "-c", NO_SYMPY], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["index"] == [1, 2, 3, 4] and found["slice"] == {"B": 1, "H": 2} and found["worst"] == [3, 4]
    assert found["sympy"] is False


def test_payload_rounds_to_significant_digits_and_keeps_tiny_leaks():
    e = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    g = torch.tensor([[0.99, 1.2345e-6]], dtype=torch.float64)
    p = pictures.heatmap(g, e, what="weights", axes=("L_q", "L_k"))
    assert p["got"] == [[0.99, 1.23e-6]] and p["expected"] == [[1.0, 0.0]]
    assert p["differs"] == [[1, 0]]                              # the check's tolerance decides, not rounding
    assert pictures.heatmap(g, e, what="weights", axes=("L_q", "L_k"), atol=1e-7, rtol=0)["differs"] == [[1, 1]]


def test_no_payload_when_nothing_differs_or_shapes_do_not_match():
    e = torch.eye(3, dtype=torch.float64)
    assert pictures.heatmap(e.float(), e, what="weights", axes=("L_q", "L_k")) is None
    assert pictures.heatmap(e[:2].float(), e, what="weights", axes=("L_q", "L_k")) is None
    assert pictures.heatmap(torch.ones(3), torch.zeros(3), what="x", axes=("L_k",)) is None


def test_attach_keeps_an_existing_picture_and_never_raises():
    diag = Diagnosis("property", "x", details={"heatmap": {"title": "first"}})
    pictures.attach(diag, torch.ones(2, 2), torch.zeros(2, 2), what="weights", axes=("L_q", "L_k"))
    assert diag.details["heatmap"] == {"title": "first"}
    failure = CheckFailed(Diagnosis("property", "y"))
    assert pictures.attach(failure, "not a tensor", torch.zeros(2, 2), what="weights", axes=("L_q", "L_k")) is failure
    assert "heatmap" not in failure.diagnosis.details


def _attention(mask_fn):
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, n, 4, generator=gen, dtype=torch.float64) for n in (5, 7, 7))
    mask = torch.rand(5, 7, generator=gen) < 0.6
    mask[:, 0] = True
    out, w = ref.scaled_dot_product_attention(q, k, v, mask)
    bad_w = mask_fn(q, k, mask)
    return (bad_w @ v).float(), bad_w.float(), out, w


def _check(out, w, exp_out, exp_w, out_axes=("B", "H", "L_q", "d_v")):
    sizes = {"B": 2, "H": 3, "L_q": 5, "L_k": 7, "d_v": 4}
    with pytest.raises(CheckFailed) as info:
        expect.tensors([Expected(out, exp_out, "output", out_axes), Expected(w, exp_w, "weights", ("B", "H", "L_q", "L_k"))],
                       sizes=sizes, dtype=torch.float32, device="cpu")
    return info.value.diagnosis


def test_a_wrong_output_shows_the_wrong_weights_beside_it():
    def multiplied(q, k, mask):
        return torch.softmax(q @ k.transpose(-2, -1) / 2 * mask, -1)
    out, w, exp_out, exp_w = _attention(multiplied)
    diag = _check(out, w, exp_out, exp_w)
    assert diag.kind == "values" and diag.summary.startswith("output:")
    heat = diag.details["heatmap"]
    assert heat["what"] == "weights" and heat["kind"] == "weights"
    leaks = [(i, j) for i, row in enumerate(heat["expected"]) for j, x in enumerate(row) if x == 0 and heat["got"][i][j] > 0]
    assert leaks and all(heat["differs"][i][j] for i, j in leaks)


def test_no_picture_when_the_weights_are_right():
    out, w, exp_out, exp_w = _attention(lambda q, k, mask: ref.scaled_dot_product_attention(q, k, k, mask)[1])
    diag = _check(out * 2, w, exp_out, exp_w)
    assert diag.kind == "values" and "heatmap" not in diag.details


def test_a_wrong_bool_mask_is_pictured_as_a_mask():
    with pytest.raises(CheckFailed) as info:
        expect.tensor(torch.ones(3, 3, dtype=torch.bool).tril(-1), ref.causal_mask(3), what="causal_mask",
                      axes=("L", "L"), sizes={"L": 3}, dtype=torch.bool, device="cpu", tol=expect.Tolerance(0, 0))
    heat = info.value.diagnosis.details["heatmap"]
    assert heat["kind"] == "mask" and heat["expected"] == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert heat["differs"] == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]


def test_the_payload_fits_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    diag = {"kind": "values", "summary": "s", "details": {"heatmap": _mask_payload()}}
    validator = jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/diagnosis"})
    validator.validate(diag)
    big = pictures.heatmap(torch.rand(3, 40, 40), torch.rand(3, 40, 40, dtype=torch.float64), what="weights",
                           axes=("H", "L_q", "L_k"))
    validator.validate({"kind": "values", "summary": "s", "details": {"heatmap": big}})
    assert len(big["png_base64"]) < 8000
    # an exercise's own words (exercise 11: codes over tokens and channels; exercise 10: a mask of held slots)
    own = pictures.heatmap(torch.rand(4, 6), torch.rand(4, 6, dtype=torch.float64), what="k_q", axes=("T", "d"),
                           rows="tokens", cols="channels", kind="codes")
    validator.validate({"kind": "values", "summary": "s", "details": {"heatmap": own}})
    held = dict(_mask_payload(), on="held", cols="slot")
    validator.validate({"kind": "values", "summary": "s", "details": {"heatmap": held}})
    broken = json.loads(json.dumps(diag))
    broken["details"]["heatmap"]["rows"] = "two words"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)
    broken = json.loads(json.dumps(diag))
    broken["details"]["heatmap"]["expected"] = [[0] * 17]
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


# -------------------------------------------------------------------------------------------------
# The terminal drawings


def _plain(renderable, width: int = 100) -> str:
    con = Console(width=width, no_color=True, color_system=None, record=True, file=open("/dev/null", "w"))
    con.print(renderable)
    return "\n".join(line.rstrip() for line in con.export_text().splitlines())


def test_mask_heatmap_text():
    text = _plain(Heatmap(_mask_payload()))
    lines = text.splitlines()
    assert lines[0] == "  causal_mask: rows = queries, columns = keys"
    assert lines[3] == "  q0   ■ ■ ■ ■ · · ·    ■ · · · · · ·    · - - - · · ·"
    assert lines[6] == "  q3   ■ ■ ■ ■ ■ ■ ■    ■ ■ ■ ■ · · ·    · · · · - - -"
    assert "largest difference: query 0, key 1, expected True, yours False (12 of 28 cells differ)" in text


def test_weights_heatmap_marks_nan_and_shades_by_size():
    e = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    g = torch.tensor([[0.25, 0.5, 0.25], [1.0, 0.0, float("nan")]])
    text = _plain(Heatmap(pictures.heatmap(g, e, what="weights", axes=("L_q", "L_k"))))
    assert "  q0  ▓▓▓▓ ·" in text and "  q1  ██ · ·" in text
    row1 = next(line for line in text.splitlines() if line.startswith("  q1"))
    assert row1.endswith(" ?    · · ?")
    assert "? NaN/inf" in text and "█ = 1" in text


def test_an_exercises_own_words_name_the_rows_columns_and_shades():
    """A suite's own rows, columns and kind (exercise 11's tokens x channels of codes) are written as
    they are; an unusable one (not a short word) falls back to queries, keys and weight."""
    e = torch.tensor([[3.0, -2.0, 1.0], [0.0, 5.0, -1.0]], dtype=torch.float64)
    g = e.clone()
    g[1, 1] = 4.0
    text = _plain(Heatmap(pictures.heatmap(g, e, what="k_q", axes=("T", "d"), rows="steps", cols="channels",
                                           kind="codes")))
    assert "k_q: rows = steps, columns = channels" in text
    assert "small to large code" in text and "  s1 " in text
    assert "largest difference: step 1, channel 1, expected 5, yours 4" in text
    odd = _plain(Heatmap(pictures.heatmap(g, e, what="k_q", axes=("T", "d"), rows="a\nb", cols="x" * 40,
                                          kind="[red]")))
    assert "rows = queries, columns = keys" in odd and "small to large weight" in odd


def test_heatmap_fits_a_narrow_terminal_around_the_worst_column():
    expected = torch.zeros(2, 16, dtype=torch.float64)
    got = expected.clone()
    got[1, 13] = 0.5
    p = pictures.heatmap(got, expected, what="weights", axes=("L_q", "L_k"))
    lines = [line.plain for line in heatmap_lines(p, width=60)]
    assert lines[0] == "  weights: rows = queries, columns = keys 8-15 of 16"      # which keys are shown
    assert lines[2].split() == ["8", "10", "12", "14"] * 3            # two-digit keys: every other one
    assert max(len(line.rstrip()) for line in lines[:5] + lines[-1:]) <= 60     # the legend may wrap
    assert heatmap_lines(p, width=120)[0].plain == "  weights: rows = queries, columns = keys"   # all keys fit


def _tall_payload(worst_row: int) -> dict:
    """A 12 x 12 causal picture whose only wrong cell is (worst_row, 0)."""
    expected = torch.tril(torch.ones(12, 12, dtype=torch.float64)) / torch.arange(1, 13, dtype=torch.float64)[:, None]
    got = expected.clone()
    got[worst_row, 0] += 0.25
    return pictures.heatmap(got, expected, what="weights", axes=("L_q", "L_k"))


@pytest.mark.parametrize("worst_row, shown", [(0, range(0, 4)), (6, range(4, 8)), (11, range(8, 12))])
def test_heatmap_keeps_max_rows_around_the_worst_row_and_says_which(worst_row, shown):
    p = _tall_payload(worst_row)
    whole = [line.plain for line in heatmap_lines(p, width=120)]

    def labels(lines: list[str]) -> list[str]:
        return [line.split()[0] for line in lines if re.fullmatch(r"q\d+", (line.split() or [""])[0])]

    assert labels(whole) == [f"q{i}" for i in range(12)]
    assert whole[0] == "  weights: rows = queries, columns = keys"
    lines = [line.plain for line in heatmap_lines(p, width=120, max_rows=4)]
    assert labels(lines) == [f"q{i}" for i in shown]
    assert lines[0] == f"  weights: rows = queries {shown.start}-{shown.stop - 1} of 12, columns = keys"
    assert f"  largest difference: query {worst_row}, key 0, expected" in lines[-1]
    assert len(whole) - len(lines) == 12 - 4           # eight rows fewer, and no line more


def test_largest_difference_line_shortens_to_fit_the_width():
    p = _tall_payload(11)
    full = "  largest difference: query 11, key 0, expected 0.0833, yours 0.333 (1 of 144 cells differ)"
    assert heatmap_lines(p, width=120)[-1].plain == full
    assert heatmap_lines(p, width=len(full) - 1)[-1].plain == full.replace(" cells differ", " differ")
    assert heatmap_lines(p, width=60)[-1].plain == full.split(" (")[0]


def test_shape_diagram_same_rank():
    lines = [t.plain.rstrip() for t in shape_diagram([2, 3, 5, 6], [2, 3, 6, 5], ["B", "H", "L_q", "d_v"],
                                                     ["B", "H", "d_v", "L_q"])]
    assert lines == [
        "  expected  B  H  L_q  d_v",
        "            2  3    5    6",
        "  yours     2  3    6    5",
        "            B  H  d_v  L_q",
        "                  ^^^  ^^^  ^ differs",
    ]


def test_shape_diagram_aligns_a_missing_axis_by_name():
    lines = [t.plain.rstrip() for t in shape_diagram([2, 3, 5, 6], [2, 5, 6], ["B", "H", "L_q", "d_v"],
                                                     ["B", "L_q", "d_v"])]
    assert lines == [
        "  expected  B  H  L_q  d_v",
        "            2  3    5    6",
        "  yours     2  –    5    6",
        "            B  –  L_q  d_v",
        "               ^            ^ differs",
    ]


def test_pictures_use_colour_only_to_repeat_the_characters():
    con = Console(width=100, force_terminal=True, color_system="standard", record=True, file=open("/dev/null", "w"))
    con.print(Heatmap(_mask_payload()))
    coloured = con.export_text(styles=False)
    assert coloured.splitlines()[3].rstrip() == _plain(Heatmap(_mask_payload())).splitlines()[3]


@pytest.mark.parametrize("broken", [
    None, {}, {"expected": [[1]], "got": [[1, 2]], "differs": [[0]]}, {"expected": "x", "got": [], "differs": []},
    {"expected": [[float("nan")]], "got": [[0]], "differs": [[1]]}, {"expected": [["a"]], "got": [[0]], "differs": [[1]]},
])
def test_a_malformed_payload_draws_nothing(broken):
    assert _plain(Heatmap(broken)).strip() == ""
    assert shape_diagram("2", [2], ["B"], ["B"]) == []


def test_a_masks_own_word_for_true_in_every_view():
    """Exercise 10's slot picture is a mask whose True means "this slot holds this token", not "may
    attend": the suite's word ("held") is the legend of the terminal and of the page; a word that is
    not one short word falls back to "may attend", and a picture of numbers carries none."""
    from lumen_ex.core.results import Status
    from lumen_ex.core.results import TestResult as Record
    from lumen_ex.feedback.web import legend

    e = torch.eye(3, dtype=torch.bool)
    g = e.clone()
    g[1] = torch.tensor([True, False, False])
    for on, terminal, page in [("held", "■ True (held)   · False (not held)", "filled: held (True), white with a dot: not held (False)"),
                               ("held here!", "■ True (may attend)   · False (masked)", "filled: may attend (True)"),
                               (None, "■ True (may attend)   · False (masked)", "filled: may attend (True)")]:
        payload = pictures.heatmap(g, e, what="k_cache", axes=("token", "slot"), atol=0, rtol=0, rows="tokens",
                                   cols="slots", on=on)
        assert payload is not None and payload.get("on") == on
        assert terminal in _plain(Heatmap(payload))
        record = Record("t.py::a", "a", "cache", Status.FAIL, diagnosis=Diagnosis("values", "s", details={"heatmap": payload}))
        assert page in legend(record)
    numbers = pictures.heatmap(torch.ones(2, 2), torch.zeros(2, 2), what="w", axes=("L_q", "L_k"), on="held")
    assert numbers is not None and "on" not in numbers
