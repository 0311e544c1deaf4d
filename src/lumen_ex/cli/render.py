"""Rich views of the result record and of the other commands' data.

A view reads the record; it decides nothing. The first failing test comes first, explained shape
first, then dtype and device, then values, then the mistake that explains it; then a compact table
of every test, the score and the next step. Colours are off when the output is not a terminal or
NO_COLOR is set (rich honours both).

Text from the record or from a submission is never rich markup: it goes in as ``rich.text.Text``
(so ``[bold]`` is just text) after src/lumen_ex/core/untrusted.py has shown its control characters (so an
escape sequence the learner's code printed is seen, never run by the terminal): ``visible`` for
what the learner's code printed and messages, ``one_line`` for names, table cells and titles.
"""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from lumen_ex.cli.pictures import Heatmap, shape_diagram
from lumen_ex.core.explaining import VALUE_KINDS
from lumen_ex.core.results import Diagnosis, RunResult, Status, TestResult, points
from lumen_ex.core.untrusted import one_line, visible
from lumen_ex.feedback import text_diff
from lumen_ex.feedback.text import KIND_LABEL, expected_got_line, mistake_evidence, where_line

MARK = {Status.PASS: ("✓", "green"), Status.FAIL: ("✗", "red"), Status.ERROR: ("!", "red"),
        Status.TIMEOUT: ("⏱", "red"), Status.SKIPPED: ("-", "dim")}

def console() -> Console:
    width = int(os.environ.get("COLUMNS", "0") or 0) or None
    return Console(highlight=False, soft_wrap=False, width=width)


def screen_lines(con: Console, *, below: int = 0) -> int | None:
    """The lines a check's output may fill on ``con``: the terminal's height less the ``below``
    lines its caller prints after it (watch's footer); None (no limit) when the output is not a
    terminal (a file, a pipe, a CI log keeps every row of a picture)."""
    return con.height - below if con.is_terminal else None


# -------------------------------------------------------------------------------------------------
# check


def render_result(con: Console, result: RunResult, *, watching: bool = False, height: int | None = None) -> None:
    """A check's result: its identity, the table of tests, the first failure, the summary. The
    first failure comes after the table, next to the verdict, the next step and the prompt, so that
    they stay on one screen however long the table; ``height`` (:func:`screen_lines`): that screen's
    lines, one of them left for the prompt, which the failure's picture gives up rows to fit (80 x
    24: tests/e2e/test_failing_goldens.py); None: no limit. ``watching`` (lumen-ex watch): the next
    step is to save again."""
    ex = result.exercise
    sandbox = result.sandbox
    iso = "isolated" if sandbox.isolated else "NOT ISOLATED"
    con.print(Text.assemble(
        (f"lumen-ex check {ex['number']}", "bold"), one_line(f" · {ex['title']} · "),
        (one_line(f"sandbox {sandbox.backend} ({iso})"), "green" if sandbox.isolated else "bold red")))
    # The run's identity on a line of its own: what reproduces it, and which bytes were graded.
    con.print(Text(one_line(" · ".join(filter(None, [
        result.device, f"seed {result.seed}",
        f"{result.source['file']} sha256 {result.source['sha256'][:12]}" if result.source else ""]))), style="dim"))
    if not sandbox.isolated:
        con.print(Panel(Text(visible(sandbox.note or "This run was not isolated."), style="bold"),
                        title="warning", border_style="red"))
    first = result.first_failure
    summary = _summary(result, watching=watching, width=con.width)
    con.print()
    con.print(_table(result.tests, con.width))
    if first is not None:
        con.print()
        # Room on one screen for the panel: less the blank line and the summary below it, and the prompt.
        room = None if height is None else height - 2 - len(con.render_lines(summary, pad=False))
        con.print(_fitted_panel(con, first, result.misconceptions, room))
    else:
        printed = next((t for t in result.tests if t.output.strip()), None)
        if printed is not None:        # on a pass too, but folded: the first test that printed
            con.print()
            con.print(*_printed(printed.output, keep=3), sep="\n")
    con.print()
    con.print(summary)


def early_failure(con: Console):
    """A progress listener (src/lumen_ex/harness/progress.py) for `lumen-ex watch`: the title of the
    first test that fails, printed once while the rest of the check runs (the result then replaces
    it; its first failure is the most explanatory one, which may be another test)."""
    shown = False

    def listen(event: dict) -> None:
        nonlocal shown
        if event.get("first_failed") and not shown:
            shown = True
            con.print(Text.assemble(("✗ failing so far: ", "red"), one_line(str(event["first_failed"])),
                                    (f" ({event.get('done', 0)} of {event.get('total', 0)} tests run; the rest follows)",
                                     "dim")))
    return listen


