"""The playground's view of a result record (``lumen-ex serve``, src/lumen_ex/playground/): the same
reading as the terminal's (src/lumen_ex/cli/render.py), shapes first, as JSON for the page to draw.

The first failure comes first: its kind and summary, the shape diagram as columns (axis names),
expected and got, where the values are wrong and the learner's own line, the heatmap as a PNG
``data:`` URL, then the named mistake with its evidence across the run (or the hint); then every
test with its score and what it printed, then the next step.

Every string from the record passes through src/lumen_ex/core/untrusted.py here (``one_line`` for
names and cells, ``visible`` for messages and printed output); the page then writes each one with
``textContent``, never as HTML, so a learner's ``print("<script>")`` stays text
(tests/e2e/test_playground_browser.py). Pictures are re-checked PNGs (src/lumen_ex/feedback/pictures).
"""

from __future__ import annotations

import re

from lumen_ex.core.explaining import VALUE_KINDS
from lumen_ex.core.results import Diagnosis, RunResult, Status, TestResult, points
from lumen_ex.core.untrusted import one_line, visible
from lumen_ex.feedback import text_diff
from lumen_ex.feedback.pictures import caption, data_url, picture
from lumen_ex.feedback.pictures.png import payload_word
from lumen_ex.feedback.shapes import shape_columns
from lumen_ex.feedback.text import KIND_LABEL, expected_got_line, mistake_evidence, where_line

MARK = {Status.PASS: "✓", Status.FAIL: "✗", Status.ERROR: "!", Status.TIMEOUT: "⏱", Status.SKIPPED: "-"}
HEADLINE = {Status.PASS: "All tests passed", Status.FAIL: "Not yet", Status.ERROR: "The grader could not finish",
            Status.TIMEOUT: "Not yet"}
OUTPUT_CAP = 8000     # characters of printed output per test on the page (the record keeps up to 8 KiB)


def web_view(result: RunResult) -> dict:
    """The result record as the playground page draws it (all text already made harmless)."""
    passed = sum(t.status is Status.PASS for t in result.tests)
    counted = sum(t.status is not Status.SKIPPED for t in result.tests)
    source = result.source or {}
    identity = [result.device, f"seed {result.seed}"]
    if source.get("file") and source.get("sha256"):
        identity.append(f"{source['file']} sha256 {str(source['sha256'])[:12]}")
    first = result.first_failure
    return {
        "status": result.status.value,
        "headline": HEADLINE.get(result.status, "Not yet"),
        "summary": one_line(f"score {points(result.score)}/{points(result.max_score)} · {passed} of {counted} "
                            f"tests passed · {result.duration:.2f} s"),
        "identity": one_line(" · ".join(identity)),
        "sandbox": {"backend": one_line(result.sandbox.backend), "isolated": bool(result.sandbox.isolated),
                    "note": visible(result.sandbox.note or "")},
        "warnings": [visible(w) for w in result.warnings],
        "first": _first(first, result.misconceptions) if first is not None else None,
        "tests": [_row(t) for t in result.tests],
        "next": _next(result),
    }


def _first(test: TestResult, named: list[dict]) -> dict:
    diag = test.diagnosis
    top = named[0] if named else None
    name = test.name
    if diag is not None and diag.kind == "import":    # one cause for every test: say so in the title
        name = "your file does not parse" if "does not parse" in diag.summary else "your file did not import"
    if diag is not None:
        lines = diagnosis_lines(diag, test, top)
    else:
        lines = [{"kind": "text", "text": visible(test.message or test.status.value)}]
        if top is not None:
            lines.append(_run_mistake(top))
    output = test.output.strip()
    return {"title": one_line(f"{MARK[test.status]} first failure: {name}"), "status": test.status.value,
            "lines": lines, "output": _printed(output) if output else None, "line": _learner_line(diag)}


def legend(test: TestResult) -> str:
    """How to read a heatmap on the page, with the indices of its rows and columns (the terminal's
    picture has them written in)."""
    payload = (test.diagnosis.details.get("heatmap") if test.diagnosis else None) or {}
    grid = payload.get("expected") if isinstance(payload, dict) else None
    n_rows = len(grid) if isinstance(grid, list) else 0
    n_cols = len(grid[0]) if isinstance(grid, list) and n_rows and isinstance(grid[0], list) else 0
    rows = one_line(payload_word(payload, "rows") or "queries")
    cols = one_line(payload_word(payload, "cols") or "keys")
    row_start, col_start = payload.get("row_start"), payload.get("col_start")
    first_row = row_start if type(row_start) is int else 0
    first_col = col_start if type(col_start) is int else 0
    kind, on = payload.get("kind"), payload_word(payload, "on")
    shades = ((f"filled: {on} (True), white with a dot: not {on} (False)" if on
               else "filled: may attend (True), white with a dot: masked (False)") if kind == "mask"
              else "white with a dot: exactly 0, light to dark blue: small to large")
    return one_line(f"rows: {rows} {first_row} to {first_row + n_rows - 1}, top to bottom; columns: {cols} "
                    f"{first_col} to {first_col + n_cols - 1}, left to right. {shades}; red frame: yours differs; "
                    "difference: red where yours is larger, blue where it is smaller.")


