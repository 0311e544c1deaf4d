"""Plain-text pieces shared by the writers: how a test's diagnosis reads outside a terminal."""

from __future__ import annotations

import re

from lumen_ex.core.results import RunResult, Status, TestResult, points  # noqa: F401  points: for the writers

OUTPUT_CAP = 2000          # characters of learner output quoted per test in LMS formats
_LINE = re.compile(r"\bline (\d+)\b")


def capped(text: str, cap: int = OUTPUT_CAP) -> str:
    """``text`` cut to ``cap`` characters, saying how many more there were."""
    return text if len(text) <= cap else text[:cap] + f"\n[... {len(text) - cap} more characters]"


def exercise_path(result: RunResult) -> str:
    """The learner's file, relative to the workspace root (01-attention/attention.py)."""
    from lumen_ex.core import catalog

    try:
        return catalog.load().find(result.exercise["number"]).path
    except Exception:  # noqa: BLE001  a view never fails on an unknown exercise
        return ""


def source_line(test: TestResult) -> int | None:
    """The line of the learner's file a failure points at, when the diagnosis knows it."""
    diag = test.diagnosis
    if diag is None:
        return None
    line = diag.details.get("line")
    if type(line) is int and line > 0:
        return line
    where = diag.details.get("where")
    if isinstance(where, str):
        m = _LINE.search(where)
        if m:
            return int(m.group(1))
    return None


def explain(test: TestResult, *, output_cap: int = OUTPUT_CAP, with_output: bool = True) -> str:
    """What went wrong in ``test``, as a few lines of plain text (empty for a pass), followed by
    what the learner's code printed (at most ``output_cap`` characters) when ``with_output``."""
    if test.status is Status.PASS:
        return ""
    lines: list[str] = []
    diag = test.diagnosis
    if test.status is Status.SKIPPED:
        lines.append(f"skipped: {test.message or 'not applicable here'}")
    elif diag is None:
        lines.append(test.message or test.status.value)
    else:
        lines.append(f"{diag.kind}: {diag.summary}")
        where, code = diag.details.get("where"), diag.details.get("code")
        if isinstance(where, str) and where:
            lines.append(f"at {where}" + (f": {code}" if isinstance(code, str) and code else ""))
        if diag.kind not in ("values",) and (diag.expected is not None or diag.got is not None):
            lines.append(f"expected {diag.expected}, got {diag.got}")
        if diag.misconception:
            lines.append(f"likely mistake ({diag.misconception}): {diag.hint or diag.misconception}")
        elif diag.hint:
            lines.append(f"try: {diag.hint}")
    out = test.output.strip() if with_output else ""
    if out:
        lines += ["your code printed:", capped(out, output_cap)]
    return "\n".join(lines)


def headline(result: RunResult) -> str:
    """One line: exercise, verdict, score, seed and sandbox."""
    ex = result.exercise
    iso = "isolated" if result.sandbox.isolated else "NOT ISOLATED"
    return (f"lumen-ex check {ex['number']} ({ex['title']}): {result.message}; score "
            f"{points(result.score)}/{points(result.max_score)}; seed {result.seed}; "
            f"sandbox {result.sandbox.backend} ({iso})")
