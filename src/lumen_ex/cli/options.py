"""Options several commands share."""

from __future__ import annotations

from pathlib import Path

import click


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
