"""The explicitly unisolated mode: the worker is still a separate process, but not sandboxed.

It keeps the learner's code out of the grader's process (so monkeypatching, frame walking and
forged output still cannot change a verdict) and applies the same rlimits and cgroup, a clean
environment and a throwaway folder: the worker's working folder, its HOME and its TMPDIR (so what
the learner's code, or Triton's cache, writes with ``tempfile`` or under ``~`` is removed with the
worker, not left in the host's /tmp). It does not hide the file system or the network: every result
it produces says so.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from lumen_ex.sandbox.base import (
    Availability,
    Command,
    Launcher,
    WorkerSpec,
    inside_dir,
    python_runtime,
    worker_argv,
)

# The throwaway folder's name names the process that made it (the harness), so that what a harness killed
# with SIGKILL leaves is removed by the next grading run or check server (src/lumen_ex/sandbox/leftovers.py).
WORKER_PREFIX = "lumen-ex-worker-"

WARNING = ("NOT ISOLATED: your code ran in a separate process, but with your permissions: "
           "it could read and change your files and use the network.")


class UnisolatedLauncher(Launcher):
    name = "none"
    isolated = False

    @classmethod
    def availability(cls) -> Availability:
        return Availability(True)

    def note(self) -> str:
        return WARNING

    def command(self, spec: WorkerSpec, fds: tuple[int, int]) -> Command:
        runtime = python_runtime()
        scratch = tempfile.mkdtemp(prefix=f"{WORKER_PREFIX}{os.getpid()}-")
        argv = worker_argv(runtime.python, str(inside_dir()), fds, list(runtime.extra_sites), warm=spec.warm)
        return Command(argv, str(spec.module_dir.resolve()), cwd=scratch,
                       cleanup=lambda: shutil.rmtree(scratch, ignore_errors=True),
                       env={"HOME": scratch, "TMPDIR": scratch})