PICTURE_ROWS = 3     # the fewest rows a picture keeps to fit the failure on one screen


def _fitted_panel(con: Console, test: TestResult, named: list[dict] | None, room: int | None) -> Panel:
    """The first failure in at most ``room`` lines (None: any) where its picture can give them up:
    the picture keeps fewer rows (at least PICTURE_ROWS), around the largest difference, and says
    which; then, if that is not enough, it leaves out its "largest difference" line (the cell is in
    the picture, and a values failure's first line names it too). The words (the diagnosis, the
    mistake, what the code printed) are never cut."""
    panel = _failure_panel(test, named)
    if room is None:
        return panel
    heatmap = test.diagnosis.details.get("heatmap") if test.diagnosis is not None else None
    rows = len(heatmap["expected"]) if isinstance(heatmap, dict) and isinstance(heatmap.get("expected"), list) else 0
    kept = fitted = len(con.render_lines(panel))    # the panel kept's lines, and the last one tried's
    while fitted > room and rows > PICTURE_ROWS:
        rows = max(PICTURE_ROWS, rows - (fitted - room))     # a row is a line (its title may then wrap)
        shorter = _failure_panel(test, named, max_rows=rows)
        fitted = len(con.render_lines(shorter))
        if fitted < kept:
            panel, kept = shorter, fitted
    if kept > room and rows:
        tighter = _failure_panel(test, named, max_rows=rows, worst_line=False)
        if len(con.render_lines(tighter)) < kept:
            panel = tighter
    return panel


def _failure_panel(test: TestResult, named: list[dict] | None = None, *, max_rows: int | None = None,
                   worst_line: bool = True) -> Panel:
    """The first failure; ``named``: the run's named mistakes (RunResult.misconceptions), whose
    most consistent one is shown under it with its evidence across the run; ``max_rows``: the
    picture's rows (None: all); ``worst_line``: whether the picture ends with its largest difference."""
    lines: list = []
    diag = test.diagnosis
    top = named[0] if named else None
    if diag is not None:
        lines += _diagnosis_lines(diag, run_mistake=top, max_rows=max_rows, worst_line=worst_line)
    elif top is not None:
        lines += [Text(visible(test.message or test.status.value)), _run_mistake_line(top)]
    else:
        lines.append(Text(visible(test.message or test.status.value)))
    if test.output.strip():
        lines += [Text(""), *_printed(test.output)]
    mark, color = MARK[test.status]
    name = test.name
    if diag is not None and diag.kind == "import":    # one cause for every test: say so in the title
        name = "your file does not parse" if "does not parse" in diag.summary else "your file did not import"
    title = Text.assemble((f"{mark} first failure: ", color), (one_line(name), "bold"))
    title.overflow = "ellipsis"          # a name too long for the border ends in "…", not mid-word
    return Panel(Group(*lines), title=title, title_align="left", border_style=color)


PRINTED_LINES = 12


def _printed(output: str, keep: int = PRINTED_LINES) -> list[Text]:
    """What the learner's code printed (never the grader's own words), its first ``keep`` lines and
    how many more there were; a CR is shown, never a line break."""
    shown = visible(output.strip()).split("\n")
    out = [Text("your code printed:", style="dim"), Text("\n".join(shown[:keep]), style="dim")]
    if len(shown) > keep:
        out.append(Text(f"... {len(shown) - keep} more lines (all of them: --format json)", style="dim"))
    return out


def _diagnosis_lines(diag: Diagnosis, run_mistake: dict | None = None, max_rows: int | None = None,
                     worst_line: bool = True) -> list:
    label = one_line(KIND_LABEL.get(diag.kind, diag.kind))
    out: list = [Text.assemble((f"{label}: ", "bold yellow"), visible(diag.summary))]
    if diag.kind == "shape" and diag.details.get("expected_axes"):
        out += shape_diagram(diag.expected or [], diag.got or [], diag.details["expected_axes"],
                             diag.details.get("got_axes") or [])
    elif pair := expected_got_line(diag, "   "):
        out.append(Text("  " + pair, style="dim"))         # one line already
    where = where_line(diag)
    if where:
        out.append(Text(one_line(f"  {where}"), style="dim"))
    if isinstance(diag.details.get("code"), str) and diag.details.get("where"):
        out.append(Text(one_line(f"    {diag.details['code']}")))        # the line itself, once
    if isinstance(diag.details.get("heatmap"), dict):
        out.append(Heatmap(diag.details["heatmap"], max_rows, worst_line=worst_line))
    texts = text_diff.comparison(diag.details)
    if texts is not None:
        out += _text_rows(texts)
    if run_mistake is not None and diag.misconception == run_mistake.get("id"):
        out.append(_run_mistake_line(run_mistake))     # the same mistake, with the run's evidence
        return out
    if diag.misconception and diag.kind in VALUE_KINDS:
        # Matched on this test only, not across the run's failing value tests: what was seen, no guess.
        out.append(Text.assemble(("seen on this test: ", "bold magenta"), visible(diag.hint or diag.misconception)))
    elif diag.misconception and diag.kind == "exception":
        out.append(Text.assemble(("try: ", "bold cyan"), visible(diag.hint or diag.misconception)))
    elif diag.misconception:
        out.append(Text.assemble(("likely mistake: ", "bold magenta"), visible(diag.hint or diag.misconception)))
    elif diag.hint:
        out.append(Text.assemble(("try: ", "bold cyan"), visible(diag.hint)))
    if run_mistake is not None:
        out.append(_run_mistake_line(run_mistake))
    return out