def _learner_line(diag: Diagnosis | None) -> int | None:
    """The line of the learner's file the failure points to (a syntax error's, or the line that
    raised: details "line" or "where" = "attention.py line 12 in f"), for the editor's gutter."""
    if diag is None:
        return None
    line = diag.details.get("line")
    if type(line) is int and 0 < line < 1_000_000:
        return line
    match = re.search(r" line (\d{1,6})\b", str(diag.details.get("where") or ""))
    return int(match.group(1)) if match else None


def diagnosis_lines(diag: Diagnosis, test: TestResult, run_mistake: dict | None) -> list[dict]:
    """The first failure's lines, in the terminal's order (cli/render.py _diagnosis_lines): each a
    dict with a ``kind`` (text, dim, code, shape, picture, mistake, try) the page draws."""
    label = one_line(KIND_LABEL.get(diag.kind, diag.kind))
    out: list[dict] = [{"kind": "text", "label": label, "text": visible(diag.summary)}]
    columns = None
    if diag.kind == "shape" and diag.details.get("expected_axes"):
        columns = shape_columns(diag.expected or [], diag.got or [], diag.details["expected_axes"],
                                diag.details.get("got_axes") or [])
    if columns:
        out.append({"kind": "shape", "rows": [
            {"label": "expected", "cells": [{"text": c.expected[0], "bad": False} for c in columns]},
            {"label": "", "cells": [{"text": c.expected[1], "bad": False} for c in columns]},
            {"label": "yours", "part": "yours", "cells": [{"text": c.yours[1], "bad": c.differs} for c in columns]},
            {"label": "", "part": "yours", "cells": [{"text": c.yours[0], "bad": c.differs} for c in columns]},
        ]})
    elif pair := expected_got_line(diag, "   "):
        out.append({"kind": "dim", "text": pair})          # one line already
    where = where_line(diag)
    if where:
        out.append({"kind": "dim", "text": one_line(where)})
    if isinstance(diag.details.get("code"), str) and diag.details.get("where"):
        out.append({"kind": "code", "text": one_line(diag.details["code"])})
    texts = text_diff.comparison(diag.details)
    if texts is not None:
        def shown(s: str) -> str:      # a newline as ↵: browsers' fonts draw it, not always ␤
            return s.replace("\u2424", "\u21b5")

        out.append({"kind": "texts", "caption": text_diff.caption(texts), "prompt": shown(texts.prompt), "rows": [
            {"start": r.start, "marked": r.marked, "yours": shown(r.yours), "expected": shown(r.expected)}
            for r in text_diff.rows(texts, 64)]})
    png = picture(test)
    if png is not None:
        out.append({"kind": "picture", "src": data_url(png), "caption": caption(test), "legend": legend(test)})
    if run_mistake is not None and diag.misconception == run_mistake.get("id"):
        out.append(_run_mistake(run_mistake))       # the same mistake, with the run's evidence
        return out
    advice = visible(diag.hint or diag.misconception or "")
    if diag.misconception and diag.kind in VALUE_KINDS:
        out.append({"kind": "mistake", "label": "seen on this test", "text": advice})
    elif diag.misconception and diag.kind == "exception":
        out.append({"kind": "try", "label": "try", "text": advice})
    elif diag.misconception:
        out.append({"kind": "mistake", "label": "likely mistake", "text": advice})
    elif diag.hint:
        out.append({"kind": "try", "label": "try", "text": advice})
    if run_mistake is not None:
        out.append(_run_mistake(run_mistake))
    return out


def _run_mistake(entry: dict) -> dict:
    return {"kind": "mistake", "label": one_line(f"likely mistake ({mistake_evidence(entry)})"),
            "text": visible(entry.get("sentence", ""))}


def _printed(output: str) -> str:
    shown = visible(output)
    if len(shown) > OUTPUT_CAP:
        shown = shown[:OUTPUT_CAP] + f"\n[... {len(shown) - OUTPUT_CAP} more characters]"
    return shown


def _row(t: TestResult) -> dict:
    why = t.message if t.status is Status.PASS else (t.message or t.status.value)
    output = t.output.strip()
    return {"mark": MARK[t.status], "status": t.status.value, "group": one_line(t.group), "name": one_line(t.name),
            "score": f"{points(t.score)}/{points(t.max_score)}", "why": one_line(why or ""),
            "output": _printed(output) if output else ""}


def _next(result: RunResult) -> str:
    if result.status is Status.PASS:
        return "Next: the next exercise in the list, or read the README again for the why."
    if result.status is Status.ERROR:
        return one_line(f"{result.message}. Run `lumen-ex doctor`; if it persists, report it with "
                        f"`lumen-ex check {result.exercise.get('number')} --format json` output.")
    return "Next: fix the first failure above, then press Check (Ctrl+Enter) again. Stuck? Press Hint."
