"""``lumen-ex doctor``: which sandboxes, devices and versions are here, and what to install."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from pathlib import Path

from lumen_ex import __version__
from lumen_ex.core.limits import Limits
from lumen_ex.core.options import gpu_present
from lumen_ex.image import engine
from lumen_ex.image import tag as image
from lumen_ex.sandbox import docker
from lumen_ex.sandbox.bwrap import BwrapLauncher
from lumen_ex.sandbox.cgroups import Enforcement


@dataclass
class Finding:
    area: str            # "versions", "sandbox", "device", "limits"
    name: str
    ok: bool
    detail: str
    fix: str = ""


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    @property
    def sandbox_ok(self) -> bool:
        return any(f.ok for f in self.findings if f.area == "sandbox" and f.name != "none")

    def to_dict(self) -> dict:
        return {"findings": [vars(f) for f in self.findings], "isolated_sandbox": self.sandbox_ok}


def diagnose() -> Report:
    import torch

    report = Report()
    add = report.findings.append
    add(Finding("versions", "lumen-ex", True, __version__))
    add(Finding("versions", "python", True, platform.python_version()))
    cuda_build = torch.version.cuda or "none (CPU build)"
    add(Finding("versions", "torch", True, f"{torch.__version__} (CUDA: {cuda_build})"))

    bw = BwrapLauncher.availability()
    add(Finding("sandbox", "bwrap", bw.ok, "available" if bw.ok else bw.reason, "" if bw.ok else bw.install))
    dk, state = docker.probe()      # the engine and the image, looked at once for both findings
    add(Finding("sandbox", "docker", dk.ok, "available" if dk.ok else dk.reason, "" if dk.ok else dk.install))
    add(Finding("sandbox", "none", True, "always available, NOT isolated: a separate process with your permissions"))
    report.findings += docker_findings(dk, state)

    enforcement = Enforcement.prepare(Limits())
    try:
        for what, how in enforcement.describe().items():
            held = not how.startswith("none")
            add(Finding("limits", what, held, how,
                        "" if held else "run as root, or delegate a cgroup to your user, to enforce it"))
    finally:
        enforcement.cleanup()

    gpu = gpu_present()
    cuda = torch.cuda.is_available()
    if cuda:
        add(Finding("device", "cuda", True, torch.cuda.get_device_name(0)))
    elif gpu:
        add(Finding("device", "cuda", False, "an NVIDIA GPU is present but this torch cannot use it",
                    "install a CUDA build of torch: https://pytorch.org/get-started/locally/"))
    else:
        add(Finding("device", "cuda", False, "no GPU: checks run on the CPU (GPU tests are skipped, worth 0 points)"))
    add(Finding("device", "cpu", True, f"{platform.machine()}"))
    add(playground_finding())
    return report


def playground_finding() -> Finding:
    """Whether the page of ``lumen-ex serve`` was built (src/lumen_ex/playground/static, from frontend/)."""
    static = Path(__file__).resolve().parents[1] / "playground" / "static"
    if all((static / name).is_file() for name in ("app.js", "app.css")):
        return Finding("playground", "page", True, "built: lumen-ex serve works")
    return Finding("playground", "page", False, "not built (no Node.js when lumen-ex was installed)",
                   "install Node.js 20 and npm, then run ./install.sh again")


def docker_findings(avail, state) -> list[Finding]:
    """The docker backend in detail (``avail, state`` from lumen_ex.sandbox.docker.probe): the
    engine, the grader image, and GPUs for containers."""
    eng = engine.engine()
    if not eng.running:
        return [Finding("docker", "engine", False, eng.reason, engine.INSTALL)]
    found = [Finding("docker", "engine", True, f"running (server {eng.version})")]
    if state.ok:
        torch = state.labels.get(image.TORCH_LABEL, "?")
        found.append(Finding("docker", "image", True, f"{state.ref} is current (torch {torch})"))
    else:
        found.append(Finding("docker", "image", False, state.reason, avail.install))
    if eng.nvidia:
        found.append(Finding("docker", "gpus", True, "NVIDIA container toolkit present: --device cuda passes --gpus all"))
    elif gpu_present():
        found.append(Finding("docker", "gpus", False, "an NVIDIA GPU is here, but docker cannot pass it to "
                             "containers (no NVIDIA container toolkit): --device cuda fails under docker",
                             docker.GPU_INSTALL))
    else:
        found.append(Finding("docker", "gpus", False, "no GPU: docker checks run on the CPU"))
    return found
