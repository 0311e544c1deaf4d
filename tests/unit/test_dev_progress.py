"""`lumen-ex dev check`'s progress says each grading against what its file declares.

A buggy file (or the stub) that fails is what it should be: its line says "a fail as declared", and the
running count is of gradings that are not what their file declares. Checked on the progress
adapter itself (src/lumen_ex/authoring/devcheck.py ``_DeclaredProgress``) with records made here,
and through the plain-text view that `lumen-ex grade` and `lumen-ex dev check` share.
"""

from __future__ import annotations

import io

from rich.console import Console

from lumen_ex.authoring.devcheck import _DeclaredProgress
from lumen_ex.classroom.batch_types import Finished
from lumen_ex.cli.classroom import GradeProgress
from lumen_ex.core import catalog, results
from lumen_ex.core.results import RunResult, SandboxInfo, Status

EX = catalog.load().find(1)


def record(status: Status, score: float) -> RunResult:
    row = results.TestResult("t", "a test", "values", status, score=score, max_score=10.0)
    return RunResult(exercise=EX.summary(), status=status, sandbox=SandboxInfo("none", False, {}, ""), device="cpu",
                     seed=1, score=score, max_score=10.0, duration=0.1, message="", tests=[row])


def test_a_buggy_file_that_fails_is_as_declared_and_only_surprises_are_counted(capsys):
    out = io.StringIO()
    inner = GradeProgress(Console(file=out, width=200, force_terminal=False, no_color=True))
    progress = _DeclaredProgress(inner, {"buggy--seed-1": "fail", "correct--seed-1": "pass", "buggy2--seed-1": "fail"})
    graded = [("buggy--seed-1", record(Status.FAIL, 3.5)), ("correct--seed-1", record(Status.FAIL, 9.0)),
              ("buggy2--seed-1", record(Status.PASS, 10.0))]
    progress.begin(len(graded), 0, len(graded), "")
    for done, (student, result) in enumerate(graded, 1):
        progress.finished(Finished(student, EX, result, done, len(graded), failed=done, errors=0))
    progress.end()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert ("buggy--seed-1 attention: fail 3.5/10, a fail as declared (kind and mistake: in the report)" in lines[0]
            and "0 with the wrong pass or fail" in lines[0])
    assert "correct--seed-1 attention: fail 9/10, declared to pass" in lines[1] and "1 with the wrong pass or fail" in lines[1]
    assert "buggy2--seed-1 attention: pass 10/10, declared to fail" in lines[2] and "2 with the wrong pass or fail" in lines[2]
    assert not any(" failed, " in line for line in lines)
