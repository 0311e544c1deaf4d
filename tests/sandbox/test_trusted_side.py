"""No learner module is ever imported by a trusted lumen-ex process (src/lumen_ex/core/trusted.py).

A learner can leave files named like modules that trusted processes import lazily (``json.py``,
``zipfile.py``, ``tomllib.py`` ...), Python's start-up hooks (``sitecustomize.py``,
``usercustomize.py``), the grader's own dependencies (``torch.py``, ``numpy.py``, ``click.py``,
``rich.py``, pytest's ``pluggy.py`` / ``iniconfig.py`` / ``_pytest/``) and even a ``lumen_ex/``
package. They are planted in the learner's exercise folder, the workspace (or the student's
submission folder), and the folder the command is started from; some runs also point
``PYTHONPATH`` and ``PYTHONSTARTUP`` at them. The real entry points then run: ``lumen-ex check 1``
(bwrap and docker), ``lumen-ex watch 1`` (one check, then Ctrl-C), ``lumen-ex grade`` started from
inside a student's folder (bwrap and docker), and the grader image's Gradescope entry point.

A planted module that is imported writes a marker file named after itself, its pid and whether
its interpreter was isolated, into a folder given by absolute path, and then ends its process
(``os._exit(97)``), so an import is seen either way: as a marker, or as a grade that is not the
normal one. The sandboxed worker cannot leave a marker there (it sees the host's folders read-only
and has its own /tmp), and it never puts the learner's folder on ``sys.path``, so none of these
names resolve to the planted files inside it: every marker found was written by a trusted process.
The normal grade of such a folder is a refusal: files named like importable modules beside the
exercise's file are "cannot be verified" for every graded function (src/lumen_ex/harness/source_scan.py
``shadowing_files``), every other test passes (:func:`refused_for_its_neighbours`).

The PYTHONPATH runs point it at a folder of the same modules (all but a ``lumen_ex`` package, which
on the caller's own PYTHONPATH would simply be the program). One marker is expected there: Python
itself imports a ``sitecustomize`` found on ``PYTHONPATH`` before any lumen-ex code runs, in the
interpreter the caller started; lumen-ex then starts itself again isolated (src/lumen_ex/core/trusted.py), so
nothing else of that folder is imported, and nothing it starts sees the variable. That planted
``sitecustomize`` therefore only leaves its marker, and the test checks that it came from the
command's own first, unisolated interpreter, once.
"""

from __future__ import annotations

import csv
import io
import json
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import LUMEN_EX, interruptible, requires_bwrap
from docker_support import docker_param, needs_docker

from lumen_ex.core import catalog
from lumen_ex.core.workspace import Workspace

CAT = catalog.load()
EX1 = CAT.find(1)
REFERENCE = (EX1.reference_path).read_text()
# Modules the trusted side imports lazily, its dependencies, and Python's start-up hooks.
SHADOWS = ("json", "csv", "zipfile", "tomllib", "shutil", "tempfile", "string", "random", "secrets",
           "textwrap", "uuid", "hashlib", "inspect", "ast", "select", "subprocess", "threading",
           "torch", "numpy", "click", "rich", "pluggy", "iniconfig", "pytest", "jsonschema")
PACKAGES = ("lumen_ex", "_pytest")
HOOKS = ("sitecustomize", "usercustomize", "startup")     # startup.py: what PYTHONSTARTUP names
EXIT_CODE = 97

PLANTED = '''
import os as _os, sys as _sys
try:
    _fd = _os.open({marks!r} + "/" + __name__ + "." + str(_os.getpid()) + ".isolated" + str(_sys.flags.isolated),
                   _os.O_WRONLY | _os.O_CREAT | _os.O_APPEND, 0o644)
    _os.write(_fd, (" ".join(_sys.argv) + "\\n").encode())
    _os.close(_fd)
except OSError:
    pass
'''
ENDS_THE_PROCESS = 'print("SHADOW MODULE IMPORTED", __name__, file=_sys.stderr)\n_os._exit(%d)\n' % EXIT_CODE


def plant(folder: Path, marks: str, packages: tuple[str, ...] = PACKAGES) -> Path:
    """Every shadowing module into ``folder``; ``marks`` is where an imported one leaves its marker."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in SHADOWS:
        (folder / f"{name}.py").write_text(PLANTED.format(marks=marks) + ENDS_THE_PROCESS)
    for name in packages:
        (folder / name).mkdir(exist_ok=True)
        (folder / name / "__init__.py").write_text(PLANTED.format(marks=marks) + ENDS_THE_PROCESS)
    for name in HOOKS:      # only marks: with PYTHONPATH set, the caller's own Python imports it
        (folder / f"{name}.py").write_text(PLANTED.format(marks=marks))
    return folder


def pythonpath_folder(tmp: Path, marks: Path, pythonpath: bool) -> Path | None:
    """For the PYTHONPATH runs, a folder of shadowing modules to point it at (None otherwise).

    It holds everything :func:`plant` plants but the ``lumen_ex`` package: a package named like the
    program, on the caller's own PYTHONPATH, would be the program (src/lumen_ex/core/trusted.py)."""
    if not pythonpath:
        return None
    return plant(tmp / "on-pythonpath", str(marks), packages=("_pytest",))


