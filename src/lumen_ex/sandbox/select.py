"""Choose a sandbox backend, once and the same way for every command: ``auto`` prefers docker, then
bwrap, then the labelled unisolated mode. A grading process gets its backend by name
(:func:`from_spec`), already chosen by the scheduler."""

from __future__ import annotations

from lumen_ex.core.errors import SandboxUnavailable
from lumen_ex.core.results import join_notes
from lumen_ex.image import engine as engine_mod
from lumen_ex.sandbox import docker
from lumen_ex.sandbox.base import Backend, Launcher
from lumen_ex.sandbox.bwrap import BwrapLauncher
from lumen_ex.sandbox.docker_slot import DockerSlotLauncher
from lumen_ex.sandbox.unisolated import UnisolatedLauncher
from lumen_ex.sandbox.zygote import ZygoteLauncher, supported

CHOICES = ("auto", "docker", "bwrap", "none")
HOST_LAUNCHERS: dict[str, type[Launcher]] = {"bwrap": BwrapLauncher, "none": UnisolatedLauncher}


def best_host_launcher(note: str = "") -> tuple[Launcher, str]:
    """bwrap when it works here, else the unisolated mode with a warning that says how to install a
    sandbox; ``note`` (why docker was not used, say) goes first in the warning."""
    why = BwrapLauncher.availability()
    if why.ok:
        return BwrapLauncher(), note
    return UnisolatedLauncher(), join_notes(note, f"no sandbox available ({why.reason}): your code runs NOT ISOLATED. "
                                                  f"To get one: {why.install}")


def select_backend(name: str) -> tuple[Backend, str]:
    """The backend for ``name``, and a warning to show (empty when none is due).

    For docker this is a :class:`docker.DockerSandbox`, which runs the whole check in a container;
    every other backend is a :class:`Launcher` of workers for the harness here.
    """
    if name == "auto":
        note = ""
        if engine_mod.docker_binary() is not None:
            avail, state = docker.probe()
            if avail.ok:
                return docker.DockerSandbox(state.ref), ""
            if state.state != "no-engine":   # an engine without the current image: say so
                note = f"docker not used: {avail.reason} ({avail.install})."
        return best_host_launcher(note)
    if name == "docker":
        return docker.select_docker(), ""
    cls = HOST_LAUNCHERS.get(name)
    if cls is None:
        raise SandboxUnavailable(f"unknown sandbox {name!r}", f"choose one of {', '.join(CHOICES)}")
    cls.availability().require(name)
    return cls(), ""




def from_spec(spec: str) -> Backend:
    """The backend a grading process was told to use (:meth:`Backend.spec`: ``bwrap``, ``none`` or
    ``docker:<image>``), without choosing again: the scheduler already chose and checked it."""
    if spec.startswith(docker.SPEC_PREFIX):
        return docker.DockerSandbox(spec[len(docker.SPEC_PREFIX):])
    return HOST_LAUNCHERS[spec]()


def replacing(launcher: Launcher) -> Launcher | None:
    """Where a check that starts its workers one by one (a cold ``lumen-ex check``: a learner's CI, or
    the check server's first check) replaces a worker that died, hung or broke the protocol: under
    bwrap, a zygote of the check's own, started at the first such failure, so that each later
    replacement is a fork instead of a torch import. None for any other launcher: a zygote launcher
    forks already, and the other backends start every worker as they always do."""
    return ZygoteLauncher(launcher) if type(launcher) is BwrapLauncher else None


def forking(backend: Backend) -> Backend:
    """The backend with workers forked from a warm zygote where it has one: bwrap's from a zygote
    of this process's own (src/lumen_ex/sandbox/zygote.py); docker's from the zygote of one
    container of this process's own, its slot (src/lumen_ex/sandbox/docker_slot.py), the harness
    staying here; any other backend as it is. A grading process uses it for its batch, and the
    learner's loop (watch, the check server, the playground) for its checks: a fresh worker for
    every check, at the cost of a fork instead of a torch import."""
    if isinstance(backend, BwrapLauncher):
        return ZygoteLauncher(backend)
    if isinstance(backend, docker.DockerSandbox) and supported():
        return DockerSlotLauncher(backend.image)
    return backend
