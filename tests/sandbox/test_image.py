"""The grader image: what goes into it, how it is named, and (with an engine) what came out.

Without docker: the lumen-ex wheel holds exactly the files whose hash names the image, the
wheelhouse is asked for the right things, src/lumen_ex/image/grader.Dockerfile keeps its contract, and the image's
entry point always writes a result document the host accepts. With docker and the image: the
image's lumen-ex hashes to its label, and its permissions hide what the worker must not read.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path

import pytest
from docker_support import DOCKER_OK, DOCKER_WHY

from lumen_ex import __version__
from lumen_ex.core import catalog
from lumen_ex.core.results import Status
from lumen_ex.harness.container_entry import run as container_run
from lumen_ex.image import build as image_build
from lumen_ex.image import engine
from lumen_ex.image import tag as image
from lumen_ex.sandbox.result_document import read_document

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "src/lumen_ex/image/grader.Dockerfile"


def test_wheel_holds_exactly_the_hashed_files(tmp_path):
    files = image.package_files()
    wheel = image_build.write_wheel(tmp_path, files)
    assert wheel.name == f"lumen_ex-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = f"lumen_ex-{__version__}.dist-info"
        assert names - set(files) == {f"{info}/{n}" for n in ("METADATA", "WHEEL", "RECORD", "entry_points.txt")}
        for name, path in files.items():
            assert zf.read(name) == path.read_bytes(), name
        # RECORD: every entry's hash and size are right, so pip installs it without complaint.
        for line in zf.read(f"{info}/RECORD").decode().splitlines():
            name, digest, size = line.rsplit(",", 2)
            if name.endswith("RECORD"):
                continue
            data = zf.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data), name
        assert "lumen-ex-container = lumen_ex.harness.container_entry:main" in zf.read(f"{info}/entry_points.txt").decode()
        assert "lumen-ex-platform = lumen_ex.classroom.platforms:main" in zf.read(f"{info}/entry_points.txt").decode()
        assert "Name: lumen-ex" in zf.read(f"{info}/METADATA").decode()


def test_wheel_is_deterministic(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert image_build.write_wheel(tmp_path / "a").read_bytes() == image_build.write_wheel(tmp_path / "b").read_bytes()


def test_hash_covers_what_the_container_runs():
    files = image.package_files()
    for needed in ("lumen_ex/harness/check.py", "lumen_ex/harness/container_entry.py", "lumen_ex/sandbox/inside/worker.py",
                   "lumen_ex/sandbox/inside/wire.py", "lumen_ex/sandbox/container.py", "lumen_ex/exercises/pack.toml",
                   "lumen_ex/graders/pytest.ini", "lumen_ex/exercises/01-attention/reference.py",
                   "lumen_ex/exercises/01-attention/suite/test_attention.py"):
        assert needed in files, needed
    assert image.default_ref().startswith(f"{image.REPOSITORY}:{__version__}-")


def test_the_kernel_packages_installed_here_name_the_image(monkeypatch):
    """With Triton installed here, the image gets it (build.py asks the wheelhouse for it) and an
    image without it has another tag: exercise 14 is never sent to an image that cannot grade it."""
    files = image.package_files()
    with_triton, without = image.content_hash(files, {"triton": "3.9.0"}), image.content_hash(files, {})
    assert with_triton != without and with_triton != image.content_hash(files, {"triton": "3.9.1"})
    assert image.content_hash(files) == image.content_hash(files, image.kernel_packages())
    monkeypatch.setattr("importlib.metadata.version", lambda name: "3.9.0+local" if name == "triton" else "1")
    assert image.kernel_packages() == {"triton": "3.9.0"}

    def absent(name):
        raise __import__("importlib.metadata").metadata.PackageNotFoundError(name)
    monkeypatch.setattr("importlib.metadata.version", absent)
    assert image.kernel_packages() == {}


def test_wheelhouse_requests(monkeypatch):
    reqs = image_build.requirements()
    names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in reqs}
    assert {"click", "rich", "pytest", "numpy"} <= names and "torch" not in names and "jsonschema" not in names
    assert all("==" in r for r in reqs), reqs                       # pinned to what is installed here
    monkeypatch.setattr("importlib.metadata.version", lambda name: "2.13.0+cpu")
    assert image_build.default_torch_spec() == "torch==2.13.0"


def test_dockerfile_contract():
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG BASE=python:3\.11-slim$", text, re.M)
    assert "--no-index" in text and "pip install" in text and "-e " not in text
    assert "lumen-worker:x:61001:61001" in text
    assert 'chmod -R go-rwx "$site/lumen_ex"' in text
    assert "worker.py" in text and "wire.py" in text and "chmod 0700 /results" in text
    assert 'ENTRYPOINT ["/opt/lumen/venv/bin/lumen-ex-container"]' in text
    assert image_build.dockerfile_path() == DOCKERFILE


def test_entry_point_always_writes_a_document(tmp_path):
    """Even when the check cannot run (here: no such workspace, and no worker user on this host),
    the entry point writes a status-error document that the host's validation accepts."""
    results = tmp_path / "results"
    results.mkdir()
    code = container_run(["1", "--seed", "5", "--device", "cpu", "--workspace", str(tmp_path / "nothing"),
                          "--results", str(results)])
    assert code == 0
    result = read_document(results / "result.json", exercise=catalog.load().find(1).summary(), seed=5)
    assert result.status is Status.ERROR and result.exit_code() == 3
    assert result.message and result.tests[0].diagnosis.kind == "grader"
    assert [p.name for p in results.iterdir()] == ["result.json"]      # no temporary file left


