"""A failing check on one screen (src/lumen_ex/cli/render.py ``_fitted_panel``): the first failure,
the verdict and the next step fit the terminal's height where the failure's picture can give up
rows, and the words are never cut. Where the values are wrong reads as runs of indices
(src/lumen_ex/feedback/text.py ``index_ranges``), not as twelve numbers that wrap.

The real checks of every exercise are held to 80 x 24 in tests/e2e/test_failing_goldens.py; here
a made-up record makes each rule fail on its own."""

from __future__ import annotations

import io

import pytest
import torch
from rich.console import Console

from lumen_ex.cli.render import PICTURE_ROWS, render_result, screen_lines
from lumen_ex.core.results import Diagnosis, RunResult, SandboxInfo, Status
from lumen_ex.core.results import TestResult as Case  # not "Test...": pytest would try to collect it
from lumen_ex.feedback.pictures import heatmap as pictures
from lumen_ex.feedback.text import index_ranges, where_line

LONG = ("your query attends to the slots as they were before the new token was written, so it never sees "
        "itself: store k_t and v_t in their slot first and attend after, so that the new token sees itself")


def _result(n_rows: int = 12, *, picture: bool = True, sentence: str = LONG, number: int = 10) -> RunResult:
    expected = torch.tril(torch.ones(n_rows, n_rows, dtype=torch.float64))
    expected /= expected.sum(-1, keepdim=True)                          # (L_q, L_k), causal weights
    got = expected.clone()
    got[n_rows - 1, 0] += 0.5                                           # the largest difference: the last row
    details = {"heads": [0, 1, 2, 3], "rows": list(range(n_rows))}
    if picture:
        details["heatmap"] = pictures.heatmap(got, expected, what="weights", axes=("L_q", "L_k"))
    diag = Diagnosis("values", "weights: 19 of 144 values differ; largest error 0.5 at [L_q=11, L_k=0]",
                     details=details, misconception="write-after-attend", hint=sentence)
    test = Case("t::test_window", "each token attends to the window", "values", Status.FAIL, 0.0, 1.0, diagnosis=diag)
    passed = [Case(f"t::test_{i}", f"passing test {i}", "shapes", Status.PASS, 1.0, 1.0) for i in range(20)]
    return RunResult(exercise={"number": number, "slug": "sink-window", "title": "Sinks and a window"},
                     status=Status.FAIL, score=20.0, max_score=21.0, tests=[*passed, test],
                     sandbox=SandboxInfo("bwrap", True), device="cpu", seed=1, message="1 of 21 tests failed")


def _drawn(result: RunResult, width: int, height: int | None, *, watching: bool = False) -> list[str]:
    out = io.StringIO()
    render_result(Console(file=out, width=width, color_system=None, highlight=False, soft_wrap=False), result,
                  watching=watching, height=height)
    return out.getvalue().splitlines()


def _from_panel(lines: list[str]) -> list[str]:
    return lines[next(i for i, line in enumerate(lines) if "first failure:" in line):]


def _rows(lines: list[str]) -> list[str]:
    return [line.split()[1] for line in lines if line.startswith("│") and len(line.split()) > 1
            and line.split()[1][:1] == "q" and line.split()[1][1:].isdigit()]


@pytest.mark.parametrize("width", [80, 120])
def test_the_failure_the_verdict_and_the_next_step_fit_a_24_line_screen(width):
    lines = _drawn(_result(), width, 24)
    assert len(_from_panel(lines)) <= 23, "\n".join(_from_panel(lines))        # the 24th line: the prompt
    rows = _rows(lines)
    assert PICTURE_ROWS <= len(rows) < 12 and rows[-1] == "q11", rows         # around the largest difference
    assert any(f"rows = queries {12 - len(rows)}-11 of 12, columns = keys" in line for line in lines)
    assert LONG in _words(lines)                                              # the words, whole


def test_a_taller_terminal_shows_the_whole_picture():
    lines = _drawn(_result(), 80, 60)
    assert _rows(lines) == [f"q{i}" for i in range(12)]
    assert not any("rows = queries " in line and " of 12" in line.split("columns")[0] for line in lines)