def _text_rows(c: text_diff.TextComparison, width: int = 64) -> list[Text]:
    """The two texts one above the other in slices, the first difference in reverse video and a ^ under it."""
    out = [Text(f"  {text_diff.caption(c)}", style="dim"), Text.assemble(("  prompt   ", "dim"), c.prompt)]
    for row in text_diff.rows(c, width):
        for label, part in (("yours    ", row.yours), ("expected ", row.expected)):
            line = Text(f"  {label}")
            if row.marked is None:
                line.append(part)
            else:
                line.append(part[:row.marked])
                line.append(part[row.marked:row.marked + 1] or " ", style="bold reverse red" if label[0] == "y" else "bold reverse green")
                line.append(part[row.marked + 1:])
            out.append(line)
        if row.marked is not None:
            out.append(Text("  " + " " * (9 + row.marked) + "^ first difference", style="bold red"))
    return out


def _run_mistake_line(entry: dict) -> Text:
    """'likely mistake (matches 9 of 9 value tests to 1e-9): ...' from a RunResult.misconceptions entry."""
    return Text.assemble((one_line(f"likely mistake ({mistake_evidence(entry)}): "), "bold magenta"),
                         visible(entry.get("sentence", "")))


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
    same = [t for t in tests if first is not None and t is not first
            and t.status is first.status and t.message == first.message]
    for t in tests:
        if t in same:
            continue                 # folded into one row under the first failure
        mark, color = MARK[t.status]
        if t.status is Status.PASS:
            why = t.message          # empty, or a note the test left (a float64 result's rounding)
        else:
            why = t.message or t.status.value
        group = one_line(t.group)
        table.add_row(Text(mark, style=color), Text.assemble((f"{group} ", "dim"), _clip(t.name, name_w - len(group) - 1)),
                      Text(f"{points(t.score)}/{points(t.max_score)}"), Text(_clip(why, why_w), style="dim"))
        if t is first and same:
            mark, color = MARK[first.status]
            table.add_row(Text(mark, style=color), Text(f"{len(same)} more tests failed for the same reason", style="bold"),
                          Text(f"{points(sum(x.score for x in same))}/{points(sum(x.max_score for x in same))}"),
                          Text(_clip("as the first failure", why_w), style="dim"))
    return table


def _clip(text: str, n: int) -> str:
    """``text`` on one line (untrusted.one_line), cut to ``n`` characters with an ellipsis; a test's
    id at the end (``[4d]``, ``[broadcast]``) is kept whole, so no two rows look the same."""
    text = one_line(text)
    if len(text) <= n:
        return text
    head, sep, tail = text.rpartition(" [")
    if sep and tail.endswith("]") and len(tail) + 3 < n:
        keep = n - len(tail) - 3
        return head[:max(keep, 1)] + "… [" + tail
    return text[: max(n - 1, 1)] + "…"


def _summary(result: RunResult, *, watching: bool = False, width: int = 120) -> Text:
    """The verdict line and the next step, the step's short form where the long one would wrap."""
    passed = sum(t.status is Status.PASS for t in result.tests)
    counted = sum(t.status is not Status.SKIPPED for t in result.tests)
    n = result.exercise["number"]
    if result.status is Status.PASS:
        head = ("All tests passed", "bold green")
        step = (f"Next: exercise {n + 1} (lumen-ex list), or read the README again for the why."
                if _exists(n + 1) else "That was the last exercise: read its README again for the why.")
    elif result.status is Status.ERROR:
        head = ("The grader could not finish", "bold red")
        step = f"{result.message}. Run `lumen-ex doctor`; if it persists, report it with --format json output."
    else:
        head = ("Not yet", "bold yellow")
        again = "save the file to check it again" if watching else f"run `lumen-ex check {n}` again"
        step = f"Next: fix the first failure above, then {again} (stuck? `lumen-ex hint {n}`)."
        if len(step) > width:
            again = "save to check again" if watching else f"`lumen-ex check {n}` again"
            step = f"Next: fix that, then {again} (stuck? `lumen-ex hint {n}`)."
    return Text.assemble(head, f" · score {points(result.score)}/{points(result.max_score)}"
                         f" · {passed} of {counted} tests passed · {result.duration:.1f} s\n", step)


