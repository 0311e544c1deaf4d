"""``lumen-ex grade``: the command line of src/lumen_ex/classroom/scheduler.py, its progress bar and class report.

Exit codes: 0 every check reached a verdict (whatever the students scored); 3 some check ended in
status error (listed in the report); 2 a usage error (including the refused unisolated mode);
130 interrupted (what was graded is kept; run the same command again to resume).

Names, notes and reasons come from the submissions (a folder's name, an exception's message):
they are printed as ``rich.text.Text``, never markup, after src/lumen_ex/core/untrusted.py has shown
their control characters (``one_line``).

The classroom modules are imported inside the functions that use them, not at the top: every
``lumen-ex`` command imports this module (src/lumen_ex/cli/main.py), and a command that grades no
class (``lumen-ex check``, ``lumen-ex grade --help``) imports none of them (start-up time).
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn
from rich.table import Table
from rich.text import Text

from lumen_ex.cli.cluster import cluster_options, print_status, run_on_slurm, slurm_request
from lumen_ex.cli.options import device_option, exercises_option, sandbox_option, seed_option
from lumen_ex.core.options import FORMATS
from lumen_ex.core.untrusted import clip, one_line

if TYPE_CHECKING:
    from lumen_ex.classroom.batch_types import Finished
    from lumen_ex.core.catalog import Exercise


class RateMeter:
    """Checks per minute over the last :data:`WINDOW` finished checks, and the ETA from that rate:
    it follows the pace as it changes (a slow start, a faster middle) instead of averaging the
    whole run from its start."""

    WINDOW = 8

    def __init__(self, now: float):
        self.marks: deque[tuple[float, int]] = deque([(now, 0)], maxlen=self.WINDOW + 1)

    def add(self, now: float, done: int) -> None:
        self.marks.append((now, done))

    def per_minute(self) -> float:
        (t0, d0), (t1, d1) = self.marks[0], self.marks[-1]
        return 60.0 * (d1 - d0) / max(t1 - t0, 1e-6)

    def eta(self, left: int) -> float | None:
        """Seconds until ``left`` more checks are done at the measured rate (None before any)."""
        rate = self.per_minute()
        return left / rate * 60.0 if rate > 0 else None


def clock(seconds: float | None) -> str:
    return "--:--:--" if seconds is None else time.strftime("%H:%M:%S", time.gmtime(min(seconds, 86399)))


class GradeProgress:
    """done / total, the measured rate and ETA, failures so far and the students being graded now:
    a live bar on a terminal, plain lines otherwise. The notes about the submissions (two entries
    with one name, entries skipped) are printed before grading starts (:meth:`notes`)."""

    def __init__(self, console: Console):
        self.console = console
        self.live = console.is_terminal
        self.started = time.monotonic()
        self.meter = RateMeter(self.started)
        self.bar: Progress | None = None
        self.task: TaskID | None = None     # the bar's task, added with it (begin)
        self.now: dict[tuple[str, str], str] = {}     # (student, exercise) being graded -> label
        self.shown: set[str] = set()

    def notes(self, notes: list[str]) -> None:
        for note in notes:
            if note not in self.shown:
                self.shown.add(note)
                self.console.print(Text(one_line(note), style="dim"))

    def planned(self, regraded: list[tuple[str, str, str]]) -> None:
        """What a rerun regrades and why (a check not graded before is only counted)."""
        forced = [r for r in regraded if r[2] == "--force"]
        if forced:
            self.console.print(Text(f"--force: regrading {len(forced)} checks"))
        for name, exercise, why in regraded:
            if why not in ("--force", "not graded yet"):
                self.console.print(Text(one_line(f"regrading {name} {exercise}: {why}")))

    def begin(self, total: int, resumed: int, students: int, note: str) -> None:
        self.started = time.monotonic()
        self.meter = RateMeter(self.started)
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
                                TextColumn("{task.fields[rate]}"), TextColumn("ETA {task.fields[eta]}"),
                                TextColumn("{task.fields[failures]}"),
                                TextColumn("{task.fields[now]}", markup=False, style="dim"), console=self.console)
            self.task = self.bar.add_task("grading", total=total, rate="", eta=clock(None), failures="", now="")
            self.bar.start()

    def _now_text(self) -> str:
        names = sorted(set(self.now.values()))
        return one_line("now: " + ", ".join(names[:4]) + (" …" if len(names) > 4 else "")) if names else ""

    def started_check(self, student: str, exercise: Exercise) -> None:
        """A grading process began ``student`` x ``exercise``."""
        self.now[(student, exercise.slug)] = f"{student} {exercise.slug}"
        if self.bar is not None:
            assert self.task is not None
            self.bar.update(self.task, now=self._now_text())

    def finished(self, item: Finished) -> None:
        self.now.pop((item.student, item.exercise.slug), None)
        self.meter.add(time.monotonic(), item.done)
        rate, eta = self.meter.per_minute(), clock(self.meter.eta(item.total - item.done))
        failures = item.tally or f"{item.failed} failed, {item.errors} errors"
        r = item.result
        last = one_line(f"{item.student} {item.exercise.slug}: "
                        + (item.verdict or f"{r.status.value} {r.score:g}/{r.max_score:g}"))
        if self.bar is not None:
            assert self.task is not None
            self.bar.update(self.task, completed=item.done, rate=f"{rate:.1f}/min", eta=eta, failures=failures,
                            now=self._now_text())
            return
        now = self._now_text()
        click.echo(f"[{item.done}/{item.total}] {last} ({rate:.1f}/min, ETA {eta}, {failures})"
                   + (f" {now}" if now else ""))

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
            mis.add_row(Text(one_line(m.id)), m.exercise.slug, str(len(m.students)), Text(one_line(clip(m.hint, 90)), style="dim"))
        con.print(mis)
    hard = Table(title="hardest tests", box=None, header_style="bold")
    for col in ("exercise", "test", "passed"):
        hard.add_column(col)
    for ex in report.exercises:
        for r in [r for r in report.rates if r.exercise.slug == ex.slug][:4]:
            hard.add_row(ex.slug, Text(one_line(clip(r.name, 60))), f"{r.passed}/{r.ran}")
    con.print(hard)
    if report.needs_look:
        con.print(Text(f"{len(report.needs_look)} checks could not be graded (status error):", style="bold red"))
        for student, path, why in report.needs_look[:10]:
            con.print(Text(one_line(f"  {student} {path}: {why[:150]}")))
    con.print(Text("\n".join(one_line(line) for line in (f"gradebook: {out / 'gradebook.csv'}", f"report:    {out / 'report.md'}",
                                                          f"results:   {out / 'results'}"))))


def render_status(con: Console, outcome, roster: Path | None, out: Path) -> int:
    """``--status``: one line per student x exercise; 0 when everything is up to date, else 1."""
    table = Table(title=f"status (class seed {outcome.seed})", box=None, header_style="bold")
    for col in ("student", "key", "exercise", "state", "result", "why"):
        table.add_column(col)
    for sub, ex, state in outcome.states:
        table.add_row(Text(one_line(sub.name)), Text(one_line(sub.student)), ex.dir, state.state,
                      _stored_status(out, sub, ex), Text(one_line(state.reason)))
    con.print(table)
    for skipped in outcome.skipped:
        con.print(Text(one_line(f"skipped {skipped.entry}: {skipped.reason}"), style="dim"))
    if roster is not None:
        from lumen_ex.classroom.roster import match_roster

        matched = match_roster(roster, outcome.students)
        for row in matched["students"]:
            if not row["keys"]:
                con.print(Text(one_line(f"missing: {row['name']} (on the roster, nothing submitted)")))
        for key in matched["unmatched"]:
            con.print(Text(one_line(f"not on the roster: {key}")))
    counts: dict[str, int] = {}
    for _, _, state in outcome.states:
        counts[state.state] = counts.get(state.state, 0) + 1
    con.print(", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    return 0 if set(counts) <= {"up to date"} else 1


def _stored_status(out: Path, sub, ex: Exercise) -> str:
    import json

    from lumen_ex.classroom.store import document_path

    try:
        doc = json.loads(document_path(out, sub.student, ex.dir).read_text())
        return f"{doc['status']} {doc['score']:g}/{doc['max_score']:g}"
    except (OSError, ValueError, KeyError, TypeError):
        return "–"


def late_options(command):
    """``--due`` and the late policy's options (src/lumen_ex/classroom/late.py)."""
    opts = [
        click.option("--due", default=None, help="The due time, ISO 8601 (2026-03-01T23:59, local time "
                     "unless an offset is given); kept in --out for reruns."),
        click.option("--late-penalty", type=float, default=0.0, show_default=True,
                     help="With --due: percent of the points lost per day (or hour) late, or part of one."),
        click.option("--late-per", type=click.Choice(("day", "hour")), default="day", show_default=True),
        click.option("--late-cap", type=float, default=100.0, show_default=True,
                     help="With --due: the most percent of the points lateness can cost."),
        click.option("--grace", default="0", show_default=True,
                     help="With --due: lateness forgiven (15m, 2h, 1d; a bare number is minutes)."),
        click.option("--extensions", type=click.Path(dir_okay=False, exists=True), default=None,
                     help="With --due: a CSV of per-student due times (student,due or student,days/hours)."),
    ]
    for opt in reversed(opts):
        command = opt(command)
    return command


