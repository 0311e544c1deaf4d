"""Build the grader image: a wheelhouse on the host, then ``docker build --network none``.

    lumen-ex image build [--base IMAGE] [--tag TAG] [--torch SPEC] [--index-url URL]
    lumen-ex image base                  # a local Debian base, for machines without a registry

Steps, each reported to a ``progress(phase, step, total)`` callback (the CLI draws them):

1. **wheel**: lumen-ex is packed into a wheel from the files this Python imports (so the image
   holds exactly the code whose hash names it, whether lumen-ex was installed normally or in
   editable mode);
2. **wheelhouse**: ``pip download`` on the host fetches torch (``--torch``, default: the version
   installed here) and lumen-ex's other dependencies, for Python 3.11 on this platform, and the
   kernel exercises' optional packages installed here (Triton, with ``lumen-ex[triton]``: about
   300 MB more to download and 1 GB more in the image; tag.py ``kernel_packages``);
3. **context**: src/lumen_ex/image/grader.Dockerfile and the wheelhouse, in a temporary folder;
4. **docker build** with no network (pip inside installs only from the wheelhouse), tagged
   ``lumen-ex-grader:<version>-<hash>`` and labelled with the hash, the version and torch's;
5. **smoke test**: the image's own lumen-ex must hash to the label.

The temporary folder (a few hundred MB: torch) is removed afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, cast

from lumen_ex import __version__
from lumen_ex.core.errors import LumenError, SandboxUnavailable, UsageError
from lumen_ex.image import engine as engine_mod
from lumen_ex.image import tag as image

ENTRY_POINTS = (
    "lumen-ex-container = lumen_ex.harness.container_entry:main",          # src/lumen_ex/image/grader.Dockerfile's ENTRYPOINT
    "lumen-ex-platform = lumen_ex.classroom.platforms:main",            # Gradescope / PrairieLearn (docs/classroom.md)
)
TARGET_PYTHON = "3.11"          # the Python of both supported bases; the wheelhouse is made for it
DEBIAN_SUITE = "bookworm"
Progress = Callable[[str, "int | None", "int | None"], None]


class BuildError(LumenError):
    """The image could not be built (exit code 3)."""

    exit_code = 3


@dataclass
class Built:
    ref: str
    tags: list[str]
    torch: str
    content: str


def _quiet(phase: str, step: int | None = None, total: int | None = None) -> None:
    pass


def dockerfile_path() -> Path:
    """grader.Dockerfile: package data of lumen_ex.image, beside this file."""
    return Path(__file__).resolve().parent / "grader.Dockerfile"


def default_torch_spec() -> str:
    """``torch==<the version installed here>``, without a local label such as +cpu."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        raise UsageError("torch is not installed here",
                         "Pass --torch 'torch==2.6.0' (or the version you want)") from None
    return f"torch=={version.split('+')[0]}"


def build(*, base: str = image.DEFAULT_BASE, tag: str | None = None, torch: str | None = None,
          index_url: str | None = None, progress: Progress = _quiet, keep: Path | None = None) -> Built:
    """Build the grader image for this lumen-ex; return its references."""
    eng = engine_mod.engine()
    if not eng.running:
        raise SandboxUnavailable(f"cannot build the grader image: {eng.reason}", engine_mod.INSTALL)
    files = image.package_files()
    kernels = image.kernel_packages()      # Triton, when installed here: the image gets it too (tag.py)
    content = image.content_hash(files, kernels)
    ref = image.default_ref(content)
    tags = [ref] + ([tag] if tag and tag != ref else [])
    work = Path(tempfile.mkdtemp(prefix="lumen-ex-image-")) if keep is None else keep
    try:
        progress("wheel", None, None)
        (work / "wheelhouse" / "lumen").mkdir(parents=True, exist_ok=True)
        write_wheel(work / "wheelhouse" / "lumen", files)
        progress("wheelhouse", None, None)
        deps = work / "wheelhouse" / "deps"
        torch_spec = torch or default_torch_spec()
        kernel_specs = [f"{name}=={version}" for name, version in sorted(kernels.items())]
        download_wheels(deps, [torch_spec, *requirements(), *kernel_specs], index_url=index_url)
        torch_version = _torch_in(deps)
        progress("context", None, None)
        shutil.copyfile(dockerfile_path(), work / "Dockerfile")
        labels = {image.CONTENT_LABEL: content, image.VERSION_LABEL: __version__,
                  image.TORCH_LABEL: torch_version, image.KERNELS_LABEL: " ".join(kernel_specs),
                  "org.lumen-ex.base": base}
        docker_build(work, base=base, tags=tags, labels=labels, progress=progress)
        progress("smoke test", None, None)
        smoke_test(ref, content)
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return Built(ref, tags, torch_version, content)