def markers(marks: Path) -> list[str]:
    return sorted(p.name for p in marks.iterdir()) if marks.is_dir() else []


def refused_for_its_neighbours(doc: dict) -> bool:
    """The reference with modules planted beside it, graded normally: a fail, and every test that
    did not pass refused for a file named like a module beside it (nothing crashed, nothing else)."""
    failed = [t for t in doc["tests"] if t["status"] not in ("pass", "skipped")]
    return doc["status"] == "fail" and bool(failed) and all("beside it, named like the module" in t["message"]
                                                             for t in failed)


def environment(planted: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "FORCE_COLOR", "CLICOLOR"))}
    env.update({"NO_COLOR": "1", "COLUMNS": "160", "TERM": "dumb"})
    if planted is not None:
        env.update({"PYTHONPATH": str(planted), "PYTHONSTARTUP": str(planted / "startup.py")})
    return env


def assert_no_trusted_import(marks: Path, command_pid: int | None, pythonpath: bool) -> None:
    """No marker, except (with PYTHONPATH) the caller's own interpreter's sitecustomize, once."""
    found = markers(marks)
    if pythonpath:
        expected = [f"sitecustomize.{command_pid}.isolated0"]
        assert found == expected, f"trusted processes imported planted modules: {found}"
    else:
        assert found == [], f"trusted processes imported planted modules: {found}"


@pytest.fixture
def planted_workspace(tmp_path):
    """A workspace with the reference solution and shadowing modules everywhere; the markers' folder."""
    marks = tmp_path / "marks"
    marks.mkdir()
    ws = Workspace.create(tmp_path / "ws", CAT)
    (ws.root / EX1.path).write_text(REFERENCE)
    for folder in (ws.root, ws.root / EX1.dir):
        plant(folder, str(marks))
    return ws.root, marks


ENV_MODES = [pytest.param(False, id="clean-env"), pytest.param(True, id="pythonpath")]


# -- lumen-ex check ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("pythonpath", ENV_MODES)
@pytest.mark.parametrize("sandbox", [pytest.param("bwrap", marks=requires_bwrap), docker_param()])
def test_check_imports_nothing_of_the_learner(planted_workspace, sandbox, pythonpath):
    if sandbox == "docker" and pythonpath:
        pytest.skip("the docker run's host side is the same `lumen-ex check` as with bwrap")
    root, marks = planted_workspace
    env = environment(pythonpath_folder(root.parent, marks, pythonpath))
    proc = subprocess.Popen([LUMEN_EX, "check", "1", "--sandbox", sandbox, "--seed", "3", "--format", "json"],
                            cwd=root / EX1.dir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=600)
    assert "SHADOW MODULE IMPORTED" not in err, err
    assert proc.returncode == 1, out + err
    doc = json.loads(out)
    assert refused_for_its_neighbours(doc) and doc["sandbox"]["backend"] == sandbox, out
    assert_no_trusted_import(marks, proc.pid, pythonpath)


# -- lumen-ex watch ---------------------------------------------------------------------------------


@requires_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("pythonpath", ENV_MODES)
def test_watch_imports_nothing_of_the_learner(planted_workspace, pythonpath):
    root, marks = planted_workspace
    env = environment(pythonpath_folder(root.parent, marks, pythonpath))
    proc = subprocess.Popen([LUMEN_EX, "watch", "1", "--sandbox", "bwrap", "--seed", "3"], cwd=root / EX1.dir,
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=interruptible)
    output = b""
    try:
        deadline = time.monotonic() + 180
        while b"Ctrl-C to stop" not in output:
            assert time.monotonic() < deadline, output.decode()
            assert proc.poll() is None, output.decode() + proc.stderr.read().decode()
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)
            if ready:
                output += os.read(proc.stdout.fileno(), 1 << 16)
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read().decode()
    assert "SHADOW MODULE IMPORTED" not in err, err
    assert proc.returncode == 0, output.decode() + err
    assert "Not yet" in output.decode() and "beside it, named like the module" in output.decode()
    assert_no_trusted_import(marks, proc.pid, pythonpath)


# -- lumen-ex grade, started from inside a student's folder ------------------------------------------


def make_class(root: Path, marks: Path) -> Path:
    """alice (a workspace, shadowing modules everywhere in it) and bob (flat files, one json.py)."""
    subs = root / "submissions"
    alice = Workspace.create(subs / "alice", CAT)
    (alice.root / EX1.path).write_text(REFERENCE)
    for folder in (alice.root, alice.root / EX1.dir):
        plant(folder, str(marks))
    (subs / "bob").mkdir()
    (subs / "bob" / EX1.file).write_text(REFERENCE)
    plant(subs / "bob", str(marks))
    return subs


