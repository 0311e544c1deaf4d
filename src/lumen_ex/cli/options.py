"""Options several commands share."""

from __future__ import annotations

from pathlib import Path

import click

from lumen_ex.core.options import DEVICES, SANDBOXES


def _add_packs(ctx, param, value):
    if value:
        from lumen_ex.core.packs import add_to_path

        add_to_path(value)
    return value


# --exercises DIR: an exercise pack to use besides the built-in one (repeatable). It goes in front of
# LUMEN_EX_PATH for this command and every lumen-ex process it starts (src/lumen_ex/core/packs.py).
exercises_option = click.option(
    "--exercises", "extra_packs", multiple=True, expose_value=False, is_eager=True, callback=_add_packs,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="An exercise pack folder to use too (repeatable; also LUMEN_EX_PATH). docs/authoring.md")


def sandbox_option(help: str | None = None):
    """--sandbox: where the learner's code runs (src/lumen_ex/core/options.py SANDBOXES), auto by default."""
    return click.option("--sandbox", type=click.Choice(SANDBOXES), default="auto", show_default=True, help=help)


def seed_option(help: str):
    """--seed: the seed of the hidden inputs (default: None, which the command turns into its own)."""
    return click.option("--seed", type=int, default=None, help=help)


def device_option(default: str = "auto"):
    """--device: where the tensors go (src/lumen_ex/core/options.py DEVICES)."""
    return click.option("--device", type=click.Choice(DEVICES), default=default, show_default=True)


# watch and serve: auto is the learner's own sandbox; docker keeps one container for the session
WARM_SANDBOX_HELP = ("Where your code runs: bwrap, none (not isolated), or docker (workers forked in one container "
                     "kept for the session); auto is bwrap.")
SESSION_SEED_HELP = "Seed for the hidden inputs (default: one random seed for the session)."