# -- 1. the lumen-ex wheel --------------------------------------------------------------------------


def write_wheel(dest: Path, files: dict[str, Path] | None = None) -> Path:
    """A pure-Python wheel of the installed lumen-ex: its files, metadata and entry points.

    Deterministic (sorted entries, fixed timestamps), so an unchanged lumen-ex gives the same
    bytes and docker reuses its cached layers.
    """
    files = image.package_files() if files is None else files
    dist = importlib.metadata.distribution("lumen-ex")
    metadata = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    if not metadata:
        raise BuildError("the installed lumen-ex has no metadata", "Reinstall it: pip install -e .")
    info = f"lumen_ex-{__version__}.dist-info"
    entries: dict[str, bytes] = {name: path.read_bytes() for name, path in files.items()}
    entries[f"{info}/METADATA"] = metadata.encode()
    entries[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: lumen-ex image build\n"
                                b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    entries[f"{info}/entry_points.txt"] = _entry_points(dist.read_text("entry_points.txt") or "").encode()
    record = [f"{name},sha256={_b64(hashlib.sha256(data).digest())},{len(data)}"
              for name, data in sorted(entries.items())] + [f"{info}/RECORD,,"]
    entries[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = dest / f"lumen_ex-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in sorted(entries.items()):
            entry = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    return path


def _entry_points(text: str) -> str:
    """The installed entry points, plus the image's entry points when an older install lacks them."""
    for entry in ENTRY_POINTS:
        if entry.split(" = ")[0] not in text:
            if "[console_scripts]" not in text:
                text = "[console_scripts]\n" + text
            text = text.replace("[console_scripts]\n", f"[console_scripts]\n{entry}\n", 1)
    return text


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


# -- 2. the wheelhouse ------------------------------------------------------------------------------


def requirements() -> list[str]:
    """lumen-ex's own dependencies, without extras (torch is given separately), pinned to the
    versions installed here when they are, so the image grades with the same pytest and numpy."""
    specs = []
    for req in importlib.metadata.requires("lumen-ex") or []:
        # a requirement starts with its project's name; a bad one fails here as it always has
        name = cast("re.Match[str]", re.match(r"[A-Za-z0-9_.-]+", req)).group(0)
        if "extra ==" in req or name.lower() == "torch":
            continue
        try:
            specs.append(f"{name}=={importlib.metadata.version(name).split('+')[0]}")
        except importlib.metadata.PackageNotFoundError:
            specs.append(req.split(";")[0].strip())
    return specs


def download_wheels(dest: Path, specs: list[str], *, index_url: str | None = None) -> None:
    """``pip download`` binary wheels for the image's Python into ``dest`` (pip's own config applies)."""
    dest.mkdir(parents=True, exist_ok=True)
    from lumen_ex.core.trusted import TRUSTED_CWD, child_env, python_command

    # isolated (src/lumen_ex/core/trusted.py): `python -m pip` would otherwise import from the current folder
    cmd = python_command("pip", "download", "--disable-pip-version-check", "--only-binary=:all:",
                         "--dest", str(dest.absolute()))
    if f"{sys.version_info.major}.{sys.version_info.minor}" != TARGET_PYTHON:
        cmd += ["--python-version", TARGET_PYTHON]
    if index_url:
        cmd += ["--extra-index-url", index_url]
    specs = [str(Path(s).absolute()) if os.path.exists(s) else s for s in specs]   # a local wheel, from "/"
    proc = subprocess.run([*cmd, *specs], capture_output=True, text=True, cwd=TRUSTED_CWD, env=child_env())
    if proc.returncode != 0:
        last = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or ["pip failed"]
        raise BuildError(f"pip download failed: {last[0][:300]}",
                         "Check the --torch spec and that this machine reaches a package index")
    if not any(p.name.startswith("torch-") for p in dest.glob("*.whl")):
        raise BuildError("pip download fetched no torch wheel", "Pass a --torch spec that names a binary wheel")


def _torch_in(deps: Path) -> str:
    for wheel in deps.glob("torch-*.whl"):
        return wheel.name.split("-")[1]
    return "unknown"


# -- 4. docker build --------------------------------------------------------------------------------

STEP = re.compile(r"^Step (\d+)/(\d+) :|^#\d+ \[[^\]]*?(\d+)/(\d+)\]")


def docker_build(context: Path, *, base: str, tags: list[str], labels: dict[str, str],
                 progress: Progress = _quiet) -> None:
    cmd = [engine_mod.docker_binary() or "docker", "build", "--network", "none", "--force-rm",
           "--build-arg", f"BASE={base}", "-f", str(context / "Dockerfile")]
    for key, value in labels.items():
        cmd += ["--label", f"{key}={value}"]
    for t in tags:
        cmd += ["-t", t]
    cmd.append(str(context))
    env = dict(os.environ, BUILDKIT_PROGRESS="plain")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    log: list[str] = []
    assert proc.stdout is not None      # stdout=PIPE
    for line in proc.stdout:
        line = line.rstrip()
        log.append(line)
        m = STEP.match(line)
        if m:
            step, total = (int(g) for g in (m.group(1, 2) if m.group(1) else m.group(3, 4)))
            progress(f"docker build: {line.split(':', 1)[-1].strip()[:60]}" if m.group(1) else
                     f"docker build: {line[:60]}", step, total)
    if proc.wait() != 0:
        fd, saved = tempfile.mkstemp(prefix="lumen-ex-docker-build-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(log) + "\n")
        tail = log[-30:]
        text = "\n".join(tail)
        if re.search(r"pull access denied|not found: manifest unknown|dial tcp|no such host|"
                     r"failed to resolve|Temporary failure in name resolution|No such image", text):
            raise BuildError(f"docker could not get the base image {base} (no registry reachable?)",
                             "Make a local base first: lumen-ex image base, "
                             f"then: lumen-ex image build --base {image.LOCAL_BASE}")
        last = [line for line in tail if line.strip()][-1:] or ["docker build failed"]
        raise BuildError(f"docker build failed: {last[0][:300]}", f"The whole log is in {saved}")


def smoke_test(ref: str, content: str) -> None:
    """The image's entry point must start, and its lumen-ex must be the one whose hash is in its tag."""
    entry = engine_mod.docker("run", "--rm", "--network", "none", "--pull", "never", ref, "--help", timeout=120)
    if not entry.ok or "lumen-ex-container" not in entry.out:
        raise BuildError(f"the built image's entry point does not start: {entry.reason()}",
                         "Reinstall lumen-ex (pip install -e . in a checkout) and build again")
    answer = engine_mod.docker("run", "--rm", "--network", "none", "--pull", "never", "--entrypoint",
                               "/opt/lumen/venv/bin/python", ref, "-c",
                               "from lumen_ex.image.tag import content_hash; print(content_hash())", timeout=120)
    got = answer.out.strip()
    if not answer.ok or got != content:
        raise BuildError(f"the built image holds other lumen-ex files than this one ({got[:12] or answer.reason()})",
                         "Report this: it is a bug in lumen-ex image build")


# -- a base without a registry ---------------------------------------------------------------------


def build_local_base(tag: str = image.LOCAL_BASE, *, suite: str = DEBIAN_SUITE, mirror: str | None = None,
                     progress: Progress = _quiet) -> str:
    """A minimal Debian with python3 and venv, made by debootstrap and imported into docker."""
    if os.geteuid() != 0:
        raise UsageError("making a base image with debootstrap needs root", "Run: sudo lumen-ex image base")
    if shutil.which("debootstrap") is None:
        raise UsageError("debootstrap is not installed", "Run: sudo apt-get install -y debootstrap")
    eng = engine_mod.engine()
    if not eng.running:
        raise SandboxUnavailable(f"cannot make the base image: {eng.reason}", engine_mod.INSTALL)
    root = Path(tempfile.mkdtemp(prefix="lumen-ex-rootfs-"))
    try:
        progress(f"debootstrap {suite} (about a minute)", None, None)
        cmd = ["debootstrap", "--variant=minbase", "--include=python3,python3-venv", suite, str(root)]
        proc = subprocess.run(cmd + ([mirror] if mirror else []), capture_output=True, text=True)
        if proc.returncode != 0:
            last = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()][-1:] or ["?"]
            raise BuildError(f"debootstrap failed: {last[0][:300]}", "Check that a Debian mirror is reachable")
        progress(f"docker import {tag}", None, None)
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run([engine_mod.docker_binary() or "docker", "import", "-", tag],
                             stdin=tar.stdout, capture_output=True, text=True)
        assert tar.stdout is not None   # stdout=PIPE
        tar.stdout.close()
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise BuildError(f"docker import failed: {imp.stderr.strip()[-300:]}", "Check `docker info`")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return tag