def _exists(number: int) -> bool:
    """Whether the catalogue has exercise ``number`` (the closing line never offers one it has not)."""
    from lumen_ex.core import catalog

    return any(ex.number == number for ex in catalog.load().exercises)


# -------------------------------------------------------------------------------------------------
# list, init, hint, doctor


def render_list(con: Console, workspace, rows) -> None:
    """One row per exercise. The slug (what `lumen-ex check` takes) and the file's path are never
    wrapped or cut; the title wraps. A terminal too narrow for the path (80 columns) leaves it out
    and says where the files are."""
    slug_w = max((len(one_line(r.slug)) for r in rows), default=4)
    path_w = max((len(one_line(r.path)) for r in rows), default=4)
    fixed = 3 + slug_w + len("not checked") + len("best score") + 5 * 2    # columns besides the title
    with_path = con.width >= fixed + path_w + 2 + 24                        # a title keeps 24 columns
    table = Table(box=None, header_style="bold")
    table.add_column("#", no_wrap=True)
    table.add_column("slug", no_wrap=True, min_width=slug_w)
    table.add_column("exercise", ratio=1)
    if with_path:
        table.add_column("file", no_wrap=True, min_width=path_w)
    table.add_column("status", no_wrap=True)
    table.add_column("best score", no_wrap=True)
    for r in rows:
        color = {"pass": "green", "fail": "yellow"}.get(r.status, "dim")
        cells = [Text(str(r.number)), Text(one_line(r.slug), style="bold"), Text(one_line(r.title))]
        if with_path:
            cells.append(Text(one_line(r.path)))
        cells += [Text(one_line(r.status), style=color), Text(f"{points(r.best_score)}/{points(r.max_score)}")]
        table.add_row(*cells)
    con.print(table)
    if not with_path:
        example = one_line(rows[0].path) if rows else ""
        con.print(Text(f"Files: one folder per exercise, e.g. {example}", style="dim"), soft_wrap=True)
    if workspace is None:
        con.print(Text("No workspace here: create one with `lumen-ex init DIR` to track progress.", style="dim"))
    else:
        con.print(Text(one_line(f"workspace: {workspace.root}"), style="dim"), soft_wrap=True)


def render_init(con: Console, workspace, directory: Path, first) -> None:
    """What init made, and the next step: the workspace's first exercise (``first``)."""
    # soft_wrap: a path is printed whole, never broken across lines, so it can be copied.
    con.print(Text.assemble(("Created a lumen-ex workspace in ", ""), (one_line(workspace.root), "bold")),
              soft_wrap=True)
    con.print(Text(f"Next:\n  cd {one_line(directory)}\n  open {one_line(first.dir)}/README.md, edit "
                   f"{one_line(first.path)}\n  lumen-ex check {first.number}"))


def render_hint(con: Console, hint, last: bool = True) -> None:
    title = f"hint {hint.index + 1} of {hint.total} · exercise {hint.exercise.number} ({hint.exercise.slug})"
    body = Text(hint.text)
    if hint.because:
        body = Text.assemble((f"For your last check's first failure ({one_line(hint.because)}):\n", "bold"), body)
    con.print(Panel(body, title=title, title_align="left", border_style="cyan"))
    if last and hint.more:
        con.print(Text(f"Run `lumen-ex hint {hint.exercise.number}` again for the next one.", style="dim"))


def render_doctor(con: Console, report) -> None:
    table = Table(box=None, header_style="bold")
    for col in ("", "area", "what", "status", "to fix"):
        table.add_column(col)
    for f in report.findings:
        table.add_row(Text("✓" if f.ok else "✗", style="green" if f.ok else "yellow"), Text(one_line(f.area)),
                      Text(one_line(f.name)), Text(visible(f.detail)), Text(visible(f.fix), style="cyan"))
    con.print(table)
    if not report.sandbox_ok:
        con.print(Text("No isolating sandbox: checks will run NOT ISOLATED. Install bubblewrap (see above).",
                       style="bold red"))
