"""Helpers for the docker tests: the skip marker (with the reason) and container bookkeeping.

Docker tests need a running engine and the grader image of exactly this lumen-ex
(`lumen-ex image build`); without them they skip, and the reason is printed (pytest -ra).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lumen_ex.image import engine
from lumen_ex.sandbox import docker as docker_backend


def _probe() -> tuple[bool, str]:
    avail, _ = docker_backend.probe()
    return avail.ok, f"docker sandbox unavailable: {avail.reason} ({avail.install})"


DOCKER_OK, DOCKER_WHY = _probe()
requires_docker = [pytest.mark.docker, pytest.mark.skipif(not DOCKER_OK, reason=DOCKER_WHY)]


def needs_docker(test):
    """Mark a test as a docker test that skips (with the reason) when docker cannot run here."""
    for mark in requires_docker:
        test = mark(test)
    return test


def docker_param(value="docker"):
    """A pytest.param for the docker backend that skips (with the reason) when docker cannot run."""
    return pytest.param(value, marks=requires_docker, id=str(value))


def slot_launcher():
    """A docker grading slot (src/lumen_ex/sandbox/docker_slot.py) on this lumen-ex's grader image, as one
    `lumen-ex grade --sandbox docker` process keeps one: each worker is forked, fresh, from its
    zygote. The caller closes it (Launcher.close stops the slot's container)."""
    from lumen_ex.sandbox.docker_slot import DockerSlotLauncher

    return DockerSlotLauncher(docker_backend.probe()[1].ref)


def containers(**filters: str) -> list[str]:
    """Names of every container, running or not, matching docker ps filters (volume=PATH, name=...)."""
    args = ["ps", "-a", "--format", "{{.Names}}"]
    for key, value in filters.items():
        args += ["--filter", f"{key}={value}"]
    answer = engine.docker(*args, timeout=30)
    assert answer.ok, answer.err
    return [line for line in answer.out.split() if line]


def containers_of_workspace(workspace: Path) -> list[str]:
    return containers(volume=str(Path(workspace).resolve()))


def summary(result) -> list[tuple[str, str, float]]:
    """What must be identical across backends: each test's id, status and score."""
    return [(t.id, t.status.value, round(t.score, 4)) for t in result.tests]
