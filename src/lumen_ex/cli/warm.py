"""``lumen-ex check`` warm when it can be, cold otherwise (src/lumen_ex/learner/check_server.py).

The warm path is tried where a cold check would grade on this machine's own sandbox (bwrap, or the
labelled unisolated mode), and under docker where its workers can be forked in a container kept by
the server (its slot: src/lumen_ex/sandbox/docker_slot.py), the harness then in the server as in
``lumen-ex grade``.
It is never tried in CI (``$CI`` set: a job's check is its only one) or with LUMEN_EX_CHECK_SERVER=off.
Whatever the warm path cannot do, the cold check does, exactly as before; after a cold check the
server is started for the next one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from lumen_ex.core.results import RunResult


def _chosen(sandbox: str):
    """The backend a cold check would use for ``sandbox`` and the warning it would show, chosen once
    for both paths; None when it cannot be chosen (the cold check then says why)."""
    from lumen_ex.core.errors import LumenError
    from lumen_ex.sandbox.select import select_backend

    try:
        return select_backend(sandbox)
    except LumenError:
        return None


def check_warm_or_cold(exercise: str, *, workspace: Path | None, sandbox: str, seed: int | None,
                       device: str, meanwhile: Callable[[], object] | None = None) -> RunResult:
    """The check's result, from the server when it can answer, else graded here. ``meanwhile`` runs
    while a server grades (the command's own imports, so that its answer shows at once)."""
    if sandbox in ("auto", "bwrap"):    # bwrap's probe, in the background while the imports below run
        from lumen_ex.sandbox.bwrap import probe_soon

        probe_soon()
    from lumen_ex.learner import check_server
    from lumen_ex.sandbox.base import Launcher
    from lumen_ex.sandbox.select import forking

    chosen = _chosen(sandbox) if check_server.enabled() and not os.environ.get("CI") else None
    root = None
    # A host sandbox, or docker where its workers can be forked in a slot: a server can keep it warm.
    if chosen is not None and isinstance(forking(chosen[0]), Launcher):
        from lumen_ex.core import catalog
        from lumen_ex.core.errors import LumenError
        from lumen_ex.core.workspace import Workspace

        backend, note = chosen
        try:
            root = Workspace.find(workspace).root
            times = catalog.load().find(exercise).times
        except LumenError:
            root = None          # the cold check says what is wrong
        else:
            answer = check_server.warm_check(exercise, workspace=root, sandbox=backend.name, note=note, device=device,
                                             seed=seed, limit_s=2 * (times.startup_seconds + times.run_seconds) + 30,
                                             meanwhile=meanwhile)
            if answer is not None:
                record, warnings = answer
                result = RunResult.from_dict(record)
                result.warnings.extend(warnings)
                return result
    from lumen_ex.harness.check import run_check

    if chosen is None:
        result = run_check(exercise, workspace=workspace, sandbox=sandbox, seed=seed, device=device)
    else:
        result = run_check(exercise, workspace=workspace, launcher=chosen[0], note=chosen[1], seed=seed, device=device)
    if root is not None and chosen is not None:     # root is only found for a chosen host sandbox
        check_server.start(root, chosen[0].name, device, exercise)
    return result
