"""The ``lumen-ex`` command: each subcommand parses its arguments and calls one library function.

Errors a user can fix are one line plus the next step (exit code 2 for usage, 3 when the grader
cannot run); a traceback appears only with ``--debug``.

The command never imports from the current folder (it is often a student's): as a console script
(entry point ``lumen_ex.cli.entry.run_cli``, src/lumen_ex/cli/entry.py) its ``sys.path`` starts with the venv's ``bin`` folder,
and when ``PYTHONPATH`` or another import-changing variable is set, that entry point starts it again
as ``python -I -m lumen_ex.cli.main`` before click or anything else is imported (:func:`main` does
the same when started by ``python -m``). The Python processes it starts run isolated too
(``python -I``, working folder ``/``, no ``PYTHON*`` variables): src/lumen_ex/core/trusted.py.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from lumen_ex import __version__
from lumen_ex.cli.options import (
    SESSION_SEED_HELP,
    WARM_SANDBOX_HELP,
    device_option,
    exercises_option,
    sandbox_option,
    seed_option,
)
from lumen_ex.core.errors import LumenError
from lumen_ex.core.options import CHECK_FORMATS
from lumen_ex.core.untrusted import visible

workspace_option = click.option("--workspace", "-w", type=click.Path(file_okay=False, path_type=Path),
                                help="The workspace folder (default: found from the current folder).")


class LazyGroup(click.Group):
    """A click group whose larger commands are imported only when one of them runs (or help lists
    them): ``lumen-ex check`` then launches its worker without first importing ``grade``'s progress
    bars and the image builder (about 50 ms of a cold check). ``lazy``: command name -> "module:attribute"."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, attribute = self.lazy[cmd_name].split(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)


LAZY_COMMANDS = {
    "image": "lumen_ex.cli.image:image",        # `lumen-ex image build|base|status`
    "grade": "lumen_ex.cli.classroom:grade",    # `lumen-ex grade` (docs/classroom.md)
    "dev": "lumen_ex.cli.dev:dev",              # `lumen-ex dev new|check` (docs/authoring.md)
}


