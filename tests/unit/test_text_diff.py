"""A model's text under the reference's (src/lumen_ex/feedback/text_diff.py), in the terminal and on
the web page: the payload is checked, neutralised and aligned, and the first difference is marked."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from lumen_ex.cli.render import render_result
from lumen_ex.core.results import Diagnosis, RunResult, SandboxInfo, Status
from lumen_ex.core.results import TestResult as Case  # not "Test...": pytest would try to collect it
from lumen_ex.feedback import text_diff
from lumen_ex.feedback.web import web_view

PROMPT = "The cache costs memory, and that is the "
EXPECTED = "motivation for **grouped-query attention** (GQA): several\nquery heads share one key/value head"
YOURS = "me timachin itachitachitatachis tatatatacha tatatatachatata tatatatachatatatatatatachatatatas tatata"


def texts(yours=YOURS, expected=EXPECTED, prompt=PROMPT, first=1) -> dict:
    return {"texts": {"prompt": prompt, "yours": yours, "expected": expected, "first_difference": first}}


def result_with(details: dict) -> RunResult:
    diag = Diagnosis("values", "your model wrote another text than the reference's from character 2 of 120 on",
                     details=details, misconception="rope-positions-restart",
                     hint="the new tokens sit at positions T .. T+L-1")
    test = Case("t::test_greedy_generation", "greedy generation writes the reference's text", "generation",
                Status.FAIL, 0.0, 2.0, diagnosis=diag)
    return RunResult(exercise={"number": 13, "slug": "tiny-model", "title": "Tiny model"}, status=Status.FAIL,
                     score=0.0, max_score=2.0, tests=[test], sandbox=SandboxInfo("bwrap", True), device="cpu", seed=1,
                     message="1 of 1 tests failed")


def test_the_payload_is_checked_and_made_safe():
    c = text_diff.comparison(texts(yours="a\x1b[2Jb\nc", first=99))
    assert c is not None and c.yours == "a\u241b[2Jb\u2424c"        # shown, never acted on; a newline one wide
    assert c.first == len(c.yours)                                    # clamped to the shorter text
    assert text_diff.comparison({}) is None
    assert text_diff.comparison({"texts": {"prompt": "p", "yours": 3, "expected": "", "first_difference": 0}}) is None
    assert text_diff.comparison({"texts": "not a dict"}) is None
    long = text_diff.comparison(texts(yours="x" * 10_000))
    assert long is not None and len(long.yours) == text_diff.MAX_CHARS


def test_rows_align_both_texts_and_mark_the_first_difference_once():
    c = text_diff.comparison(texts(first=70))
    assert c is not None
    rows = text_diff.rows(c, 64)
    assert [r.start for r in rows] == [0, 64]
    assert [r.marked for r in rows] == [None, 6]
    assert "".join(r.expected for r in rows) == c.expected and "".join(r.yours for r in rows) == c.yours


def test_the_terminal_shows_the_prompt_both_texts_and_a_caret_under_the_difference():
    buf = io.StringIO()
    render_result(Console(file=buf, width=120, color_system=None), result_with(texts()))
    out = buf.getvalue()
    lines = out.splitlines()
    yours = next(i for i, line in enumerate(lines) if "yours    me timachin" in line)
    assert PROMPT.strip() in out and "expected motivation for" in lines[yours + 1]
    caret = lines[yours + 2]
    assert caret.index("^") == lines[yours].index("me timachin") + 1     # under character 2 of the text
    assert "they part at character 2" in out and "\u2424query" in out     # the newline shown, one wide


def test_the_web_view_carries_the_rows_as_text():
    view = web_view(result_with(texts()))
    (item,) = [line for line in view["first"]["lines"] if line["kind"] == "texts"]
    assert item["prompt"] == PROMPT and item["rows"][0]["marked"] == 1
    assert "\u21b5query" in item["rows"][0]["expected"]          # a newline a browser font can draw
    assert item["rows"][0]["yours"].startswith("me timachin") and "they part at character 2" in item["caption"]


def test_the_record_with_texts_matches_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).parents[2] / "docs" / "result.schema.json").read_text())
    jsonschema.validate(result_with(texts()).to_dict(), schema)
    bad = result_with(texts(first=-1)).to_dict()
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
