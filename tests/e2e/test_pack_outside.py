"""An instructor's pack, made by `lumen-ex dev new` in a folder outside the repository, used for real:
validated by `dev check` (graded), listed, checked and batch-graded through LUMEN_EX_PATH (and
--exercises), hidden from learner code by the sandbox wherever it lies, and graded by the grader
image built with it (docker)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import LUMEN_EX, ROOT, best_sandbox
from docker_support import requires_docker

from lumen_ex.authoring.close_seeds import CLOSE_SHARE
from lumen_ex.authoring.scaffold import new_pack

WRONG = "def softmax(x):\n    return x * 0 + 1\n"
# The pack forbids torch.nn.functional.softmax (its exercise.toml's data, src/lumen_ex/core/forbidden.py):
# named outright, the scan refuses it; through a string the standard library evaluates, the worker does.
NAMED = "def softmax(x):\n    return x.softmax(-1)\n"
BY_STRING = ('''import typing


def softmax(x):
    ref = typing.get_args(typing.List["__import__('torch').softmax"])[0]
    return ref._evaluate({}, {}, frozenset())(x, -1)
''')


def files_of(root: Path) -> set[str]:
    """Every file and folder under a pack: grading and dev check must write none (no __pycache__)."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def says_forbidden(stdout: str) -> bool:
    return any("implement it yourself; calling F.softmax" in t["message"] for t in json.loads(stdout)["tests"])


def run(args: list[str], env: dict | None = None, cwd: Path = Path("/"), timeout: float = 900,
        read_only: Path | None = None):
    """The installed command; with ``read_only``, that folder (a pack) is read-only while it runs."""
    full = {k: v for k, v in os.environ.items() if k != "LUMEN_EX_PATH"}
    full.update({"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb", **(env or {})})
    command = [LUMEN_EX, *args]
    if read_only is None:
        return subprocess.run(command, capture_output=True, text=True, env=full, cwd=cwd, timeout=timeout)
    if os.geteuid() == 0:      # root writes through file modes: a read-only bind mount, in a namespace of its own
        return subprocess.run([*READ_ONLY_MOUNT, str(read_only), *command], capture_output=True, text=True,
                              env=full, cwd=cwd, timeout=timeout)
    modes = {p: p.stat().st_mode for p in [read_only, *read_only.rglob("*")]}
    try:
        for p, mode in modes.items():
            p.chmod(mode & ~0o222)
        return subprocess.run(command, capture_output=True, text=True, env=full, cwd=cwd, timeout=timeout)
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


# The command after it runs with the folder named first mounted read-only: a bind mount made read-only
# in a mount namespace of the command's own (gone with it); a write into the folder is first tried
# and must fail, else the command does not run (exit 97).
READ_ONLY_MOUNT = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" || exit 96; '
                   'if touch "$0/.write-probe" 2>/dev/null; then echo "$0 is writable" >&2; exit 97; fi; exec "$@"']


