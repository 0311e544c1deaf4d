"""``lumen-ex check`` warm when it can be, cold otherwise (src/lumen_ex/learner/check_server.py).

The warm path is tried only where a cold check would grade on this machine's own sandbox (bwrap, or
the labelled unisolated mode): a docker check is a container of its own, with nothing to keep warm.
It is never tried in CI (``$CI`` set: a job's check is its only one) or with LUMEN_EX_CHECK_SERVER=off.
Whatever the warm path cannot do, the cold check does, exactly as before; after a cold check the
server is started for the next one.
"""

from __future__ import annotations

import os
from pathlib import Path

from lumen_ex.core.results import RunResult


def _host_sandbox(sandbox: str) -> tuple[str, str] | None:
    """The host sandbox a cold check would use for ``sandbox`` and the warning it would show, or
    None (docker, or a sandbox that is not there: the cold check says why)."""
    from lumen_ex.core.errors import LumenError
    from lumen_ex.sandbox.base import Launcher
    from lumen_ex.sandbox.select import select_backend

    try:
        backend, note = select_backend(sandbox)
    except LumenError:
        return None
    return (backend.name, note) if isinstance(backend, Launcher) else None


def check_warm_or_cold(exercise: str, *, workspace: Path | None, sandbox: str, seed: int | None,
                       device: str) -> RunResult:
    from lumen_ex.learner import check_server

    use_server = check_server.enabled() and not os.environ.get("CI")
    host = _host_sandbox(sandbox) if use_server else None
    root = None
    if host is not None:
        from lumen_ex.core import catalog
        from lumen_ex.core.errors import LumenError
        from lumen_ex.core.workspace import Workspace

        try:
            root = Workspace.find(workspace).root
            times = catalog.load().find(exercise).times
        except LumenError:
            host = None          # the cold check says what is wrong
        else:
            answer = check_server.warm_check(exercise, workspace=root, sandbox=host[0], note=host[1], device=device,
                                             seed=seed, limit_s=2 * (times.startup_seconds + times.run_seconds) + 30)
            if answer is not None:
                record, warnings = answer
                result = RunResult.from_dict(record)
                result.warnings.extend(warnings)
                return result
    from lumen_ex.harness.check import run_check

    result = run_check(exercise, workspace=workspace, sandbox=sandbox, seed=seed, device=device)
    if host is not None and root is not None:
        check_server.start(root, host[0], device, exercise)
    return result
