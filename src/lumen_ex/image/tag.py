"""Which grader image this lumen-ex needs, and whether the docker engine has it.

The image is tagged ``lumen-ex-grader:<version>-<hash>``, where the hash covers every file of the
installed lumen-ex package (hidden suites, reference, harness, worker, sandbox, catalogue), read
from the files this Python would import. Edit a hidden test and the tag changes, so an image built
before the edit is never used silently: ``--sandbox docker`` stops with the command that rebuilds
it, and ``--sandbox auto`` falls back to bwrap with a note. The same hash is stored in the image as
the label ``org.lumen-ex.content``, which is what is compared when LUMEN_EX_IMAGE names an image
by another tag (a course registry, say).

Building the image lives in src/lumen_ex/image/build.py; this module only answers questions, quickly.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from dataclasses import dataclass, field
from pathlib import Path

from lumen_ex import __version__
from lumen_ex.core.catalog import KERNEL_LANGUAGES
from lumen_ex.core.packs import Pack, extra_packs

REPOSITORY = "lumen-ex-grader"
IMAGE_ENV = "LUMEN_EX_IMAGE"                # use this image reference instead of the default tag
CONTENT_LABEL = "org.lumen-ex.content"
VERSION_LABEL = "org.lumen-ex.version"
TORCH_LABEL = "org.lumen-ex.torch"
KERNELS_LABEL = "org.lumen-ex.kernel-packages"   # "triton==3.9.0", or "" (kernel_packages())
LOCAL_BASE = "lumen-base:bookworm"         # what `lumen-ex image base` makes
DEFAULT_BASE = "python:3.11-slim"
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def package_files() -> dict[str, Path]:
    """Every file of the installed lumen-ex package, keyed by its path in a wheel ("lumen_ex/..."),
    and of every exercise pack in use besides the built-in one (``pack_files``).

    The package is one folder (a src layout), for a normal install and an editable one alike, so
    the image holds exactly the tree Python imports: no list of subpackages to keep. The packs are
    part of the content hash: an image built without a pack (or with an older copy) has another tag.
    """
    root = Path(__file__).resolve().parents[1]
    files: dict[str, Path] = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__"
                         and not d.endswith(".egg-info"))
        rel = Path(folder).relative_to(root)
        for name in names:
            if name.startswith(".") or name.endswith(SKIPPED_SUFFIXES):
                continue
            files[str(Path("lumen_ex") / rel / name)] = Path(folder) / name
    for pack in extra_packs():
        files.update(pack_files(pack))
    return dict(sorted(files.items()))


def pack_files(pack: Pack) -> dict[str, Path]:
    """An instructor's pack (LUMEN_EX_PATH, --exercises) as it goes into the image: under
    lumen_ex/packs/<name>/, where the image's lumen-ex finds it (core/packs.py) and where, like the
    rest of the package, the learner's uid cannot read it (grader.Dockerfile)."""
    files = {}
    for path in sorted(pack.root.rglob("*")):
        rel = path.relative_to(pack.root)
        if path.is_file() and not any(part.startswith(".") or part == "__pycache__" for part in rel.parts) \
                and not path.name.endswith(SKIPPED_SUFFIXES):
            files[str(Path("lumen_ex") / "packs" / pack.name / rel)] = path
    return files


def kernel_packages() -> dict[str, str]:
    """The optional packages of kernel exercises installed here, name -> version (``{"triton":
    "3.9.0"}`` after ``pip install 'lumen-ex[triton]'``; {} without). The image gets the same ones
    (build.py), and they are part of its content hash: with Triton installed here, an image built
    without it has another tag, so exercise 14 is never sent to an image that cannot grade it."""
    found = {}
    for name in KERNEL_LANGUAGES:
        try:
            found[name] = importlib.metadata.version(name).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def content_hash(files: dict[str, Path] | None = None, kernels: dict[str, str] | None = None) -> str:
    """SHA-256 over the package's file names and contents and the kernel packages (hex)."""
    digest = hashlib.sha256()
    for name, path in (files if files is not None else package_files()).items():
        digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    for name, version in sorted((kernel_packages() if kernels is None else kernels).items()):
        digest.update(f"kernel-package {name}=={version}".encode() + b"\0")
    return digest.hexdigest()


def image_tag(content: str | None = None) -> str:
    """``<version>-<first 12 hex digits of the content hash>``."""
    return f"{__version__}-{(content or content_hash())[:12]}"


def default_ref(content: str | None = None) -> str:
    return f"{REPOSITORY}:{image_tag(content)}"


def build_command() -> str:
    """The one command that builds the image this lumen-ex needs, on this machine."""
    from lumen_ex.image.engine import image_labels

    if image_labels(DEFAULT_BASE)[0] != "present" and image_labels(LOCAL_BASE)[0] == "present":
        return f"lumen-ex image build --base {LOCAL_BASE}"
    return "lumen-ex image build"


@dataclass
class ImageStatus:
    ref: str
    state: str                  # "current", "stale", "missing", "no-engine"
    reason: str = ""
    content: str = ""           # the hash this lumen-ex needs
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.state == "current"


def status() -> ImageStatus:
    """Is the grader image for this exact lumen-ex present (and not stale)?"""
    from lumen_ex.image.engine import image_labels

    content = content_hash()
    ref = os.environ.get(IMAGE_ENV, "").strip() or default_ref(content)
    state, labels = image_labels(ref)
    if state == "no-engine":
        why = labels.get("reason", "no answer")
        return ImageStatus(ref, "no-engine", f"the docker engine is not reachable: {why}", content)
    if state == "missing":
        return ImageStatus(ref, "missing", f"the grader image {ref} is not built", content)
    if labels.get(CONTENT_LABEL) != content:
        built = labels.get(CONTENT_LABEL, "unknown")[:12]
        return ImageStatus(ref, "stale", f"the grader image {ref} holds other lumen-ex files "
                           f"(built from {built}, this lumen-ex is {content[:12]})", content, labels)
    return ImageStatus(ref, "current", "", content, labels)