def save_late_policy(out: Path, late: dict) -> None:
    """With ``--due``: check the policy and save it in --out (a rerun without --due keeps it)."""
    from lumen_ex.classroom.late import make_policy, save_policy
    from lumen_ex.core.errors import UsageError

    if not late.get("due"):
        return
    try:
        policy = make_policy(late["due"], penalty=late["late_penalty"], per=late["late_per"],
                             cap=late["late_cap"], grace=late["grace"], extensions_csv=late["extensions"])
    except (ValueError, OSError) as exc:
        raise UsageError(f"the late policy is not valid: {exc}",
                         "See `lumen-ex grade --help` (--due, --late-penalty, --grace, --extensions)") from None
    out.mkdir(parents=True, exist_ok=True)
    save_policy(out, policy)


def exercises_of(numbers: tuple[str, ...], all_: bool):
    from lumen_ex.core.catalog import load

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
@exercises_option
@click.argument("submissions", type=click.Path(file_okay=False, path_type=Path))
@click.option("--exercise", "-e", "numbers", multiple=True, help="An exercise to grade (number or slug); repeatable.")
@click.option("--all", "all_", is_flag=True, help="Grade every exercise of the catalogue.")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Where results, gradebook.csv and report.md go (a rerun resumes from it).")
@click.option("--jobs", "-j", type=int, default=2, show_default=True, help="Checks graded at the same time.")
@sandbox_option("docker or bwrap; none (not isolated) is refused unless --unsafe.")
@click.option("--unsafe", is_flag=True, help="Allow the unisolated mode: every submission runs with your permissions.")
@click.option("--force", is_flag=True, help="Regrade checks that already have a result.")
@click.option("--student", "students", multiple=True, help="Only this student (folder or zip name); repeatable.")
@click.option("--format", "formats", type=click.Choice(FORMATS), multiple=True,
              help="Also write this view beside each result document; repeatable.")