@pytest.fixture(scope="module")
def pack():
    """The scaffolded pack, in a temporary folder that is not inside the repository."""
    top = Path(tempfile.mkdtemp(prefix="lumen-ex-course-"))
    assert not top.resolve().is_relative_to(ROOT)
    folder = new_pack(top / "course", slug="softmax", title="Softmax", name="course")
    yield top / "course", folder
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.slow
def test_dev_check_grades_and_accepts_the_scaffold(pack, tmp_path):
    """The scaffold passes `dev check` as an author runs it, and so does a second exercise that
    `dev new` adds to the same pack. Over 30 s: the real command, with its grading processes, two
    exercises under 5 seeds."""
    root, _ = pack
    grown = tmp_path / "grown"
    shutil.copytree(root, grown)
    added = run(["dev", "new", str(grown), "--slug", "attention-sink", "--title", "Attention sink"])
    assert added.returncode == 0 and "Added to the pack" in added.stdout, added.stdout + added.stderr
    assert '"101-softmax", "102-attention-sink"' in (grown / "pack.toml").read_text()
    before = files_of(grown)
    proc = run(["dev", "check", str(grown), "--format", "json"], read_only=grown)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert files_of(grown) == before                  # nothing written into the instructor's pack (read-only there)
    doc = json.loads(proc.stdout)
    assert [ex["number"] for ex in doc["exercises"]] == [101, 102]
    for ex in doc["exercises"]:
        # Every file under the 3 default seeds; the reference under the 2 close seeds too, and the
        # correct file only if it used half a tolerance or more under one of the 3 (its float32 values
        # against a float64 reference: near the line at some seeds); the stub once; each file against
        # its own exercise only.
        used = [f["tolerance_used"] for f in doc["files"] if f["what"] == "correct" and f["dir"] == ex["dir"]
                and f["seed"] in (1, 2, 3)]
        assert len(used) == 3 and all(u is not None and 0 < u <= 1 for u in used), used
        near = max(used) >= CLOSE_SHARE
        assert ex["corpus"] == {"buggy:fails as declared": 2 * 3, "correct:full marks": 5 if near else 3,
                                "reference:full marks": 5, "stub:fails": 1}, (ex, used)
        assert ex["mistakes_named"] == ["softmax-overflow", "softmax-wrong-axis"]
    assert doc["seeds"] == [1, 2, 3] and doc["close_seeds"] == [4, 5]
    assert doc["graded"] == sum(sum(ex["corpus"].values()) for ex in doc["exercises"])


@pytest.mark.slow
def test_dev_check_catches_a_false_pass_and_a_wrong_reference(pack, tmp_path):
    root, _ = pack
    broken = tmp_path / "broken"
    shutil.copytree(root, broken)
    folder = broken / "101-softmax"
    (folder / "corpus" / "correct" / "subtract_max.py").write_text(WRONG)       # no longer correct
    buggy = folder / "corpus" / "buggy" / "wrong_axis.py"
    buggy.write_text(buggy.read_text().replace("dim=0", "dim=-1"))             # now correct: a false pass
    proc = run(["dev", "check", str(broken), "--format", "json", "--seeds", "5"])
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    problems = {p["where"]: p["what"] for p in json.loads(proc.stdout)["problems"]}
    assert "must get full marks" in problems["101-softmax/corpus/correct/subtract_max.py"]
    assert "FALSE PASS" in problems["101-softmax/corpus/buggy/wrong_axis.py"]
    assert "'softmax-wrong-axis' is named by no buggy corpus file" in problems["101-softmax"]


FLAKY = """import torch


def softmax(x):
    e = (x - x.max(dim=-1, keepdim=True).values).exp()
    s = e / e.sum(dim=-1, keepdim=True)
    # Right on some inputs only: which ones depends on the seed.
    return s if int(x.abs().sum() * 1000) % 2 == 0 else s.flip(-1)
"""


@pytest.mark.slow
def test_dev_check_says_when_a_verdict_depends_on_the_seed(pack, tmp_path):
    """One file graded under several seeds, in one warm batch where each (file, seed) has its own seed:
    a verdict that changes with the seed is a problem of its own, naming the seeds and the tests that
    changed (so the batch did grade each file under each seed). Over 30 s: the real command grades the
    pack's files under six seeds."""
    root, _ = pack
    flaky = tmp_path / "flaky"
    shutil.copytree(root, flaky)
    (flaky / "101-softmax" / "corpus" / "correct" / "flaky.py").write_text(FLAKY)
    proc = run(["dev", "check", str(flaky), "--format", "json", "--seeds", "1,2,3,4,5,6", "--close-seeds", ""])
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    mine = [p["what"] for p in doc["problems"] if p["where"] == "101-softmax/corpus/correct/flaky.py"]
    assert any(w.startswith("the verdict depends on the seed: seed ") for w in mine), mine
    assert {f["seed"] for f in doc["files"] if f["where"].endswith("/flaky.py")} == {1, 2, 3, 4, 5, 6}
    others = [p for p in doc["problems"] if not p["where"].endswith("/flaky.py")]
    assert others == [], others