def test_the_picture_keeps_its_fewest_rows_and_the_words_stay_whole():
    lines = _drawn(_result(sentence=LONG * 4), 80, 24)            # too many words for any picture to make room
    assert len(_rows(lines)) == PICTURE_ROWS
    assert _words(lines).count("so that the new token sees itself") == 4


def test_where_its_fewest_rows_are_not_enough_the_picture_leaves_out_its_largest_difference_line():
    """One line short at the fewest rows: the "largest difference" line goes (the cell is in the
    picture, and the diagnosis's first line names it); the words and the rows stay."""
    result = _result(sentence=LONG * 2)
    drawn = {h: _drawn(result, 80, h) for h in range(12, 60)}
    named = [h for h, lines in drawn.items() if any("largest difference: query 11, key 0" in x for x in lines)]
    tallest_without = max(h for h in drawn if h not in named)
    assert named == list(range(tallest_without + 1, 60))              # the line goes only below some height
    short = drawn[tallest_without]
    assert len(_from_panel(short)) <= tallest_without - 1, "\n".join(_from_panel(short))      # and that made it fit
    assert len(_rows(short)) == PICTURE_ROWS and _rows(short)[-1] == "q11"
    assert len(_rows(drawn[tallest_without + 1])) == PICTURE_ROWS     # it went after the rows had
    assert _words(short).count("so that the new token sees itself") == 2
    assert "largest error 0.5 at [L_q=11, L_k=0]" in _words(short)


def _words(lines: list[str]) -> str:
    """The drawn text with the panel's borders and line breaks taken out."""
    return " ".join(" ".join(lines).replace("│", " ").split())


def test_a_failure_without_a_picture_is_printed_whole():
    lines = _drawn(_result(picture=False, sentence=LONG * 4), 80, 24)
    assert _words(lines).count("so that the new token sees itself") == 4


@pytest.mark.parametrize("watching, wide, narrow", [
    (False, "Next: fix the first failure above, then run `lumen-ex check 10` again (stuck? `lumen-ex hint 10`).",
     "Next: fix that, then `lumen-ex check 10` again (stuck? `lumen-ex hint 10`)."),
    (True, "Next: fix the first failure above, then save the file to check it again (stuck? `lumen-ex hint 10`).",
     "Next: fix that, then save to check again (stuck? `lumen-ex hint 10`).")])
def test_the_next_step_is_one_line_at_80_columns(watching, wide, narrow):
    assert _drawn(_result(), 120, 60, watching=watching)[-1] == wide
    assert _drawn(_result(), 80, 60, watching=watching)[-1] == narrow


@pytest.mark.parametrize("indices, text", [
    ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], "0-11"), ([3], "3"), ([0, 1], "0-1"), ([5, 0, 1, 2, 9, 10], "0-2, 5, 9-10"),
    ([0, 2, 4, 6, 8, 10, 12, 14], "0, 2, 4, 6, 8, 10, … (8 in all)"), ([1, 1, 2], "1-2"),
    (["a\nb"], "['a\\nb']"), ("x", "x")])
def test_index_ranges(indices, text):
    assert index_ranges(indices) == text


def test_where_line_reads_runs_and_no_longer_cuts_at_twelve_rows():
    diag = Diagnosis("values", "…", details={"heads": [0, 1, 2, 3, 4, 5], "rows": list(range(40))})
    assert where_line(diag) == "wrong heads: 0-5   wrong query rows: 0-39"


def test_no_limit_where_the_output_is_not_a_terminal():
    assert _rows(_drawn(_result(), 80, None)) == [f"q{i}" for i in range(12)]
    assert screen_lines(Console(file=io.StringIO(), width=80, height=24)) is None      # a file, a pipe, a CI log
    terminal = Console(file=io.StringIO(), width=80, height=24, force_terminal=True)
    assert screen_lines(terminal) == 24 and screen_lines(terminal, below=1) == 23


def test_a_name_too_long_for_the_border_ends_in_an_ellipsis():
    result = _result()
    result.tests[-1].name = "each token attends to exactly the sinks and the last window, itself included"
    title = next(line for line in _drawn(result, 80, None) if "first failure:" in line)
    assert len(title) == 80 and title.endswith("wind…─╮"), title
