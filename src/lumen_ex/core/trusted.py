"""How lumen-ex starts its own (trusted) Python processes: isolated from the folder and environment.

A Python started as ``python -m module`` puts the current folder first on ``sys.path``, and every
``PYTHON*`` variable (``PYTHONPATH``, ``PYTHONSTARTUP``, ``PYTHONWARNINGS``, ...) can make it import
or run code from elsewhere. ``lumen-ex grade`` is often run from inside a student's folder, so a
student's ``json.py``, ``sitecustomize.py`` or ``torch.py`` there would have run, unsandboxed and
with the instructor's permissions, in every grading process. So every Python process lumen-ex
starts for itself is started by :func:`python_command` / :func:`child_env` / :data:`TRUSTED_CWD`:

- ``python -I``: no current or script folder on ``sys.path``, no ``PYTHON*`` variable read, no user
  site-packages (an editable install still works: its finder lies in the venv's site-packages);
- in a fixed working folder, ``/``;
- with the ``PYTHON*`` and ``PYTEST_*`` variables taken out of its environment, so that nothing it
  starts in turn inherits them.

These processes are: the grading processes of ``lumen-ex grade`` (src/lumen_ex/classroom/grading_processes.py), the
sandboxed workers (src/lumen_ex/sandbox/base.py ``worker_argv``, also ``-I``), and, inside the grader image, its
entry points ``lumen-ex-container`` and ``lumen-ex-platform`` (src/lumen_ex/image/grader.Dockerfile rewrites their first
line to ``python -IB``).

The ``lumen-ex`` command itself (check, watch, grade, ...) is a console script whose entry point is
``run_cli`` (src/lumen_ex/cli/entry.py), which imports nothing but ``os`` and ``sys``: Python puts the
script's own folder (the venv's ``bin``), not the current folder, on ``sys.path``, and when the
command was started with a variable from :data:`IMPORT_VARIABLES` set, :func:`reexec_isolated`
starts it again at once as ``python -I -m lumen_ex.cli.main``, before click, rich, json, torch or
pytest are imported (``python -m lumen_ex.cli.main`` started by hand does the same, from
``lumen_ex.cli.main.main``). What Python runs before any lumen-ex code cannot be undone from inside:
a ``sitecustomize`` (or a ``lumen_ex`` package) on the caller's own ``PYTHONPATH``. That variable is
the caller's own setting (no program can protect a Python from the one who starts it), and it never
reaches the processes lumen-ex starts.
"""

from __future__ import annotations

import os
import sys

TRUSTED_CWD = "/"
# Variables that make a Python import or run code from somewhere else (ignored under -I).
IMPORT_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONPLATLIBDIR",
                    "PYTHONWARNINGS", "PYTHONBREAKPOINT", "PYTHONINSPECT", "PYTHONPYCACHEPREFIX",
                    "PYTHONEXECUTABLE", "PYTHONSAFEPATH")
# Variables a trusted child never inherits: every PYTHON* one, and pytest's own (plugins, options).
_DROPPED_PREFIXES = ("PYTHON", "PYTEST_")


def python_command(module: str, *args: str) -> list[str]:
    """``python -I -m module args...`` with this interpreter."""
    return [sys.executable, "-I", "-m", module, *args]


def child_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a trusted child: ``base`` (default: ours) without PYTHON*/PYTEST_*."""
    source = os.environ if base is None else base
    return {k: v for k, v in source.items() if not k.startswith(_DROPPED_PREFIXES)}


def exposed() -> list[str]:
    """Why this process could import from the current folder or the environment (empty: it cannot)."""
    if sys.flags.isolated:
        return []
    why = [name for name in IMPORT_VARIABLES if os.environ.get(name)]
    first = sys.path[0] if sys.path else None
    if not sys.flags.safe_path and first is not None and (first == "" or _same_dir(first, os.getcwd())):
        why.append("the current folder on sys.path")
    return why


def reexec_isolated(module: str, args: list[str]) -> None:
    """Replace this process by ``python -I -m module args`` when :func:`exposed` finds a reason."""
    if exposed():
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, python_command(module, *args))


def quick_exit() -> None:
    """Spare this process the garbage collector's last walk over every object at its exit: torch
    alone makes some hundreds of thousands, and that walk costs about 0.2 s of CPU on a 2-core
    machine, in every `lumen-ex check`, grading process and server that imported it.

    ``gc.freeze()`` is registered as an atexit callback: called at a process's start, it runs after
    every callback registered later (atexit runs the last registered first). The exit is otherwise
    unchanged: every atexit callback runs, the standard streams are flushed, the modules are torn
    down; only objects kept alive by a reference cycle are left to the operating system, as when a
    process is killed (tests/unit/test_quick_exit.py)."""
    import atexit
    import gc

    atexit.register(gc.freeze)


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
