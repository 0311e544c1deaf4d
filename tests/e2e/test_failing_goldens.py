"""What a learner reads after a failing check of each exercise, at 80 and at 120 columns, against goldens.

One buggy corpus file per exercise, each chosen for a failure a learner meets often (or one whose
order once misled: the caller's cache written in place, lse in half precision), is graded once
through the real check (``run_check``, as ``lumen-ex check N`` does, unisolated so that the
output is the same on every machine, seed 7), and its result is drawn by the command's own
renderer (``lumen_ex.cli.render.render_result``) at both widths. One grading serves both widths:
the result record is the same, only the drawing differs.

At either width no line is wider than the terminal, the first failure comes after the table, the
verdict and the next step end the output, and no two rows of the test table look the same; at 80
columns the first failure, the verdict and the next step fit on one 24-line screen with the prompt.
Goldens live in tests/golden/check-failing-<exercise>-<width>.txt; LUMEN_EX_UPDATE_GOLDEN=1 rewrites them.
"""

from __future__ import annotations

import io
import re

import pytest
from conftest import workspace_with
from helpers.cli import compare, normalise
from rich.console import Console

from lumen_ex.cli.render import render_result
from lumen_ex.core import catalog
from lumen_ex.harness.check import run_check

# exercise number -> the buggy corpus file graded (src/lumen_ex/exercises/<NN-slug>/corpus/buggy/)
FAILING = {1: "naive_exp_softmax.py", 2: "mutates_caller_cache.py", 3: "mask_one_ahead.py",
           4: "writes_into_x.py", 5: "lse_half_dtype.py", 6: "read_before_write.py"}
WIDTHS = (80, 120)
ROW_MARKS = ("✓", "✗", "!", "⏱", "-")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    """Each exercise's failing file, graded once for both widths. Over 30 s: six real checks, each
    with a worker of its own (tests/conftest.py keeps this module's tests on one xdist worker, so
    they are made once)."""
    graded = {}
    for number, name in FAILING.items():
        ex = catalog.load().find(number)
        root = workspace_with(tmp_path_factory.mktemp(f"ex{number}"), number, ex.root / "corpus" / "buggy" / name)
        graded[number] = (run_check(str(number), workspace=root, sandbox="none", seed=7, device="cpu",
                                    record=False), root)
    return graded


def drawn(result, width: int) -> str:
    """The result as `lumen-ex check` prints it on a terminal ``width`` columns wide, without colour."""
    out = io.StringIO()
    render_result(Console(file=out, width=width, highlight=False, soft_wrap=False, no_color=True,
                          force_terminal=False, color_system=None), result)
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("number", sorted(FAILING))
def test_a_failing_check_reads_well_at_80_and_120_columns(results, number, width):
    result, root = results[number]
    assert result.status.value == "fail", result.message
    text = normalise(drawn(result, width), root.parent)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, text
    rows = [line for line in lines if line[:1] in ROW_MARKS]
    assert rows and len(rows) == len(set(rows)), text
    failure = next(i for i, line in enumerate(lines) if "first failure:" in line)     # the panel's title
    assert failure > lines.index(rows[-1]), "the first failure comes after the table"
    verdict = next(i for i, line in enumerate(lines) if re.match(r"Not yet · score ", line))
    assert lines[verdict + 1].startswith("Next: ") and verdict >= len(lines) - 3, text[-400:]
    if width == 80:     # what a 80 x 24 terminal shows once the check ends: the last 23 lines, the prompt
        assert len(lines) - failure <= 23, "\n".join(lines[failure:])
    compare(f"check-failing-{number}-{width}", text)