@seed_option("One seed for every check of the class (default: the one recorded in OUT/class.json, else a fresh one, recorded).")
@device_option("cpu")
@click.option("--timeout", type=float, default=None,
              help="Seconds one student x exercise may take (default: the exercise's limits + 60 s).")
@click.option("--emit", type=click.Choice(("k8s", "slurm")), default=None,
              help="Write Kubernetes manifests, or Slurm job scripts, to --out instead of grading here "
                   "(docs/classroom.md).")
@click.option("--image", default=None, help="With --emit k8s: the grader image reference in your registry.")
@click.option("--collect", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="Import results written by the cluster job (its results folder), then report.")
@click.option("--status", "status_only", is_flag=True,
              help="Only list what is up to date, stale (and why), missing or failed in --out; grade nothing.")
@click.option("--roster", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="A CSV of the enrolled students: one gradebook row each, `missing` where nothing was submitted.")
@click.option("--storage-class", default=None,
              help="With --emit k8s: the storage class of the shared volume's claim (default: the cluster's).")
@cluster_options
@late_options
@click.pass_context
def grade(ctx, submissions: Path, numbers, all_: bool, out: Path, jobs: int, sandbox: str, unsafe: bool, force: bool,
          students, formats, seed, device: str, timeout, emit, image, collect, storage_class=None,
          status_only: bool = False, roster: Path | None = None, **late) -> None:
    """Grade every submission in SUBMISSIONS (one folder or .zip per student)."""
    from lumen_ex.core.errors import UsageError

    exercises = exercises_of(numbers, all_)
    if not exercises:
        raise UsageError("no exercise chosen", "Pass --exercise N (repeatable) or --all")
    cluster, slurm_opts = slurm_request(late)
    if cluster and (emit == "k8s" or collect is not None):
        raise UsageError("--cluster slurm grades on the cluster: it takes neither --emit k8s nor --collect",
                         "Leave out one of them")
    if emit == "k8s":
        from lumen_ex.classroom.k8s import emit_manifests

        written = emit_manifests(submissions, out, exercises, image=image, parallelism=jobs, device=device,
                                 students=students, timeout=timeout, seed=seed, storage_class=storage_class)
        for path in written:
            click.echo(f"wrote {path}")
        ctx.exit(0)
    from lumen_ex.classroom.batch_types import GradeRequest
    from lumen_ex.classroom.class_run import grade as grade_and_report
    from lumen_ex.cli.render import console

    con = console()
    save_late_policy(out, late)
    req = GradeRequest(submissions=submissions, out=out, exercises=exercises, jobs=jobs, sandbox=sandbox,
                       force=force, unsafe=unsafe, students=tuple(students), seed=seed, device=device,
                       timeout=timeout, formats=tuple(formats), roster=roster)
    if status_only:
        from lumen_ex.classroom.scheduler import class_status

        code = render_status(con, class_status(req), roster, out)
        print_status(con, out)
        ctx.exit(code)
    if cluster == "slurm" or emit == "slurm":
        ctx.exit(run_on_slurm(con, req, slurm_opts, emit=emit == "slurm", render_report=render_report))
    progress = GradeProgress(con)
    graded = grade_and_report(req, progress, collect=collect)
    outcome, report = graded.outcome, graded.report
    for note in outcome.notes:
        if note not in progress.shown:      # the notes shown before grading began
            con.print(Text(one_line(note), style="dim"))
    render_report(con, report, out)
    if outcome.interrupted:
        done = sum(r.status != "pending" for r in report.rows)
        click.echo(f"Interrupted: {done} of {len(report.rows)} students fully graded; results are kept in {out}. "
                   "Run the same command again to resume.", err=True)
        ctx.exit(130)
    ctx.exit(3 if report.needs_look else 0)
