"""The ``lumen-ex`` console script's entry point: isolate this process if needed, then run the command.

It imports nothing but ``os`` and ``sys`` (through lumen_ex.core.trusted) before it has re-executed
itself isolated, so that nothing in the current folder or the environment runs first.
"""

from __future__ import annotations

import sys

from lumen_ex.core.trusted import reexec_isolated


def run_cli() -> None:
    """The ``lumen-ex`` console script: isolate this process if needed, then run the command."""
    reexec_isolated("lumen_ex.cli.main", sys.argv[1:])
    from lumen_ex.cli.main import main

    main()
