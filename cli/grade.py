"""``lumen-ex grade``: the command line of lumen_ex/grade.py, its progress bar and class report.

Exit codes: 0 every check reached a verdict (whatever the students scored); 3 some check ended in
status error (listed in the report); 2 a usage error (including the refused unisolated mode);
130 interrupted (what was graded is kept; run the same command again to resume).

Names, notes and reasons come from the submissions (a folder's name, an exception's message):
they are printed as ``rich.text.Text``, never markup, after lumen_ex/untrusted.py has shown
their control characters (``one_line``).
"""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from lumen_ex.untrusted import one_line

from .choices import DEVICES, FORMATS, SANDBOXES



class GradeProgress:
    """done / total, rate, ETA and failures so far: a live bar on a terminal, plain lines otherwise."""

    def __init__(self, console: Console):
        self.console = console
        self.live = console.is_terminal
        self.started = time.monotonic()
        self.bar: Progress | None = None
        self.task = None

    def begin(self, total: int, resumed: int, students: int, note: str) -> None:
        self.started = time.monotonic()
        self.total = total
        if resumed:
            self.console.print(Text(f"resuming: {resumed} checks already graded are kept (--force regrades them)"))
        if note:
            self.console.print(Text(one_line(note), style="yellow"))
        if not total:
            self.console.print("nothing left to grade")
            return
        self.console.print(f"grading {total} checks of {students} students")
        if self.live:
            self.bar = Progress(SpinnerColumn(), TextColumn("[bold]grading"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[rate]}"), TextColumn("ETA"), TimeRemainingColumn(),
                                TextColumn("{task.fields[failures]}"), TextColumn("{task.fields[last]}", markup=False, style="dim"),
                                console=self.console)
            self.task = self.bar.add_task("grading", total=total, rate="", failures="", last="")
            self.bar.start()

    def _rate(self, done: int) -> float:
        return 60.0 * done / max(time.monotonic() - self.started, 1e-6)

    def finished(self, item) -> None:
        rate = self._rate(item.done)
        failures = f"{item.failed} failed, {item.errors} errors"
        r = item.result
        last = one_line(f"{item.student} {item.exercise.slug}: {r.status.value} {r.score:g}/{r.max_score:g}")
        if self.bar is not None:
            self.bar.update(self.task, completed=item.done, rate=f"{rate:.1f}/min", failures=failures, last=last)
            return
        left = (item.total - item.done) / rate * 60 if rate > 0 else 0.0
        eta = time.strftime("%H:%M:%S", time.gmtime(left))
        click.echo(f"[{item.done}/{item.total}] {last} ({rate:.1f}/min, ETA {eta}, {failures})")

    def end(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def render_report(con: Console, report, out: Path) -> None:
    table = Table(title="scores", box=None, header_style="bold")
    for col in ("exercise", "graded", "mean", "median", "pass", "fail", "error", "pending"):
        table.add_column(col, justify="left" if col == "exercise" else "right")
    for s in report.exercise_stats():
        ex = s["exercise"]
        fmt = (lambda x: "–" if x is None else f"{x:.2f}")
        table.add_row(f"{ex.number} {ex.slug} (of {ex.max_score:g})", str(s["graded"]), fmt(s["mean"]),
                      fmt(s["median"]), str(s["pass"]), str(s["fail"]), Text(str(s["error"]), style="red" if s["error"] else ""),
                      str(s["pending"]))
    con.print(table)
    dist = Table(title="totals", box=None, header_style="bold")
    dist.add_column("band")
    dist.add_column("students", justify="right")
    dist.add_column("")
    for band, count in report.distribution():
        dist.add_row(band, str(count), Text("█" * count, style="cyan"))
    con.print(dist)
    if report.misconceptions:
        mis = Table(title="most frequent misconceptions", box=None, header_style="bold")
        for col in ("misconception", "exercise", "students", "what it means"):
            mis.add_column(col)
        for m in report.misconceptions[:8]:
            mis.add_row(Text(one_line(m.id)), m.exercise.slug, str(len(m.students)), Text(one_line(m.hint[:90]), style="dim"))
        con.print(mis)
    hard = Table(title="hardest tests", box=None, header_style="bold")
    for col in ("exercise", "test", "passed"):
        hard.add_column(col)
    for ex in report.exercises:
        for r in [r for r in report.rates if r.exercise.slug == ex.slug][:4]:
            hard.add_row(ex.slug, Text(one_line(r.name[:60])), f"{r.passed}/{r.ran}")
    con.print(hard)
    if report.needs_look:
        con.print(Text(f"{len(report.needs_look)} checks could not be graded (status error):", style="bold red"))
        for student, path, why in report.needs_look[:10]:
            con.print(Text(one_line(f"  {student} {path}: {why[:150]}")))
    con.print(Text("\n".join(one_line(line) for line in (f"gradebook: {out / 'gradebook.csv'}", f"report:    {out / 'report.md'}",
                                                          f"results:   {out / 'results'}"))))


def exercises_of(numbers: tuple[str, ...], all_: bool):
    from lumen_ex.catalog import load

    cat = load()
    if all_:
        return list(cat.exercises)
    seen, out = set(), []
    for n in numbers:
        ex = cat.find(n)
        if ex.slug not in seen:
            seen.add(ex.slug)
            out.append(ex)
    return out


@click.command()
@click.argument("submissions", type=click.Path(file_okay=False, path_type=Path))
@click.option("--exercise", "-e", "numbers", multiple=True, help="An exercise to grade (number or slug); repeatable.")
@click.option("--all", "all_", is_flag=True, help="Grade every exercise of the catalogue.")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Where results, gradebook.csv and report.md go (a rerun resumes from it).")
@click.option("--jobs", "-j", type=int, default=2, show_default=True, help="Checks graded at the same time.")
@click.option("--sandbox", type=click.Choice(SANDBOXES), default="auto", show_default=True,
              help="docker or bwrap; none (not isolated) is refused unless --unsafe.")
@click.option("--unsafe", is_flag=True, help="Allow the unisolated mode: every submission runs with your permissions.")
@click.option("--force", is_flag=True, help="Regrade checks that already have a result.")
@click.option("--student", "students", multiple=True, help="Only this student (folder or zip name); repeatable.")
@click.option("--format", "formats", type=click.Choice(FORMATS), multiple=True,
              help="Also write this view beside each result document; repeatable.")
@click.option("--seed", type=int, default=None, help="One seed for every check (default: a fresh one per check).")
@click.option("--device", type=click.Choice(DEVICES), default="cpu", show_default=True)
@click.option("--timeout", type=float, default=None,
              help="Seconds one student x exercise may take (default: the exercise's limits + 60 s).")
@click.option("--emit", type=click.Choice(("k8s",)), default=None,
              help="Write Kubernetes manifests to --out instead of grading here (docs/classroom.md).")
@click.option("--image", default=None, help="With --emit k8s: the grader image reference in your registry.")
@click.option("--collect", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="Import results written by the cluster job (its results folder), then report.")
@click.pass_context
def grade(ctx, submissions: Path, numbers, all_: bool, out: Path, jobs: int, sandbox: str, unsafe: bool, force: bool,
          students, formats, seed, device: str, timeout, emit, image, collect) -> None:
    """Grade every submission in SUBMISSIONS (one folder or .zip per student)."""
    from lumen_ex.errors import UsageError

    exercises = exercises_of(numbers, all_)
    if not exercises:
        raise UsageError("no exercise chosen", "Pass --exercise N (repeatable) or --all")
    if emit == "k8s":
        from lumen_ex.k8s import emit_manifests

        written = emit_manifests(submissions, out, exercises, image=image, parallelism=jobs, device=device,
                                 students=students, timeout=timeout, seed=seed)
        for path in written:
            click.echo(f"wrote {path}")
        ctx.exit(0)
    from lumen_ex.grade import GradeRequest, grade_class
    from lumen_ex.gradebook import write_outputs

    from .render import console

    con = console()
    req = GradeRequest(submissions=submissions, out=out, exercises=exercises, jobs=jobs, sandbox=sandbox,
                       force=force, unsafe=unsafe, students=tuple(students), seed=seed, device=device,
                       timeout=timeout, formats=tuple(formats))
    if collect is not None:
        from lumen_ex.k8s import collect_results

        outcome = collect_results(req, collect)
    else:
        outcome = grade_class(req, GradeProgress(con))
    for note in outcome.notes:
        con.print(Text(one_line(note), style="dim"))
    report = write_outputs(out, [s.student for s in outcome.students], exercises, submissions.name, tuple(formats))
    render_report(con, report, out)
    if outcome.interrupted:
        done = sum(r.status != "pending" for r in report.rows)
        click.echo(f"Interrupted: {done} of {len(report.rows)} students fully graded; results are kept in {out}. "
                   "Run the same command again to resume.", err=True)
        ctx.exit(130)
    ctx.exit(3 if report.needs_look else 0)