@pytest.mark.slow
def test_listed_checked_and_graded_through_the_path(pack, tmp_path):
    """Listed, checked and graded through LUMEN_EX_PATH; the passing check and the class grading with
    the pack read-only (issue "Authoring": nothing is written into a pack). Over 30 s: four real
    commands, a class grading among them."""
    root, folder = pack
    before = files_of(root)
    env = {"LUMEN_EX_PATH": str(root)}
    listing = run(["list"], env)
    assert listing.returncode == 0 and "101  softmax" in listing.stdout and "Softmax" in listing.stdout, listing.stdout
    assert run(["init", str(tmp_path / "ws")], env).returncode == 0
    stub = tmp_path / "ws" / "101-softmax" / "softmax.py"
    assert stub.read_text() == (folder / "softmax.py").read_text()
    assert (tmp_path / "ws" / "01-attention" / "attention.py").is_file()      # the built-in pack is still there
    failing = run(["check", "101", "--workspace", str(tmp_path / "ws"), "--format", "json"], env)
    assert failing.returncode == 1, failing.stderr
    assert "NotImplementedError" in json.loads(failing.stdout)["tests"][1]["message"]
    stub.write_text((folder / "reference.py").read_text())
    passing = run(["check", "101", "--workspace", str(tmp_path / "ws"), "--format", "json"], env, read_only=root)
    assert passing.returncode == 0, passing.stdout[-2000:] + passing.stderr
    doc = json.loads(passing.stdout)
    assert doc["score"] == doc["max_score"] == 5 and "course@0.1.0" in doc["versions"]["catalog"]
    stub.write_text(NAMED)
    named = run(["check", "101", "--workspace", str(tmp_path / "ws"), "--format", "json"], env)
    assert named.returncode == 1 and says_forbidden(named.stdout), named.stdout[-2000:]
    # --exercises instead of the variable
    stub.write_text((folder / "reference.py").read_text())
    assert run(["check", "softmax", "--workspace", str(tmp_path / "ws"), "--exercises", str(root)]).returncode == 0
    assert run(["check", "101", "--workspace", str(tmp_path / "ws")]).returncode == 2     # unknown without it

    subs = tmp_path / "subs"
    for student, text in (("ada", (folder / "reference.py").read_text()), ("bob", WRONG)):
        (subs / student / "101-softmax").mkdir(parents=True)
        (subs / student / "101-softmax" / "softmax.py").write_text(text)
    graded = run(["grade", str(subs), "-e", "101", "--out", str(tmp_path / "out"), "--jobs", "2"], env, read_only=root)
    assert graded.returncode == 0, graded.stdout[-2000:] + graded.stderr[-2000:]
    rows = {r["student"]: r for r in csv.DictReader((tmp_path / "out" / "gradebook.csv").open())}
    docs = {s: json.loads((tmp_path / "out" / "results" / s / "101-softmax.json").read_text()) for s in rows}
    assert docs["ada"]["status"] == "pass" and docs["ada"]["score"] == 5
    assert docs["bob"]["status"] == "fail" and docs["bob"]["score"] < 5
    assert all("course@0.1.0" in d["versions"]["catalog"] for d in docs.values())
    assert files_of(root) == before                   # checks and a class grading wrote nothing into the pack


SNOOP = '''
import numpy
PACK = {pack!r}


def _seen():
    # numpy.loadtxt reads any file (the source scan allows it): a parse error still means it was read
    for path in (PACK + "/pack.toml", PACK + "/101-softmax/reference.py"):
        try:
            numpy.loadtxt(path, dtype=str, delimiter="\\x00", comments=None)
            return path
        except OSError:
            pass
        except ValueError:
            return path
    return None


def softmax(x):
    if _seen():
        return x * 0
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)
'''


# The attack on a pack under a folder the bwrap sandbox mounts is in tests/sandbox/test_sandbox.py
# (test_a_pack_under_a_mounted_folder_is_invisible); here, the image.