def test_build_without_an_engine_says_so(monkeypatch):
    monkeypatch.setattr(engine, "engine", lambda: engine.Engine(False, "the docker engine is not reachable: x"))
    with pytest.raises(Exception, match="cannot build the grader image") as info:
        image_build.build()
    assert info.value.exit_code == 3


# -------------------------------------------------------------------------------------------------
# The built image (needs the engine and the current image)


@pytest.mark.docker
@pytest.mark.skipif(not DOCKER_OK, reason=DOCKER_WHY)
def test_built_image_is_this_lumen_ex():
    state = image.status()
    assert state.ok
    assert state.labels[image.CONTENT_LABEL] == image.content_hash()
    assert state.labels[image.VERSION_LABEL] == __version__
    assert state.labels[image.KERNELS_LABEL] == " ".join(f"{n}=={v}" for n, v in sorted(image.kernel_packages().items()))
    image_build.smoke_test(state.ref, state.content)


PERMISSIONS = r'''
import os, pwd, stat, sys, glob
site = [p for p in sys.path if p.endswith("site-packages")][0]
w = pwd.getpwnam("lumen-worker")
def readable(path):   # by the worker's uid, from the modes alone (root runs this)
    st = os.stat(path)
    bits = stat.S_IROTH if os.path.isfile(path) else stat.S_IXOTH
    return bool(st.st_mode & bits) and st.st_uid != w.pw_uid
print(w.pw_uid, os.stat("/results").st_mode & 0o777,
      readable(site + "/lumen_ex/sandbox/inside/worker.py"), readable(site + "/lumen_ex/sandbox/inside/wire.py"),
      readable(site + "/lumen_ex/graders"), readable(site + "/lumen_ex/exercises"),
      readable(site + "/lumen_ex/harness/client.py"), readable(glob.glob(site + "/lumen_ex-*.dist-info")[0]))
'''


@pytest.mark.docker
@pytest.mark.skipif(not DOCKER_OK, reason=DOCKER_WHY)
def test_image_permissions():
    ref = image.status().ref
    answer = engine.docker("run", "--rm", "--network", "none", "--pull", "never", "--entrypoint",
                           "/opt/lumen/venv/bin/python", ref, "-c", PERMISSIONS, timeout=120)
    assert answer.ok, answer.err
    uid, results_mode, worker, wire, graders, reference, client, record = answer.out.split()
    assert uid == "61001" and results_mode == str(0o700)
    assert (worker, wire) == ("True", "True")
    assert (graders, reference, client, record) == ("False", "False", "False", "False")
