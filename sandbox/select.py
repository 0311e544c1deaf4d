"""Choose a sandbox: ``auto`` prefers docker, then bwrap, then the labelled unisolated mode."""

from __future__ import annotations

from lumen_ex.errors import SandboxUnavailable

from .base import Availability, Launcher
from .bwrap import BwrapLauncher
from .unisolated import UnisolatedLauncher

CHOICES = ("auto", "docker", "bwrap", "none")
HOST_LAUNCHERS: dict[str, type[Launcher]] = {"bwrap": BwrapLauncher, "none": UnisolatedLauncher}


def docker_availability() -> Availability:
    return Availability(False, "the docker backend is not part of this version of lumen-ex",
                        "use --sandbox bwrap")


def select_launcher(name: str) -> tuple[Launcher, str]:
    """The launcher for ``name``, and a warning to show (empty when none is due)."""
    if name == "auto":
        if BwrapLauncher.availability().ok:
            return BwrapLauncher(), ""
        why = BwrapLauncher.availability()
        return UnisolatedLauncher(), (
            f"no sandbox available ({why.reason}): your code runs NOT ISOLATED. "
            f"Install one with: {why.install}")
    if name == "docker":
        avail = docker_availability()
        raise SandboxUnavailable(f"docker sandbox unavailable: {avail.reason}", avail.install)
    cls = HOST_LAUNCHERS.get(name)
    if cls is None:
        raise SandboxUnavailable(f"unknown sandbox {name!r}", f"choose one of {', '.join(CHOICES)}")
    avail = cls.availability()
    if not avail.ok:
        raise SandboxUnavailable(f"{name} sandbox unavailable: {avail.reason}", f"Install it: {avail.install}")
    return cls(), ""