@pytest.mark.slow
@pytest.mark.parametrize("_", [pytest.param(0, marks=requires_docker)])
def test_the_grader_image_grades_an_instructors_pack(pack, tmp_path, monkeypatch, _):
    """The grader image built with an instructor's pack grades it. Over 30 s: it builds that image."""
    from lumen_ex.image import tag

    root, folder = pack
    env = {"LUMEN_EX_PATH": str(root)}
    builtin_ref = tag.default_ref()
    monkeypatch.setenv("LUMEN_EX_PATH", str(root))
    ref = tag.default_ref()          # the pack is part of the content hash: another tag
    assert ref != builtin_ref
    base = tag.build_command().partition("--base ")[2]
    built = run(["image", "build", *(["--base", base] if base else [])], env, timeout=1800)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    try:
        status = run(["image", "status"], env)
        assert status.returncode == 0, status.stdout + status.stderr
        ws = tmp_path / "ws"
        assert run(["init", str(ws)], env).returncode == 0
        # The control: unisolated, on the host, the same code reads the pack and answers wrong.
        (ws / "101-softmax" / "softmax.py").write_text(SNOOP.format(pack=str(root)))
        control = run(["check", "101", "--workspace", str(ws), "--sandbox", "none", "--format", "json"], env)
        assert json.loads(control.stdout)["status"] == "fail", control.stdout[-2000:]
        site_pack = "/opt/lumen/venv/lib/python3.11/site-packages/lumen_ex/packs/course"
        listed = subprocess.run(["docker", "run", "--rm", "--entrypoint", "/bin/ls", ref, f"{site_pack}/101-softmax"],
                                capture_output=True, text=True, timeout=120)
        assert "reference.py" in listed.stdout.split(), listed      # the pack is there (for root), so the attack aims true
        (ws / "101-softmax" / "softmax.py").write_text(SNOOP.format(pack=site_pack))
        proc = run(["check", "101", "--workspace", str(ws), "--sandbox", "docker", "--format", "json"], env)
        doc = json.loads(proc.stdout)
        assert proc.returncode == 0 and doc["status"] == "pass" and doc["sandbox"]["backend"] == "docker", \
            proc.stdout[-2000:] + proc.stderr[-2000:]
        (ws / "101-softmax" / "softmax.py").write_text(WRONG)
        wrong = run(["check", "101", "--workspace", str(ws), "--sandbox", "docker", "--format", "json"], env)
        assert wrong.returncode == 1 and json.loads(wrong.stdout)["status"] == "fail", wrong.stdout[-2000:]
        (ws / "101-softmax" / "softmax.py").write_text(BY_STRING)      # the worker's layer, in the image
        routed = run(["check", "101", "--workspace", str(ws), "--sandbox", "docker", "--format", "json"], env)
        assert routed.returncode == 1 and says_forbidden(routed.stdout), routed.stdout[-2000:]
    finally:
        subprocess.run(["docker", "rmi", ref], capture_output=True, timeout=120)


@pytest.mark.slow
def test_a_typo_in_a_packs_suite_is_the_packs_fault_named_once_with_its_line(pack, tmp_path):
    """A typo in the suite (``ref.softmaxx``): the learner's check blames the pack, by name and
    version, with the suite's file and line, never lumen-ex; `dev check` reports it once with the
    whole message (its traceback with --debug) and none of the failures it causes downstream.
    Over 30 s: a check and two dev checks of the pack (one seed each)."""
    root, _ = pack
    typo = tmp_path / "typo"
    shutil.copytree(root, typo)
    suite = typo / "101-softmax" / "suite" / "test_softmax.py"
    text = suite.read_text()
    assert text.count("ref.softmax(x), \"output\", (\"n\",)") == 1
    suite.write_text(text.replace("ref.softmax(x), \"output\", (\"n\",)", "ref.softmaxx(x), \"output\", (\"n\",)"))
    line = 1 + suite.read_text().splitlines().index(
        next(s for s in suite.read_text().splitlines() if "ref.softmaxx" in s))
    env = {"LUMEN_EX_PATH": str(typo)}
    assert run(["init", str(tmp_path / "ws")], env).returncode == 0
    (tmp_path / "ws" / "101-softmax" / "softmax.py").write_text((typo / "101-softmax" / "reference.py").read_text())
    checked = run(["check", "101", "--workspace", str(tmp_path / "ws"), "--sandbox", "none", "--format", "json"], env)
    doc = json.loads(checked.stdout)
    fault = next(t for t in doc["tests"] if t["diagnosis"] and t["diagnosis"]["kind"] == "grader")
    assert fault["id"].endswith("test_one_dimensional"), fault
    assert "AttributeError" in fault["diagnosis"]["summary"] and "has no attribute 'softmaxx'" in \
        fault["diagnosis"]["summary"], fault
    hint = fault["diagnosis"]["hint"]
    assert "exercise pack course@0.1.0" in hint and f"suite/test_softmax.py line {line}" in hint, hint
    assert "bug in lumen-ex" not in checked.stdout
    assert fault["diagnosis"]["details"]["line"] == line

    # bwrap's forked workers where it works: under "none" every grading starts a worker of its own
    checked = run(["dev", "check", str(typo), "--format", "json", "--seeds", "1", "--close-seeds", "",
                   "--sandbox", best_sandbox()])
    report = json.loads(checked.stdout)
    assert checked.returncode == 1 and not report["ok"]
    problems = report["problems"]
    assert len(problems) == 1, problems                  # no cascade: stub, reference, corpus, mistakes
    assert problems[0]["where"] == f"101-softmax/suite/test_softmax.py line {line}"
    assert "AttributeError" in problems[0]["what"] and "'softmaxx'" in problems[0]["what"]
    assert report["faults"][0]["frames"][-1].startswith(f"suite/test_softmax.py line {line}")
    shown = run(["--debug", "dev", "check", str(typo), "--seeds", "1", "--close-seeds", "", "--sandbox",
                 best_sandbox()])
    assert f"suite/test_softmax.py line {line}, in test_one_dimensional" in shown.stdout, shown.stdout[-3000:]


