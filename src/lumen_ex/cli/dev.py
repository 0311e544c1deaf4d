"""``lumen-ex dev``: tools for exercise authors (src/lumen_ex/authoring, docs/authoring.md)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from lumen_ex.cli.options import exercises_option, sandbox_option
from lumen_ex.core.untrusted import one_line


@click.group()
def dev() -> None:
    """Write and validate exercise packs."""


@dev.command("new")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--slug", required=True, help="The exercise's short name: lowercase letters, digits, dashes.")
@click.option("--title", required=True, help="The exercise's title, one line.")
@click.option("--number", type=int, default=None,
              help="Its number (unique across the packs in use): a new pack starts at 101, an existing one "
                   "takes the next after its highest.")
@click.option("--name", default=None, help="The pack's name (default: from DIRECTORY).")
def new(directory: Path, slug: str, title: str, number: int | None, name: str | None) -> None:
    """Create a pack in DIRECTORY with one exercise that `lumen-ex dev check` accepts, or add one to
    the pack already in DIRECTORY. The exercise is a softmax template, whatever its slug: edit its
    README, stub, reference, mistakes, suite and corpus into your own."""
    from lumen_ex.authoring.scaffold import new_pack

    existing = (Path(directory) / "pack.toml").is_file()
    folder = new_pack(directory, slug=slug, title=title, number=number, name=name)
    what = "Added to the pack" if existing else "Created the pack"
    click.echo(one_line(f"{what} {directory}: exercise {folder.name} ({slug}), a softmax template to edit into "
                        f"yours, in {folder}"))
    click.echo(f"Next:\n  lumen-ex dev check {one_line(directory)}\n"
               f"  export LUMEN_EX_PATH={one_line(Path(directory).resolve())}   # then init, list, check, grade see it")


@dev.command("check")
@click.argument("packs", nargs=-1, type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--seeds", default="1,2,3", show_default=True,
              help="Seeds every file is graded under (a list, ranges included: 1-30): the reference and correct "
                   "files must pass, buggy files fail as declared, each with one verdict at every seed.")
@click.option("--close-seeds", default="4,5", show_default=True,
              help="More seeds for the files nearest the tolerance (the reference, correct files that used half a "
                   "tolerance or more, buggy files that fail by a small value difference); '' for none.")
@sandbox_option()
@click.option("--jobs", "-j", type=int, default=2, show_default=True, help="Gradings at once.")
@click.option("--no-grade", is_flag=True, help="Only validate the manifests, files and headers.")
@click.option("--exercise", "-e", "only", multiple=True, help="Only this exercise (number or slug); repeatable.")
@click.option("--format", "fmt", type=click.Choice(("rich", "json")), default="rich", show_default=True)
@exercises_option
@click.pass_context
def check(ctx, packs: tuple[Path, ...], seeds: str, close_seeds: str, sandbox: str, jobs: int, no_grade: bool, only: tuple[str, ...],
          fmt: str) -> None:
    """Validate exercise packs (default: the built-in one): manifests, stub, reference, mistakes, corpus."""
    from lumen_ex.authoring.devcheck import dev_check
    from lumen_ex.authoring.report import render_json
    from lumen_ex.core.errors import UsageError

    seed_list, close_list = _seeds("--seeds", seeds), _seeds("--close-seeds", close_seeds)
    if not seed_list:
        raise UsageError("--seeds names no seed", "For example --seeds 1,2,3")
    progress = None
    if fmt == "rich":   # the batch grader's live progress, as for lumen-ex grade
        from lumen_ex.cli.classroom import GradeProgress
        from lumen_ex.cli.render import console

        progress = GradeProgress(console())
    report = dev_check(list(packs) or None, seeds=seed_list, close_seeds=close_list, sandbox=sandbox, jobs=jobs, grade=not no_grade,
                       progress=progress, only=only)
    if fmt == "json":
        click.echo(render_json(report))
    else:
        render_report(report, debug=bool((ctx.obj or {}).get("debug")))
    ctx.exit(0 if report.ok else 1)


MAX_SEEDS = 1000        # seeds one dev check may grade every file under (each costs a grading per file)


def _seeds(option: str, text: str) -> tuple[int, ...]:
    """``1,2,3`` or ranges ``1-30`` (both ends included), each a seed ``--seed`` would take; the same
    seed named twice counts once."""
    from lumen_ex.core import seeds
    from lumen_ex.core.errors import UsageError

    found: dict[int, None] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        first, sep, last = (t.strip() for t in part.partition("-"))
        ends = [first, last] if sep else [first]
        if not all(t.isascii() and t.isdigit() for t in ends):
            raise UsageError(f"{option} {part[:40]!r} is neither a seed nor a range of seeds",
                             f"For example {option} 1,2,3 or {option} 1-30")
        if any(int(t) > seeds.MAX_SEED for t in ends):
            raise UsageError(f"{option} {part[:40]!r} is out of range", f"Use seeds from 0 to {seeds.MAX_SEED}")
        lo, hi = int(ends[0]), int(ends[-1])
        if hi < lo:
            raise UsageError(f"{option} {part[:40]!r} runs backwards", f"Write the smaller seed first: {option} {hi}-{lo}")
        # only the seeds not named before count (found holds at most MAX_SEEDS, so this is cheap)
        if len(found) + (hi - lo + 1) - sum(lo <= seed <= hi for seed in found) > MAX_SEEDS:
            raise UsageError(f"{option} names more than {MAX_SEEDS} seeds",
                             "Every file is graded once per seed: sweep in parts, for example --seeds 1-500")
        found.update(dict.fromkeys(range(lo, hi + 1)))
    return tuple(found)


def render_report(report, debug: bool = False) -> None:
    """The report for a terminal; with ``debug``, the author's traceback under each fault of an
    exercise's own code."""
    from lumen_ex.cli.render import console

    con = console()
    for pack in report.packs:
        con.print(Text(one_line(f"pack {pack.name} {pack.version} · {pack.root}")), soft_wrap=True)
    for ex in report.exercises:
        counts = ", ".join(f"{what} {outcome}: {n}" for (d, what, outcome), n in sorted(report.verdicts.items())
                           if d == ex.dir)
        con.print(Text(one_line(f"  {ex.number} {ex.slug}: {counts or 'not graded'}")), soft_wrap=True)
    for p in report.problems:
        con.print(Text(one_line(f"✗ {p.where}: {p.what}"), style="red"), soft_wrap=True)
    for (folder, _, _, _), fault in report.faults.items() if debug else ():
        con.print(Text(f"traceback in {one_line(folder)} (innermost last):", style="bold"))
        for frame in fault["frames"]:
            con.print(Text(one_line(f"  {frame}")), soft_wrap=True)
    verdict = "ok" if report.ok else f"{len(report.problems)} problem(s)"
    con.print(Text(f"dev check: {verdict} · {len(report.exercises)} exercise(s), {report.graded} gradings, "
                   f"seeds {', '.join(map(str, report.seeds))}"
                   + (f" (+ {', '.join(map(str, report.close_seeds))} near the tolerance)" if report.close_seeds else ""), style="green" if report.ok else "red"))
