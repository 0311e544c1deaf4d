"""A failure's "expected ... got ..." line (src/lumen_ex/feedback/text.py expected_got_line) in the
three views that print it: the terminal, the plain text of the class formats and the web page. A side
the diagnosis leaves out is not printed ("expected None" told a learner nothing), a list of names
reads as names, and a value failure has no such line (its picture and numbers say it)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from lumen_ex.cli.render import render_result
from lumen_ex.core.results import Diagnosis, RunResult, SandboxInfo, Status
from lumen_ex.core.results import TestResult as Case  # not "Test...": pytest would try to collect it
from lumen_ex.feedback.text import expected_got_line, explain
from lumen_ex.feedback.web import web_view

FORBIDDEN = Diagnosis("forbidden", "implement it yourself; calling F.scaled_dot_product_attention is not allowed",
                      got=["F.scaled_dot_product_attention"], misconception="forbidden-api")
DTYPE = Diagnosis("dtype", "out has the wrong dtype", expected="float32", got="float16")
SHAPE_NO_AXES = Diagnosis("shape", "out has the wrong shape", expected=[2, 4, 8], got=[2, 8, 4])
VALUES = Diagnosis("values", "12 of 64 values differ", expected=1.5, got=0.5)


def views(diag: Diagnosis) -> dict[str, str]:
    """The failure as the terminal, the plain-text formats and the web page show it."""
    test = Case("t::test_it", "it", "values", Status.FAIL, 0.0, 1.0, diagnosis=diag)
    result = RunResult(exercise={"number": 1, "slug": "attention", "title": "Attention"}, status=Status.FAIL,
                       score=0.0, max_score=1.0, tests=[test], sandbox=SandboxInfo("bwrap", True), device="cpu",
                       seed=1, message="1 of 1 tests failed")
    buf = io.StringIO()
    render_result(Console(file=buf, width=160, color_system=None), result)
    web = "\n".join(str(line.get("text", "")) for line in web_view(result)["first"]["lines"])
    return {"terminal": buf.getvalue(), "text": explain(test), "web": web}


@pytest.mark.parametrize("view", ["terminal", "text", "web"])
def test_a_side_left_out_is_not_printed_and_names_read_as_names(view):
    shown = views(FORBIDDEN)[view]
    assert "got F.scaled_dot_product_attention" in shown
    assert "None" not in shown and "expected" not in shown
    assert "['" not in shown


@pytest.mark.parametrize("view", ["terminal", "text", "web"])
def test_both_sides_are_printed_when_both_are_known(view):
    shown = views(DTYPE)[view]
    assert "expected float32" in shown and "got float16" in shown
    assert "expected [2, 4, 8]" in views(SHAPE_NO_AXES)[view]     # a shape stays a shape


@pytest.mark.parametrize("view", ["terminal", "text", "web"])
def test_a_value_failure_has_no_expected_got_line(view):
    shown = views(VALUES)[view]
    assert "expected 1.5" not in shown and "got 0.5" not in shown


def test_the_line_itself():
    assert expected_got_line(FORBIDDEN) == "got F.scaled_dot_product_attention"
    assert expected_got_line(DTYPE) == "expected float32, got float16"
    assert expected_got_line(DTYPE, "   ") == "expected float32   got float16"
    assert expected_got_line(Diagnosis("type", "not a tensor", expected="Tensor")) == "expected Tensor"
    assert expected_got_line(Diagnosis("exception", "it raised")) == ""
    assert expected_got_line(VALUES) == ""
    # a name that came from the learner's side stays on one line, its controls shown
    hostile = Diagnosis("type", "not a tensor", expected="Tensor", got="Evil\n# Grade: 10/10\x1b[2J")
    assert expected_got_line(hostile) == "expected Tensor, got Evil␤# Grade: 10/10␛[2J"
