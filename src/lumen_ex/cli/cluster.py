"""``lumen-ex grade --cluster slurm`` and ``--emit slurm``: the options, and what the command prints
while the cluster grades (src/lumen_ex/classroom/slurm.py does the work; docs/classroom.md, "On a
Slurm cluster", is the guide)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.text import Text

from lumen_ex.core.untrusted import one_line

if TYPE_CHECKING:
    from lumen_ex.classroom.batch_types import GradeRequest
    from lumen_ex.classroom.slurm import SlurmOptions, Submitted

# The option names ``grade`` hands to :func:`slurm_request` (popped from its keyword arguments).
PARAMS = ("cluster", "shards", "partition", "account", "shard_time", "cpus_per_task", "mem", "gres",
          "sbatch_options", "no_wait")


def cluster_options(command):
    """The options of ``grade`` that send the class to a Slurm cluster."""
    opts = [
        click.option("--cluster", type=click.Choice(("slurm",)), default=None,
                     help="Grade on this cluster: one job array of shards, then a merge job (docs/classroom.md)."),
        click.option("--shards", type=int, default=None,
                     help="With --cluster slurm: how many array tasks (default: one per 8 students)."),
        click.option("--partition", default=None, help="With --cluster slurm: the partition (sbatch --partition)."),
        click.option("--account", default=None, help="With --cluster slurm: the account (sbatch --account)."),
        click.option("--shard-time", default=None,
                     help="With --cluster slurm: each task's time limit, as sbatch --time takes it (30, 1:30:00)."),
        click.option("--cpus-per-task", type=int, default=None,
                     help="With --cluster slurm: CPUs per task, and the checks a task grades at once (default: --jobs)."),
        click.option("--mem", default=None, help="With --cluster slurm: memory per task (sbatch --mem, e.g. 8G)."),
        click.option("--gres", default=None, help="With --cluster slurm: generic resources per task, e.g. gpu:1."),
        click.option("--sbatch-options", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
                     help="With --cluster slurm: a file of more `#SBATCH ...` lines for both jobs."),
        click.option("--no-wait", is_flag=True, help="With --cluster slurm: submit, print the job ids and return."),
    ]
    for opt in reversed(opts):
        command = opt(command)
    return command


def slurm_request(values: dict) -> tuple[str | None, SlurmOptions]:
    """(--cluster, the Slurm options) from ``grade``'s keyword arguments (popped from ``values``)."""
    from lumen_ex.classroom.slurm import SlurmOptions

    got = {name: values.pop(name, None) for name in PARAMS}
    return got["cluster"], SlurmOptions(shards=got["shards"], partition=got["partition"], account=got["account"],
                                        time_limit=got["shard_time"], cpus_per_task=got["cpus_per_task"],
                                        mem=got["mem"], gres=got["gres"], sbatch_file=got["sbatch_options"],
                                        wait=not got["no_wait"])


def run_on_slurm(con: Console, req: GradeRequest, opts: SlurmOptions, *, emit: bool, render_report) -> int:
    """Plan a round, then write it (``emit``), submit it, or submit and follow it; the exit code."""
    from lumen_ex.classroom import slurm

    sub = slurm.plan_round(req, opts)
    if sub.round_dir is None:
        con.print("every check has a result that is still true: nothing to submit")
        return _finish(con, req, None, render_report)
    con.print(f"{sub.checks} checks of {sub.students} students in {sub.shards} shards: {sub.round_dir}")
    if emit:
        for path in sub.written or []:
            click.echo(f"wrote {path}")
        click.echo(f"Submit it with: bash {sub.round_dir / 'submit.sh'} (on a login node); then run this "
                   "command again without --emit to follow and collect it")
        return 0
    sub = slurm.submit(sub)
    con.print(f"submitted: job array {sub.array} ({sub.shards} tasks), merge job {sub.merge} (after the array)")
    if not opts.wait:
        con.print("`lumen-ex grade ... --status` says how far it is; the merge job writes the gradebook")
        return 0
    slurm.wait(sub, lambda line: con.print(Text(one_line(line), style="dim")))
    return _finish(con, req, sub, render_report)


def _finish(con: Console, req: GradeRequest, sub: Submitted | None, render_report) -> int:
    """Take the results in, write DIR's outputs, show the report; 3 when a check needs a look or has
    no result yet, else 0."""
    from lumen_ex.classroom import slurm

    report, _, notes = slurm.finish(req, sub)
    _notes(con, notes)
    render_report(con, report, req.out)
    return 3 if report.needs_look or notes else 0


def _notes(con: Console, notes: list[str]) -> None:
    for note in notes:
        con.print(Text(one_line(note)))


def print_status(con: Console, out: Path) -> None:
    """``grade --status``: the latest Slurm round's progress, when DIR has one."""
    from lumen_ex.classroom.slurm import status_lines

    _notes(con, status_lines(out))