def gradebook(out: Path) -> dict[str, dict]:
    return {row["student"]: row for row in csv.DictReader(io.StringIO((out / "gradebook.csv").read_text()))}


@pytest.mark.slow
@pytest.mark.parametrize("pythonpath", ENV_MODES)
@pytest.mark.parametrize("sandbox", [pytest.param("bwrap", marks=requires_bwrap), docker_param()])
def test_grade_from_a_students_folder_imports_nothing_of_it(tmp_path, sandbox, pythonpath):
    if sandbox == "docker" and pythonpath:
        pytest.skip("the grading processes on the host are the same as with bwrap")
    marks = tmp_path / "marks"
    marks.mkdir()
    subs = make_class(tmp_path, marks)
    inside = subs / "alice" / EX1.dir
    out = tmp_path / "out"
    proc = subprocess.Popen([LUMEN_EX, "grade", str(subs), "--exercise", "1", "--out", str(out), "--jobs", "2",
                             "--sandbox", sandbox, "--seed", "5"], cwd=inside,
                            env=environment(pythonpath_folder(tmp_path, marks, pythonpath)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=600)
    assert "SHADOW MODULE IMPORTED" not in stderr, stderr
    assert proc.returncode == 0, stdout + stderr
    book = gradebook(out)
    assert sorted(book) == ["alice", "bob"] and all(r["status"] == "fail" for r in book.values()), book
    for student in book:          # the normal grade of the reference with modules planted beside it
        doc = json.loads((out / "results" / student / f"{EX1.dir}.json").read_text())
        assert refused_for_its_neighbours(doc), doc
    logs = "".join(p.read_text(errors="replace") for p in (out / ".logs").glob("*.log")) \
        if (out / ".logs").is_dir() else ""
    assert "SHADOW MODULE IMPORTED" not in logs, logs
    assert_no_trusted_import(marks, proc.pid, pythonpath)


# -- the grader image's platform entry point ----------------------------------------------------------


@needs_docker
@pytest.mark.slow
def test_the_image_entry_point_imports_nothing_of_the_submission(tmp_path):
    """Gradescope's local run, with the working folder and PYTHONPATH set to the submission: the
    entry point (``python -IB``) imports nothing of it, not even its sitecustomize."""
    from lumen_ex.image import tag as image

    sub = tmp_path / "submission"
    results = tmp_path / "results"
    marks = results / "marks"
    marks.mkdir(parents=True)
    marks.chmod(0o755)                  # the harness (root in the container) may write; the worker not
    plant(sub, "/autograder/results/marks")
    (sub / EX1.file).write_text(REFERENCE)
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--pull", "never",
         "-v", f"{sub}:/autograder/submission", "-v", f"{results}:/autograder/results",
         "--workdir", "/autograder/submission", "--env", "PYTHONPATH=/autograder/submission",
         "--env", "PYTHONSTARTUP=/autograder/submission/startup.py", "--env", "LUMEN_EX_EXERCISES=1",
         image.status().ref, "/autograder/run_autograder"], capture_output=True, text=True, timeout=600)
    assert "SHADOW MODULE IMPORTED" not in proc.stderr + proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((results / "results.json").read_text())
    # graded normally: the reference, refused for the modules planted beside it, nothing crashed
    assert doc["score"] < EX1.max_score and any("beside it, named like the module" in t.get("output", "")
                                                for t in doc["tests"]), doc
    assert markers(marks) == []
    shutil.rmtree(sub, ignore_errors=True)


# -- the rules themselves -----------------------------------------------------------------------------


def test_trusted_children_are_isolated_and_get_no_python_variables(monkeypatch):
    from lumen_ex.core import trusted

    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p evil")
    cmd = trusted.python_command("lumen_ex.classroom.grading_main", "1")
    assert cmd[1:4] == ["-I", "-m", "lumen_ex.classroom.grading_main"]
    env = trusted.child_env()
    assert "PYTHONPATH" not in env and "PYTEST_ADDOPTS" not in env and env.get("PATH") == os.environ.get("PATH")
    assert "PYTHONPATH" in trusted.exposed()


def test_an_isolated_interpreter_still_finds_lumen_ex(tmp_path):
    """``python -I -m lumen_ex...`` works from a planted folder (the editable install's finder lies
    in site-packages) and imports nothing of it."""
    from lumen_ex.core import trusted

    marks = tmp_path / "marks"
    marks.mkdir()
    plant(tmp_path / "cwd", str(marks))     # lumen_ex/ there too: -I never looks in the current folder
    proc = subprocess.run(trusted.python_command("lumen_ex.cli.main", "--version"), cwd=tmp_path / "cwd",
                          env=environment(tmp_path / "cwd"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "lumen-ex, version" in proc.stdout, proc.stdout + proc.stderr
    assert markers(marks) == []
