"""Questions to the docker engine, asked through the ``docker`` command line (so contexts,
DOCKER_HOST and rootless setups work as they do for the user).

Every call has a timeout and returns plain data; nothing here raises for an engine that is missing
or stopped: callers turn the answers into one-line errors with the next step.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field

INSTALL = "Install docker (Debian/Ubuntu: sudo apt-get install -y docker.io) and start it"


@dataclass
class Answer:
    ok: bool
    out: str = ""
    err: str = ""

    def reason(self) -> str:
        """The last line of docker's complaint, for a one-line error."""
        lines = [line for line in self.err.strip().splitlines() if line.strip()]
        last = lines[-1] if lines else "no answer"
        return last.removeprefix("Error: ").removeprefix("Error response from daemon: ")


def docker_binary() -> str | None:
    return shutil.which("docker")


def docker(*args: str, timeout: float = 20.0) -> Answer:
    """Run ``docker ARGS`` and capture its output (never raises)."""
    binary = docker_binary()
    if binary is None:
        return Answer(False, err="the docker command is not installed")
    try:
        proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Answer(False, err=f"`docker {args[0]}` did not answer within {timeout:g} s")
    except OSError as exc:
        return Answer(False, err=str(exc))
    return Answer(proc.returncode == 0, proc.stdout, proc.stderr)


def engine_down(answer: Answer) -> bool:
    """Whether a failed answer means the engine is not reachable (rather than, say, a missing image)."""
    text = answer.err.lower()
    return (not answer.ok) and any(s in text for s in (
        "cannot connect to the docker daemon", "is the docker daemon running", "permission denied",
        "not installed", "did not answer", "error during connect", "no such file or directory"))


@dataclass
class Engine:
    running: bool
    reason: str = ""                      # why not, when not running
    version: str = ""
    runtimes: list[str] = field(default_factory=list)

    @property
    def nvidia(self) -> bool:
        """Whether `--gpus` can work: the NVIDIA container toolkit is registered or installed."""
        return "nvidia" in self.runtimes or shutil.which("nvidia-container-runtime-hook") is not None


def engine() -> Engine:
    if docker_binary() is None:
        return Engine(False, "the docker command is not installed")
    answer = docker("info", "--format", "{{json .ServerVersion}}|{{json .Runtimes}}", timeout=15)
    if not answer.ok or not answer.out.strip():
        return Engine(False, f"the docker engine is not reachable: {answer.reason()}")
    version_json, _, runtimes_json = answer.out.strip().partition("|")
    try:
        version = json.loads(version_json) or ""
        runtimes = sorted(json.loads(runtimes_json) or {})
    except ValueError:
        version, runtimes = "", []
    if not version:
        return Engine(False, f"the docker engine is not reachable: {answer.reason()}")
    return Engine(True, "", str(version), [str(r) for r in runtimes])


def image_labels(ref: str) -> tuple[str, dict[str, str]]:
    """("present", labels), ("missing", {}) or ("no-engine", {"reason": ...}) for an image reference."""
    answer = docker("image", "inspect", "--format", "{{json .Config.Labels}}", ref, timeout=15)
    if answer.ok:
        try:
            labels = json.loads(answer.out.strip() or "null") or {}
        except ValueError:
            labels = {}
        return "present", {str(k): str(v) for k, v in labels.items()}
    if engine_down(answer):
        return "no-engine", {"reason": answer.reason()}
    return "missing", {}
