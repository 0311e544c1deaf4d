"""Plain-text pieces shared by the writers: how a test's diagnosis reads outside a terminal."""

from __future__ import annotations

import math
import re

from lumen_ex.core.results import Diagnosis, RunResult, Status, TestResult, points  # noqa: F401  points: for the writers
from lumen_ex.core.untrusted import one_line

# How each diagnosis kind is labelled where a failure is explained (terminal, playground).
KIND_LABEL = {"shape": "shape", "dtype": "dtype", "device": "device", "nonfinite": "NaN/inf",
              "values": "values", "side-effect": "side effect", "property": "property", "exception": "exception",
              "import": "import", "missing": "missing", "signature": "signature", "arity": "returns",
              "type": "type", "timeout": "timeout", "crash": "crash", "protocol": "protocol", "forbidden": "forbidden",
              "grader": "grader", "file": "file"}
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
        expected_got = expected_got_line(diag)
        if expected_got:
            lines.append(expected_got)
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


def mistake_evidence(entry: dict) -> str:
    """How strongly a run's named mistake (a RunResult.misconceptions entry) is supported:
    'matches 9 of 9 value tests to 1e-9' (', 1e-12 in float64' when that differs)."""
    def bound(err) -> str:
        if not isinstance(err, (int, float)) or not err > 0:
            return "exactly"
        return f"to 1e{math.ceil(math.log10(err) - 1e-12)}"

    counted = f"matches {entry.get('matched')} of {entry.get('of')} value tests"
    if "max_error_float64" in entry and entry.get("max_error_float64") != entry.get("max_error"):
        return f"{counted}, {bound(entry['max_error_float64'])} in float64"
    return f"{counted} {bound(entry.get('max_error'))}"


def expected_got_line(diag: Diagnosis, sep: str = ", ") -> str:
    """'expected X, got Y' for a diagnosis that is not about values; a side the diagnosis leaves
    out (None) is not shown, so a forbidden call reads 'got F.softmax', never 'expected None'. A
    list of names is joined by commas, any other value shown as it is ('' when there is neither).
    The line is one line, its controls shown (core/untrusted.py one_line): a name can come from the
    worker (the forbidden calls it claims), and a newline in it must not start a line of its own."""
    if diag.kind == "values":
        return ""
    sides = [f"{label} {_shown(value)}" for label, value in (("expected", diag.expected), ("got", diag.got))
             if value is not None]
    return one_line(sep.join(sides))


def _shown(value: object) -> str:
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return ", ".join(value)
    return str(value)


def index_ranges(indices: object, most: int = 6) -> str:
    """Indices as runs: [0, 1, 2, 3, 7, 9, 10] reads '0-3, 7, 9-10'; past ``most`` runs the rest is
    counted ('0-3, 7, … (40 in all)'). Anything but a list of ints is shown as it is, one line."""
    if not (isinstance(indices, list) and all(type(i) is int for i in indices)):
        return one_line(str(indices))
    distinct = sorted(set(indices))
    runs: list[list[int]] = []
    for i in distinct:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:most])
    return shown if len(runs) <= most else f"{shown}, … ({len(distinct)} in all)"


def where_line(diag: Diagnosis) -> str:
    """Where the values are wrong: 'wrong heads: 0-1   wrong query rows: 0, 3-11   at ...'."""
    d = diag.details
    parts = []
    if d.get("heads"):
        parts.append("wrong heads: " + index_ranges(d["heads"]))
    if d.get("rows") and diag.kind == "values":
        parts.append("wrong query rows: " + index_ranges(d["rows"]))
    if d.get("where"):
        parts.append(f"at {d['where']}")
    return "   ".join(parts)