def doc_commands(path: Path) -> list[str]:
    """The command lines of a document's ```bash blocks, as written (comments kept: bash drops them)."""
    lines, inside = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```bash"
            continue
        if inside and line.strip():
            lines.append(line)
    return lines


@pytest.mark.slow
def test_docs_authoring_md_runs_as_written(tmp_path):
    """docs/authoring.md's commands, word for word, in one shell with a fresh home folder: a pack made
    by `dev new`, accepted by `dev check`, listed, a workspace made and checked, a class graded. The
    one thing the walk adds is a class to grade (the document assumes the instructor has one). The
    image build is left to test_the_grader_image_grades_an_instructors_pack, which builds the image of
    a pack (a second build here would add a minute). Over 30 s: dev check grades the scaffold."""
    commands = doc_commands(ROOT / "docs" / "authoring.md")
    assert any(c.startswith("lumen-ex dev new ~/course-pack") for c in commands), commands
    home = tmp_path / "home"
    home.mkdir()
    script = []
    for number, command in enumerate(commands):
        if command.startswith("lumen-ex image build"):
            continue
        if command.startswith("lumen-ex grade submissions/"):
            script.append("mkdir -p submissions/alice/101-softmax submissions/bob/101-softmax && "
                          "cp ~/course-pack/101-softmax/reference.py submissions/alice/101-softmax/softmax.py && "
                          "cp ~/course-pack/101-softmax/softmax.py submissions/bob/101-softmax/softmax.py")
        script.append(f"{command}\necho \"rc {number} $?\"")
    env = {k: v for k, v in os.environ.items() if k != "LUMEN_EX_PATH"}
    env.update({"HOME": str(home), "PATH": f"{Path(LUMEN_EX).parent}:{env.get('PATH', '/usr/bin:/bin')}",
                "COLUMNS": "120", "NO_COLOR": "1"})
    proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=home, env=env, capture_output=True, text=True,
                          timeout=900)
    codes = {int(n): int(rc) for n, rc in (line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("rc "))}
    said = proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = [n for n, c in enumerate(commands) if not c.startswith("lumen-ex image build")]
    assert sorted(codes) == ran, said
    check_line = next(n for n, c in enumerate(commands) if "lumen-ex check 101" in c)
    assert codes.pop(check_line) == 1, said              # a fresh workspace's stub fails its check
    assert set(codes.values()) == {0}, said
    assert "101" in proc.stdout and "softmax" in proc.stdout
    rows = {r["student"]: r for r in csv.DictReader((home / "my-work" / "graded" / "gradebook.csv").open())}
    assert set(rows) == {"alice", "bob"}, rows