@click.group(cls=LazyGroup, lazy=LAZY_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lumen-ex")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Exercises for learning how transformers work, graded by hidden tests.

    Start with `lumen-ex init my-work`, edit my-work/01-attention/attention.py,
    then run `lumen-ex check 1` inside my-work.
    """
    ctx.obj = {"debug": debug}


@cli.command("list")
@workspace_option
@click.option("--format", "fmt", type=click.Choice(("rich", "json")), default="rich", show_default=True)
@exercises_option
def list_cmd(workspace: Path | None, fmt: str) -> None:
    """List the exercises (of every pack in use), with your progress."""
    from lumen_ex.learner.progress import list_exercises

    ws, rows = list_exercises(workspace)
    if fmt == "json":
        import json

        from lumen_ex.learner.progress import list_document

        click.echo(json.dumps(list_document(ws, rows), indent=1))
        return
    from lumen_ex.cli.render import console, render_list

    render_list(console(), ws, rows)


@cli.command()
@exercises_option
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--ci", type=click.Choice(("github",)), default=None,
              help="Also write a CI workflow that checks every exercise on each push (docs/classroom.md).")
@click.option("--lumen-ex-spec", "spec", default="",
              help="With --ci: where the workflow installs lumen-ex from (a git URL or a wheel's URL); "
                   "the LUMEN_EX_SPEC variable overrides it.")
def init(directory: Path, ci: str | None, spec: str) -> None:
    """Create a workspace in DIRECTORY with every exercise's stub and README (a course pack can
    choose which: its pack.toml's `workspace`, docs/authoring.md)."""
    from lumen_ex.classroom.ci import check_spec
    from lumen_ex.cli.render import console, render_init
    from lumen_ex.core.catalog import for_workspace, load
    from lumen_ex.core.packs import discover
    from lumen_ex.core.workspace import Workspace

    check_spec(spec)
    chosen = for_workspace(load(), discover())
    workspace = Workspace.create(directory, chosen)
    render_init(console(), workspace, directory, chosen.exercises[0])
    if ci is not None:
        from lumen_ex.classroom.ci import write_ci

        path = write_ci(workspace.root, ci, chosen, spec)
        click.echo(f"CI: {path.relative_to(workspace.root)} checks every exercise on each push "
                   "(set the LUMEN_EX_SPEC variable to where lumen-ex installs from; docs/classroom.md)")


@cli.command()
@exercises_option
@click.argument("exercise")
@workspace_option
@sandbox_option("Where your code runs: docker, bwrap, or none (a separate process, not isolated).")
@click.option("--format", "fmt", type=click.Choice(CHECK_FORMATS), default="rich", show_default=True,
              help="rich for people; json (ours), junit, gradescope, github or prairielearn for machines.")
@seed_option("Seed for the hidden inputs (default: random; shown in the output).")
@device_option()
@click.pass_context
def check(ctx, exercise: str, workspace: Path | None, sandbox: str, fmt: str, seed: int | None, device: str) -> None:
    """Check EXERCISE (its number or slug) against the hidden tests.

    After a first check, the next ones of this workspace are answered by a background server of
    yours that keeps the grader warm (src/lumen_ex/learner/check_server.py): the same check, without
    the two torch imports. LUMEN_EX_CHECK_SERVER=off turns it off."""
    from lumen_ex.cli.warm import check_warm_or_cold

    def view():   # imported while the background server grades (its answer then shows at once)
        if fmt != "rich":
            from lumen_ex.feedback import formats
            return formats
        from lumen_ex.cli import render
        return render

    result = check_warm_or_cold(exercise, workspace=workspace, sandbox=sandbox, seed=seed, device=device,
                                meanwhile=view)
    if fmt != "rich":
        import os

        click.echo(view().emit(fmt, result, os.environ), nl=False)
    else:
        render = view()
        con = render.console()
        render.render_result(con, result, height=render.screen_lines(con))
    for warning in result.warnings:
        click.echo(f"warning: {visible(warning)}", err=True)
    ctx.exit(result.exit_code())


@cli.command()
@exercises_option
@click.argument("exercise")
@workspace_option
@sandbox_option(WARM_SANDBOX_HELP)
@seed_option(SESSION_SEED_HELP)
@device_option()
@click.option("--poll", is_flag=True, help="Look at the file every 0.1 s instead of using file events.")
@click.pass_context
def watch(ctx, exercise: str, workspace: Path | None, sandbox: str, seed: int | None, device: str, poll: bool) -> None:
    """Check EXERCISE again every time you save it (Ctrl-C to stop)."""
    from lumen_ex.cli.render import console, early_failure, render_result, screen_lines
    from lumen_ex.harness.progress import Progress
    from lumen_ex.learner.watch import WatchSession, serve

    con = console()
    con.print("lumen-ex watch: starting (the first check imports torch)...", style="dim")
    progress = Progress()

    def show(result, session) -> None:
        progress.reset(None)
        if con.is_terminal:
            con.clear()
        render_result(con, result, watching=True, height=screen_lines(con, below=1))    # below: the footer
        con.print(session.footer, style="dim")
        sys.stdout.flush()

    def on_change(change) -> None:
        progress.reset(early_failure(con))   # the first failing test, shown while the rest runs

    try:
        session = WatchSession(exercise, workspace=workspace, sandbox=sandbox, seed=seed, device=device, poll=poll,
                               plugins=(progress,))
    except KeyboardInterrupt:   # Ctrl-C while starting: the session has cleaned up after itself
        ctx.exit(0)
    progress.reset(early_failure(con))
    ctx.exit(serve(session, show, on_change))


@cli.command()
@exercises_option
@workspace_option
@click.option("--port", type=click.IntRange(0, 65535), default=8420, show_default=True,
              help="The port (0: any free one; a busy default moves on to the next few).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on: only this machine unless you change it (then a warning).")
@click.option("--no-browser", is_flag=True, help="Print the URL without opening a browser.")
@sandbox_option(WARM_SANDBOX_HELP)
@seed_option(SESSION_SEED_HELP)
@device_option()
@click.pass_context
def serve(ctx, workspace: Path | None, port: int, host: str, no_browser: bool, sandbox: str, seed: int | None,
          device: str) -> None:
    """The web playground: an editor and the hidden tests in your browser (Ctrl+Enter checks)."""
    from lumen_ex.playground.server import serve as run_server

    def say(line: str) -> None:
        click.echo(visible(line))
        sys.stdout.flush()

    ctx.exit(run_server(workspace=workspace, host=host, port=port, open_browser=not no_browser, sandbox=sandbox,
                        seed=seed, device=device, say=say))


@cli.command()
@exercises_option
@click.argument("exercise")
@workspace_option
@click.option("--all", "show_all", is_flag=True, help="Show the hints you have seen so far (reveals no new one).")
def hint(exercise: str, workspace: Path | None, show_all: bool) -> None:
    """Show the next hint for EXERCISE (one more each time you ask)."""
    from lumen_ex.cli.render import console, render_hint
    from lumen_ex.learner.progress import next_hint, seen_hints

    con = console()
    if not show_all:
        render_hint(con, next_hint(exercise, workspace))
        return
    hints = seen_hints(exercise, workspace)
    if not hints:
        click.echo(f"No hints seen yet for exercise {exercise}: run `lumen-ex hint {exercise}` for the first.")
    for h in hints:
        render_hint(con, h, last=h is hints[-1])


@cli.command()
@click.option("--format", "fmt", type=click.Choice(("rich", "json")), default="rich", show_default=True)
def doctor(fmt: str) -> None:
    """Show which sandboxes, devices and versions are available, and what to install."""
    from lumen_ex.learner.doctor import diagnose

    report = diagnose()
    if fmt == "json":
        import json

        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        from lumen_ex.cli.render import console, render_doctor

        render_doctor(console(), report)


def _never_fail_to_encode() -> None:
    """Make stdout and stderr write what they cannot encode as an escape (``\\ud800``) instead
    of raising: a second line of defence behind src/lumen_ex/core/untrusted.py, so that no string a
    submission produced can crash a view."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):       # a stream that cannot be reconfigured is left as it is
                pass


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning known errors into one line and an exit code.

    Started from the command line with an import-changing variable set (``PYTHONPATH`` ...) or by
    ``python -m`` (the current folder on ``sys.path``), it first starts itself again as
    ``python -I`` (src/lumen_ex/core/trusted.py): a learner's ``json.py`` in the current folder must never
    be imported by the grader."""
    if argv is None:
        from lumen_ex.core.trusted import reexec_isolated

        reexec_isolated("lumen_ex.cli.main", sys.argv[1:])
    args = sys.argv[1:] if argv is None else argv
    if argv is None:                # a process of its own (not a test calling main): exit quickly
        from lumen_ex.core.trusted import quick_exit

        quick_exit()
    _never_fail_to_encode()
    debug = "--debug" in args
    try:
        code = cli.main(args=args, prog_name="lumen-ex", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except LumenError as exc:
        if debug:
            traceback.print_exc()
        click.echo(visible(f"Error: {exc}"), err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001  the last resort: never a bare traceback for users
        if debug:
            traceback.print_exc()
        click.echo(visible(f"Error: lumen-ex failed unexpectedly: {type(exc).__name__}: {exc}. "
                           "Run again with --debug for the traceback, and please report it."), err=True)
        sys.exit(3)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
