"""``lumen-ex image``: build the grader image that ``--sandbox docker`` runs (src/lumen_ex/image/build.py)."""

from __future__ import annotations

from pathlib import Path

import click

from lumen_ex.cli.options import exercises_option


@click.group()
def image() -> None:
    """Build and inspect the docker grader image (see docs/docker.md)."""


@image.command()
@exercises_option
@click.option("--base", default=None, metavar="IMAGE",
              help="Base image with Python 3.11 (default: python:3.11-slim, or lumen-base:bookworm "
                   "with --local-base).")
@click.option("--local-base", is_flag=True,
              help="No registry here: make lumen-base:bookworm with debootstrap first (root, about a minute).")
@click.option("--tag", default=None, metavar="TAG", help="An extra tag, e.g. registry.example.edu/course/grader:v1.")
@click.option("--torch", "torch_spec", default=None, metavar="SPEC",
              help="The torch to install, e.g. 'torch==2.6.0' (default: the version installed here).")
@click.option("--index-url", default=None, metavar="URL",
              help="An extra package index, e.g. https://download.pytorch.org/whl/cpu for a CPU-only torch.")
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep the build context (wheelhouse and Dockerfile) in this folder.")
def build(base: str | None, local_base: bool, tag: str | None, torch_spec: str | None, index_url: str | None,
          keep: Path | None) -> None:
    """Build the grader image for this version of lumen-ex (no network inside the build)."""
    from lumen_ex.image import build as image_build
    from lumen_ex.image import tag as image_mod

    with _progress() as report:
        if local_base:
            if base not in (None, image_mod.LOCAL_BASE):
                raise click.UsageError("--local-base builds on lumen-base:bookworm; leave --base out")
            from lumen_ex.image.engine import image_labels

            if image_labels(image_mod.LOCAL_BASE)[0] != "present":
                image_build.build_local_base(progress=report)
            base = image_mod.LOCAL_BASE
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
        built = image_build.build(base=base or image_mod.DEFAULT_BASE, tag=tag, torch=torch_spec,
                                  index_url=index_url, progress=report, keep=keep)
    click.echo(f"Built {', '.join(built.tags)} (torch {built.torch}). "
               "`lumen-ex check N --sandbox docker` uses it now.")


@image.command()
@click.option("--tag", default=None, metavar="TAG", help="Name of the base image (default: lumen-base:bookworm).")
@click.option("--mirror", default=None, metavar="URL", help="The Debian mirror debootstrap uses.")
def base(tag: str | None, mirror: str | None) -> None:
    """Make a minimal Debian base image locally (debootstrap + docker import), for machines without a registry."""
    from lumen_ex.image import build as image_build
    from lumen_ex.image import tag as image_mod

    with _progress() as report:
        made = image_build.build_local_base(tag or image_mod.LOCAL_BASE, mirror=mirror, progress=report)
    click.echo(f"Made {made}. Next: lumen-ex image build --base {made}")


@image.command()
def status() -> None:
    """Say which image this lumen-ex needs and whether docker has it."""
    from lumen_ex.image import tag as image_mod

    state = image_mod.status()
    click.echo(f"{state.ref}: {state.state}" + (f" ({state.reason})" if state.reason else ""))
    if not state.ok and state.state != "no-engine":
        click.echo(f"Build it: {image_mod.build_command()}")


class _progress:
    """A rich progress line for the build phases; docker build steps get a bar."""

    phase: str      # the phase of the current task, set with it

    def __enter__(self):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), transient=False)
        self.bar.__enter__()
        self.task = None
        return self.report

    def report(self, phase: str, step: int | None, total: int | None) -> None:
        if self.task is None or phase.split(":")[0] != self.phase:
            if self.task is not None:
                done = self.bar.tasks[self.task].total or 1
                self.bar.update(self.task, completed=done, total=done)
            self.task = self.bar.add_task(phase, total=total)
            self.phase = phase.split(":")[0]
        self.bar.update(self.task, description=phase, total=total, completed=(step - 1) if step else None)

    def __exit__(self, exc_type, *rest):
        if self.task is not None and exc_type is None:
            total = self.bar.tasks[self.task].total or 1
            self.bar.update(self.task, total=total, completed=total)
        self.bar.__exit__(exc_type, *rest)
        return False
