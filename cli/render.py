"""Rich views of the result record and of the other commands' data.

A view reads the record; it decides nothing. The first failing test comes first, explained shape
first, then dtype and device, then values, then the mistake that explains it; then a compact table
of every test, the score and the next step. Colours are off when the output is not a terminal or
NO_COLOR is set (rich honours both).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from lumen_ex.results import Diagnosis, RunResult, Status, TestResult, points

from .pictures import Heatmap, shape_diagram

MARK = {Status.PASS: ("✓", "green"), Status.FAIL: ("✗", "red"), Status.ERROR: ("!", "red"),
        Status.TIMEOUT: ("⏱", "red"), Status.SKIPPED: ("-", "dim")}
KIND_LABEL = {"shape": "shape", "dtype": "dtype", "device": "device", "nonfinite": "NaN/inf",
              "values": "values", "property": "property", "exception": "exception", "import": "import",
              "missing": "missing", "signature": "signature", "arity": "returns", "type": "type",
              "timeout": "timeout", "crash": "crash", "protocol": "protocol", "forbidden": "forbidden",
              "grader": "grader"}


def console() -> Console:
    width = int(os.environ.get("COLUMNS", "0") or 0) or None
    return Console(highlight=False, soft_wrap=False, width=width)


# -------------------------------------------------------------------------------------------------
# check


def render_result(con: Console, result: RunResult) -> None:
    ex = result.exercise
    sandbox = result.sandbox
    iso = "isolated" if sandbox.isolated else "NOT ISOLATED"
    con.print(Text.assemble(
        (f"lumen-ex check {ex['number']}", "bold"), f" · {ex['title']} · ",
        (f"sandbox {sandbox.backend} ({iso})", "green" if sandbox.isolated else "bold red"),
        f" · {result.device} · seed {result.seed}"))
    if not sandbox.isolated:
        con.print(Panel(Text(sandbox.note or "This run was not isolated.", style="bold"),
                        title="warning", border_style="red"))
    first = result.first_failure
    if first is not None:
        con.print()
        con.print(_failure_panel(first, result.misconceptions))
    con.print()
    con.print(_table(result.tests, con.width))
    con.print()
    con.print(_summary(result))


def _failure_panel(test: TestResult, named: list[dict] | None = None) -> Panel:
    """The first failure; ``named``: the run's named mistakes (RunResult.misconceptions), whose
    most consistent one is shown under it with its evidence across the run."""
    lines: list = []
    diag = test.diagnosis
    top = named[0] if named else None
    if diag is not None:
        lines += _diagnosis_lines(diag, run_mistake=top)
    elif top is not None:
        lines += [Text(test.message or test.status.value), _run_mistake_line(top)]
    else:
        lines.append(Text(test.message or test.status.value))
    if test.output.strip():
        shown = "\n".join(test.output.strip().splitlines()[:12])
        lines += [Text(""), Text("your code printed:", style="dim"), Text(shown, style="dim")]
    mark, color = MARK[test.status]
    title = Text.assemble((f"{mark} first failure: ", color), (test.name, "bold"))
    return Panel(Group(*lines), title=title, title_align="left", border_style=color)


def _diagnosis_lines(diag: Diagnosis, run_mistake: dict | None = None) -> list:
    label = KIND_LABEL.get(diag.kind, diag.kind)
    out: list = [Text.assemble((f"{label}: ", "bold yellow"), diag.summary)]
    if diag.kind == "shape" and diag.details.get("expected_axes"):
        out += shape_diagram(diag.expected or [], diag.got or [], diag.details["expected_axes"],
                             diag.details.get("got_axes") or [])
    elif diag.expected is not None or diag.got is not None:
        if diag.kind not in ("values",):
            out.append(Text(f"  expected {diag.expected}   got {diag.got}", style="dim"))
    where = _where(diag)
    if where:
        out.append(Text(f"  {where}", style="dim"))
    if isinstance(diag.details.get("heatmap"), dict):
        out.append(Heatmap(diag.details["heatmap"]))
    if run_mistake is not None and diag.misconception == run_mistake.get("id"):
        out.append(_run_mistake_line(run_mistake))     # the same mistake, with the run's evidence
        return out
    if diag.misconception:
        out.append(Text.assemble(("likely mistake: ", "bold magenta"), diag.hint or diag.misconception))
    elif diag.hint:
        out.append(Text.assemble(("try: ", "bold cyan"), diag.hint))
    if run_mistake is not None:
        out.append(_run_mistake_line(run_mistake))
    return out


def _run_mistake_line(entry: dict) -> Text:
    """'likely mistake (matches 9 of 9 value tests to 1e-9): ...' from a RunResult.misconceptions entry."""
    def bound(err) -> str:
        if not isinstance(err, (int, float)) or not err > 0:
            return "exactly"
        return f"to 1e{math.ceil(math.log10(err) - 1e-12)}"

    counted = f"matches {entry.get('matched')} of {entry.get('of')} value tests"
    if "max_error_float64" in entry and entry.get("max_error_float64") != entry.get("max_error"):
        evidence = f"{counted}, {bound(entry['max_error_float64'])} in float64"
    else:
        evidence = f"{counted} {bound(entry.get('max_error'))}"
    return Text.assemble((f"likely mistake ({evidence}): ", "bold magenta"), str(entry.get("sentence", "")))


def _where(diag: Diagnosis) -> str:
    d = diag.details
    parts = []
    if d.get("heads"):
        parts.append("wrong heads: " + ", ".join(map(str, d["heads"])))
    if d.get("rows") and diag.kind == "values":
        parts.append("wrong query rows: " + ", ".join(map(str, d["rows"][:12])))
    if d.get("where"):
        parts.append(f"at {d['where']}")
    return "   ".join(parts)


def _table(tests: list[TestResult], width: int) -> Table:
    """One line per test; a failure repeating the first failure's message says so briefly."""
    name_w = min(44, max(20, width // 2))
    why_w = max(10, width - name_w - 18)
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("")
    table.add_column("test")
    table.add_column("score", justify="right")
    table.add_column("why")
    first = next((t for t in tests if t.status not in (Status.PASS, Status.SKIPPED)), None)
    for t in tests:
        mark, color = MARK[t.status]
        if t.status is Status.PASS:
            why = ""
        elif t is not first and first is not None and t.message == first.message:
            why = "same as the first failure"
        else:
            why = t.message or t.status.value
        table.add_row(Text(mark, style=color), Text.assemble((f"{t.group} ", "dim"), _clip(t.name, name_w - len(t.group) - 1)),
                      f"{points(t.score)}/{points(t.max_score)}", Text(_clip(why, why_w), style="dim"))
    return table


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(n - 1, 1)] + "…"


def _summary(result: RunResult) -> Text:
    passed = sum(t.status is Status.PASS for t in result.tests)
    counted = sum(t.status is not Status.SKIPPED for t in result.tests)
    n = result.exercise["number"]
    if result.status is Status.PASS:
        head = ("All tests passed", "bold green")
        step = f"Next: exercise {n + 1} (lumen-ex list), or read the README again for the why."
    elif result.status is Status.ERROR:
        head = ("The grader could not finish", "bold red")
        step = f"{result.message}. Run `lumen-ex doctor`; if it persists, report it with --format json output."
    else:
        head = ("Not yet", "bold yellow")
        step = f"Next: fix the first failure above, then run `lumen-ex check {n}` again (stuck? `lumen-ex hint {n}`)."
    return Text.assemble(head, f" · score {points(result.score)}/{points(result.max_score)}"
                         f" · {passed} of {counted} tests passed · {result.duration:.1f} s\n", step)


# -------------------------------------------------------------------------------------------------
# list, init, hint, doctor


def render_list(con: Console, workspace, rows) -> None:
    table = Table(box=None, header_style="bold")
    for col in ("#", "exercise", "file", "status", "best score"):
        table.add_column(col)
    for r in rows:
        color = {"pass": "green", "fail": "yellow"}.get(r.status, "dim")
        table.add_row(str(r.number), f"{r.title} ({r.slug})", r.path, Text(r.status, style=color),
                      f"{points(r.best_score)}/{points(r.max_score)}")
    con.print(table)
    if workspace is None:
        con.print(Text("No workspace here: create one with `lumen-ex init DIR` to track progress.", style="dim"))
    else:
        con.print(Text(f"workspace: {workspace.root}", style="dim"), soft_wrap=True)


def render_init(con: Console, workspace, directory: Path) -> None:
    # soft_wrap: a path is printed whole, never broken across lines, so it can be copied.
    con.print(Text.assemble(("Created a lumen-ex workspace in ", ""), (str(workspace.root), "bold")),
              soft_wrap=True)
    con.print(f"Next:\n  cd {directory}\n  open 01-attention/README.md, edit 01-attention/attention.py\n"
              "  lumen-ex check 1")


def render_hint(con: Console, hint) -> None:
    title = f"hint {hint.index + 1} of {hint.total} · exercise {hint.exercise.number} ({hint.exercise.slug})"
    con.print(Panel(Text(hint.text), title=title, title_align="left", border_style="cyan"))
    if hint.index + 1 < hint.total:
        con.print(Text(f"Run `lumen-ex hint {hint.exercise.number}` again for the next one.", style="dim"))


def render_doctor(con: Console, report) -> None:
    table = Table(box=None, header_style="bold")
    for col in ("", "area", "what", "status", "to fix"):
        table.add_column(col)
    for f in report.findings:
        table.add_row(Text("✓" if f.ok else "✗", style="green" if f.ok else "yellow"), f.area, f.name,
                      f.detail, Text(f.fix, style="cyan"))
    con.print(table)
    if not report.sandbox_ok:
        con.print(Text("No isolating sandbox: checks will run NOT ISOLATED. Install bubblewrap (see above).",
                       style="bold red"))
