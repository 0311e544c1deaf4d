"""The choices the commands offer, in one place (literal, so that `--help` imports nothing heavy),
and the few facts every part agrees on: which device ``auto`` means, how a seed reaches a container."""

from __future__ import annotations

import os

from lumen_ex.core.errors import UsageError

SANDBOXES = ("auto", "docker", "bwrap", "none")           # lumen_ex.sandbox.select.CHOICES
DEVICES = ("auto", "cpu", "cuda")                         # resolve_device() below
FORMATS = ("json", "junit", "gradescope", "github", "prairielearn")   # lumen_ex.feedback.formats.NAMES
CHECK_FORMATS = ("rich", *FORMATS)                        # `check` also draws for people

SEED_ENV = "LUMEN_EX_SEED"   # the seed reaches the grader container in its environment, never on a command line


def gpu_present() -> bool:
    """Whether an NVIDIA GPU is visible, without importing torch."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")


def resolve_device(device: str) -> str:
    """``auto`` is cuda when a GPU is visible, else cpu; cpu and cuda stay as they are."""
    return "cuda" if device == "cuda" or (device == "auto" and gpu_present()) else "cpu"


def check_device(device: str) -> str:
    """``device`` when it is one of :data:`DEVICES`, else the one-line error that says what to pass."""
    if device not in DEVICES:
        raise UsageError(f"unknown device {device!r}", "Use --device cpu, cuda or auto")
    return device
