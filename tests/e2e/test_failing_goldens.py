"""What a learner reads after a failing check of each exercise, at 80 and at 120 columns, against goldens.

One buggy corpus file per exercise, each chosen for a failure a learner meets often (or one whose
order once misled: the caller's cache written in place, lse in half precision; or whose picture is
the tallest: exercise 10's twelve decoding steps), is graded once through the installed
`lumen-ex check N --format json` under bwrap, seed 7, in the session's warm workspace (its check
server answers every check but the first: tests/helpers/cli.py ``WarmWorkspace``), and its record
is drawn by the command's own renderer (``lumen_ex.cli.render.render_result``) at both widths on a
24-line terminal. One grading serves both widths: the record is the same, only the drawing differs.

At either width no line is wider than the terminal, the first failure comes after the table, the
verdict and the next step end the output, and no two rows of the test table look the same; the
first failure, the verdict and the next step fit on the 24-line screen with the prompt (a picture
gives up rows for it: src/lumen_ex/cli/render.py ``_fitted_panel``).
Goldens live in tests/golden/check-failing-<exercise>-<width>.txt; LUMEN_EX_UPDATE_GOLDEN=1 rewrites them.
The last test runs the tallest of these failures on a real pseudo-terminal of 80 x 24, where the
command reads the screen's size itself.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import termios

import pytest
from conftest import LUMEN_EX, requires_bwrap
from helpers.cli import compare, normalise
from rich.console import Console

from lumen_ex.cli.render import render_result
from lumen_ex.core import catalog
from lumen_ex.core.results import RunResult

# exercise number -> the buggy corpus file graded (src/lumen_ex/exercises/<NN-slug>/corpus/buggy/)
FAILING = {1: "naive_exp_softmax.py", 2: "mutates_caller_cache.py", 3: "mask_one_ahead.py",
           4: "writes_into_x.py", 5: "lse_half_dtype.py", 6: "read_before_write.py", 7: "gqa_repeat.py",
           8: "row_term_dropped.py", 9: "p_without_lse.py", 10: "write_after_attend.py", 11: "floor_codes.py",
           12: "ratio_inverted.py", 13: "rope_missing.py", 14: "accumulator_not_rescaled.py"}
TALLEST = 10         # the exercise whose failure draws the tallest picture
WIDTHS = (80, 120)
SCREEN = 24          # lines of the terminal the output is drawn for
ROW_MARKS = ("✓", "✗", "!", "⏱", "-")


@pytest.fixture(scope="module")
def results(warm_workspace) -> dict:
    """Each exercise's failing file, graded once for both widths (its record, as JSON). Over 30 s:
    fourteen real checks, the first of the session's warm workspace cold if no other test made it."""
    ws = warm_workspace
    graded = {}
    # The check server keeps one exercise's session at a time (a switch costs a worker's torch
    # import): exercise 10 last, whose session the terminal test below then finds waiting.
    for number, name in sorted(FAILING.items(), key=lambda item: item[0] == TALLEST):
        ex = catalog.load().find(number)
        ws.put(ex.root / "corpus" / "buggy" / name, str(number))
        proc = ws.run(["check", str(number), "--sandbox", "bwrap", "--seed", "7", "--format", "json"])
        assert proc.returncode == 1, proc.stderr[-2000:]
        graded[number] = RunResult.from_dict(json.loads(proc.stdout))
    return graded


def drawn(result, width: int) -> str:
    """The result as `lumen-ex check` prints it on a terminal ``width`` x SCREEN, without colour."""
    out = io.StringIO()
    render_result(Console(file=out, width=width, highlight=False, soft_wrap=False, no_color=True,
                          force_terminal=False, color_system=None), result, height=SCREEN)
    return out.getvalue()


@requires_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("number", sorted(FAILING))
def test_a_failing_check_reads_well_at_80_and_120_columns(warm_workspace, results, number, width):
    result = results[number]
    assert result.status.value == "fail", result.message
    text = normalise(drawn(result, width), warm_workspace.root.parent)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, text
    rows = [line for line in lines if line[:1] in ROW_MARKS]
    assert rows and len(rows) == len(set(rows)), text
    failure = next(i for i, line in enumerate(lines) if "first failure:" in line)     # the panel's title
    assert failure > lines.index(rows[-1]), "the first failure comes after the table"
    verdict = next(i for i, line in enumerate(lines) if re.match(r"Not yet · score ", line))
    assert lines[verdict + 1].startswith("Next: ") and verdict >= len(lines) - 3, text[-400:]
    # what a 24-line terminal shows once the check ends: the last 23 lines, and the prompt
    assert len(lines) - failure <= SCREEN - 1, "\n".join(lines[failure:])
    compare(f"check-failing-{number}-{width}", text)


def in_terminal(ws, args: list[str], columns: int, lines: int) -> tuple[str, int]:
    """The installed `lumen-ex` run in ``ws`` on a pseudo-terminal of ``columns`` x ``lines`` (its
    window size, no COLUMNS or LINES): what the learner's terminal receives, escape sequences taken out."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES") and not k.startswith(("FORCE_COLOR", "CLICOLOR"))}
    env.update({**ws.env, "NO_COLOR": "1", "TERM": "xterm"})
    proc = subprocess.Popen([LUMEN_EX, *args], cwd=ws.root, env=env, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:             # EIO: the command ended and closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = proc.wait(timeout=300)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode()).replace("\r\n", "\n")
    return text, code


@requires_bwrap
@pytest.mark.slow
def test_in_an_80_by_24_terminal_the_tallest_failure_fits_the_screen(warm_workspace):
    """Exercise 10's twelve decoding steps draw a 12-row picture; on a real 80 x 24 terminal the
    picture keeps the rows around its largest difference, the first failure, the verdict and the
    next step fit the 23 lines above the prompt, and the title says which rows are shown. Piped
    (not a terminal), the same check keeps all twelve rows."""
    ws = warm_workspace
    ws.put(catalog.load().find(TALLEST).root / "corpus" / "buggy" / FAILING[TALLEST], str(TALLEST))
    args = ["check", str(TALLEST), "--sandbox", "bwrap", "--seed", "7"]
    text, code = in_terminal(ws, args, 80, SCREEN)
    assert code == 1, text[-2000:]
    lines = text.rstrip("\n").splitlines()
    screen = lines[-(SCREEN - 1):]
    assert any(line.startswith("╭─ ✗ first failure:") for line in screen), text
    assert screen[-2].startswith("Not yet · score ") and screen[-1].startswith("Next: fix that, then `lumen-ex check 10`")
    assert max(len(line) for line in lines) <= 80, text
    assert re.search(r"rows = queries \d+-\d+ of 12", text), text
    piped = ws.run(args, env_extra={"COLUMNS": "80"})
    assert "rows = queries, columns = keys" in piped.stdout and " q11 " in piped.stdout, piped.stdout
