"""The docker backend: its command line, the result document it trusts, and real runs.

The first half needs no engine: the ``docker run`` flags, the validation of the result document
(garbage, oversized, missing or extra fields, forged verdicts all become status "error", exit 3),
and the host's clean-up paths, driven by a fake ``docker`` command that misbehaves on purpose.
The second half runs the real image (skipped, with the reason, without an engine or image):
reference solutions pass with results identical to bwrap's, stubs fail, the isolation inside the
container holds, and a hung check is killed and removed by name on a timeout and on Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import best_sandbox, interruptible, workspace_with
from docker_support import containers_of_workspace, needs_docker, summary
from proc_support import wait_until

from lumen_ex.core import catalog
from lumen_ex.core.errors import SandboxUnavailable
from lumen_ex.core.limits import Limits
from lumen_ex.core.results import Diagnosis, RunResult, SandboxInfo, Status
from lumen_ex.core.results import TestResult as Record
from lumen_ex.harness.check import run_check
from lumen_ex.sandbox import docker as docker_backend
from lumen_ex.sandbox import docker_slot
from lumen_ex.sandbox.base import WorkerSpec
from lumen_ex.sandbox.docker import DockerSandbox
from lumen_ex.sandbox.result_document import MAX_BYTES, DocumentError, parse_document, read_document

ROOT = Path(__file__).resolve().parents[2]
LUMEN_EX = str(Path(sys.executable).parent / "lumen-ex")
EX1 = catalog.load().find(1)


def _ws(tmp_path: Path, exercise: int = 1, source: str | Path | None = None) -> Path:
    return workspace_with(tmp_path, exercise, source)


# -------------------------------------------------------------------------------------------------
# The command line


def _argv(tmp_path, **kw) -> list[str]:
    sandbox = DockerSandbox("lumen-ex-grader:test")
    return sandbox.argv(name="lumen-abc", workspace=tmp_path / "ws", results=tmp_path / "res", exercise=1,
                        device="cpu", limits=Limits(), **kw)


def _values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_run_line_holds_every_isolation_flag(tmp_path):
    argv = _argv(tmp_path)
    lim = Limits()
    assert argv[1] == "run" and "--rm" in argv
    assert _values(argv, "--network") == ["none"]
    assert "--read-only" in argv
    assert _values(argv, "--ipc") in (["none"], ["private"])
    tmp = [t for t in _values(argv, "--tmpfs") if t.startswith("/tmp:")]
    assert tmp and {"nosuid", "nodev", f"size={lim.tmp_mb}m"} <= set(tmp[0].split(":", 1)[1].split(","))
    memory = _values(argv, "--memory")
    assert memory and memory == _values(argv, "--memory-swap")          # no swap at all
    assert int(_values(argv, "--pids-limit")[0]) > lim.processes
    assert float(_values(argv, "--cpus")[0]) > 0
    assert _values(argv, "--cap-drop") == ["ALL"]
    assert sorted(_values(argv, "--cap-add")) == ["KILL", "SETGID", "SETUID"]
    assert _values(argv, "--security-opt") == ["no-new-privileges"]
    assert _values(argv, "--name") == ["lumen-abc"]
    assert _values(argv, "--pull") == ["never"]
    mounts = _values(argv, "--mount")
    assert any("target=/workspace" in m and m.endswith(",readonly") for m in mounts)
    assert any("target=/results" in m and "readonly" not in m for m in mounts)
    assert not any(m in " ".join(argv) for m in ("--privileged", "docker.sock", "seccomp=unconfined", "--gpus"))
    # The seed reaches the container through the environment only (the worker can read command lines).
    assert "LUMEN_EX_SEED" in _values(argv, "--env")
    assert not any(a.startswith("LUMEN_EX_SEED=") for a in argv)


def _spec(tmp_path) -> WorkerSpec:
    ws = _ws(tmp_path)
    return WorkerSpec(workspace=ws, module_dir=ws / EX1.dir, device="cpu", limits=Limits())


def test_a_grading_slot_runs_unprivileged_with_only_its_control_folder(tmp_path):
    """The slot of src/lumen_ex/sandbox/docker_slot.py: never root, no capability, no student's
    folder, and the two settings its zygote needs (its own seccomp profile, /proc uncovered)."""
    argv = docker_slot.slot_argv("img:1", "lumen-slot-x", tmp_path / "control", tmp_path / "seccomp.json",
                                 _spec(tmp_path))
    assert argv[1] == "run" and "--rm" in argv and "--read-only" in argv
    assert _values(argv, "--network") == ["none"] and _values(argv, "--ipc") == ["private"]
    assert _values(argv, "--user") == ["61001:61001"]
    assert _values(argv, "--cap-drop") == ["ALL"] and not _values(argv, "--cap-add")
    assert sorted(_values(argv, "--security-opt")) == sorted([
        "no-new-privileges", f"seccomp={tmp_path / 'seccomp.json'}", "systempaths=unconfined"])
    assert _values(argv, "--mount") == [f"type=bind,source={tmp_path / 'control'},target=/run/lumen"]
    assert "PYTHONHASHSEED=0" in _values(argv, "--env")
    assert argv[-2:] == ["/opt/lumen/inside/zygote.py", "/run/lumen/zygote.sock"]
    assert not any(m in " ".join(argv) for m in ("--privileged", "docker.sock", "seccomp=unconfined", "--gpus"))


def test_the_slots_seccomp_profile_refuses_what_reaches_past_its_namespaces():
    profile = json.loads(docker_slot.seccomp_profile())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    [rule] = profile["syscalls"]
    assert rule["action"] == "SCMP_ACT_ERRNO" and rule["errnoRet"] == 1
    assert {"bpf", "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd", "kexec_load",
            "init_module", "finit_module", "open_by_handle_at", "setns"} <= set(rule["names"])
    assert not {"unshare", "mount", "clone"} & set(rule["names"])     # what the zygote needs


def test_a_fresh_worker_container_gets_the_workspace_read_only_and_dockers_own_profile(tmp_path):
    launcher = docker_slot.DockerWorkerLauncher("img:1")
    spec = _spec(tmp_path)
    enforcement = launcher.enforcement(spec)
    argv = launcher._command(spec, enforcement).argv
    assert "--interactive" in argv and "--rm" not in argv        # removed by name after it is read
    assert _values(argv, "--name") == [enforcement.name]
    assert _values(argv, "--user") == ["61001:61001"] and not _values(argv, "--cap-add")
    assert _values(argv, "--security-opt") == ["no-new-privileges"]          # docker's default seccomp
    assert _values(argv, "--mount") == [f"type=bind,source={spec.workspace.resolve()},target=/workspace,readonly"]
    assert f"cpu={Limits().cpu_seconds}:{Limits().cpu_seconds + 1}" in _values(argv, "--ulimit")
    assert _values(argv, "--memory") == [f"{Limits().memory_mb}m"] == _values(argv, "--memory-swap")
    assert "--gpus" not in argv
    cuda = dataclasses.replace(spec, device="cuda")
    assert _values(launcher._command(cuda, enforcement).argv, "--gpus") == ["all"]


def test_gpus_only_when_asked(tmp_path):
    assert _values(_argv(tmp_path, gpus=True), "--gpus") == ["all"]


def test_mount_values_cannot_smuggle_options(tmp_path):
    odd = tmp_path / "a,readonly=false,target=/etc"
    value = docker_backend._mount(odd, "/workspace", readonly=True)
    import csv
    fields = next(csv.reader([value]))
    assert fields == ["type=bind", f"source={odd}", "target=/workspace", "readonly"]


def test_container_names_are_unique(tmp_path, monkeypatch):
    names = []
    monkeypatch.setattr(docker_backend, "_run_container",
                        lambda argv, name, **kw: (names.append(name), (True, ""))[1])
    ws = _ws(tmp_path)
    for _ in range(3):
        DockerSandbox("x").run_check(EX1, ws, seed=1, device="cpu")
    assert len(set(names)) == 3 and all(n.startswith("lumen-") for n in names)


# -------------------------------------------------------------------------------------------------
# The result document


def _good_doc(seed: int = 7, status: Status = Status.PASS) -> dict:
    tests = [Record("t.py::a", "a", "contract", Status.PASS, 1.0, 1.0, tolerance_used=0.25),
             Record("t.py::b", "b", "values", status, 0.0 if status is not Status.PASS else 2.0, 2.0,
                        message="m", diagnosis=None if status is Status.PASS else Diagnosis("values", "wrong"))]
    return RunResult(exercise=EX1.summary(), status=status, sandbox=SandboxInfo("docker", True, {"memory": "x"}, ""),
                     device="cpu", seed=seed, score=sum(t.score for t in tests), max_score=3.0, duration=1.0,
                     message="ok", tests=tests, versions={"torch": "2"}).to_dict()


def _parse(doc, seed: int = 7) -> RunResult:
    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return parse_document(raw, exercise=EX1.summary(), seed=seed)


def test_a_valid_document_round_trips():
    for status in (Status.PASS, Status.FAIL):
        doc = _good_doc(status=status)
        assert _parse(doc).to_dict() == doc


BROKEN = {
    "not JSON": b"\x00\xffgarbage",
    "a list": b"[1, 2]",
    "NaN": b'{"score": NaN}',
    "deep": b"[" * 100000 + b"]" * 100000,
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_garbage_is_rejected(name):
    with pytest.raises(DocumentError):
        _parse(BROKEN[name])


def _mutations():
    def drop(key):
        return lambda d: d.pop(key)

    def set_(path, value):
        def f(d):
            *head, last = path
            for p in head:
                d = d[p]
            d[last] = value
        return f

    return {
        "missing status": drop("status"),
        "missing tests": drop("tests"),
        "extra field": set_(["verdict"], "pass"),
        "unknown status": set_(["status"], "passed"),
        "score as text": set_(["score"], "3"),
        "negative score": set_(["score"], -1),
        "seed of another run": set_(["seed"], 8),
        "seed as float": set_(["seed"], 7.0),
        "other exercise": set_(["exercise", "number"], 2),
        "other backend": set_(["sandbox", "backend"], "none"),
        "not isolated": set_(["sandbox", "isolated"], False),
        "schema": set_(["schema_version"], "2"),
        "device": set_(["device"], "tpu"),
        "test lacks id": lambda d: d["tests"][0].pop("id"),
        "test status": set_(["tests", 0, "status"], "PASS"),
        "test extra field": set_(["tests", 0, "points"], 5),
        "diagnosis kind": lambda d: d["tests"][0].update(diagnosis={"kind": "cheat", "summary": "x"}),
        "pass with a failure": lambda d: d["tests"][1].update(status="fail"),
        "failed test scores": lambda d: (d.update(status="fail"), d["tests"][1].update(status="fail")),
        "scores do not add up": set_(["score"], 99.0),
        "score above max": lambda d: (d.update(score=4.0, max_score=3.0)),
        "versions not strings": set_(["versions"], {"torch": 2}),
        "huge message": set_(["message"], "x" * 100_000),
        "no tests but pass": lambda d: d.update(tests=[], score=0.0, max_score=0.0),
        "tolerance used above 1": set_(["tests", 0, "tolerance_used"], 1.5),
        "tolerance used negative": set_(["tests", 0, "tolerance_used"], -0.1),
        "tolerance used as text": set_(["tests", 0, "tolerance_used"], "0.2"),
        "tolerance used not finite": set_(["tests", 0, "tolerance_used"], float("inf")),
    }


@pytest.mark.parametrize("name", sorted(_mutations()))
def test_malformed_documents_are_rejected(name):
    doc = _good_doc()
    _mutations()[name](doc)
    with pytest.raises(DocumentError):
        _parse(doc)


def test_only_a_passing_test_says_how_much_tolerance_it_used():
    doc = _good_doc(status=Status.FAIL)
    _parse(doc)
    doc["tests"][1]["tolerance_used"] = 0.5        # on the failing test
    with pytest.raises(DocumentError, match="tolerance_used"):
        _parse(doc)


def test_reading_is_capped_and_never_follows_links(tmp_path):
    doc = tmp_path / "result.json"
    doc.write_bytes(b" " * (MAX_BYTES + 1) + json.dumps(_good_doc()).encode())
    with pytest.raises(DocumentError, match="cap"):
        read_document(doc, exercise=EX1.summary(), seed=7)
    doc.unlink()
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(_good_doc()))
    doc.symlink_to(target)
    with pytest.raises(DocumentError, match="cannot be opened"):
        read_document(doc, exercise=EX1.summary(), seed=7)
    doc.unlink()
    os.mkfifo(doc)
    with pytest.raises(DocumentError, match="regular file"):
        read_document(doc, exercise=EX1.summary(), seed=7)
    doc.unlink()
    with pytest.raises(DocumentError, match="no result document"):
        read_document(doc, exercise=EX1.summary(), seed=7)


# -------------------------------------------------------------------------------------------------
# The host's side, against a fake docker that misbehaves on purpose

FAKE_DOCKER = textwrap.dedent('''\
    #!{python}
    import csv, json, os, shutil, sys, time
    args = sys.argv[1:]
    with open(os.environ["FAKE_DOCKER_LOG"], "a") as f:
        f.write(json.dumps(args) + "\\n")
    if args[:2] == ["container", "inspect"]:
        print("Error: No such container: " + args[-1], file=sys.stderr)
        sys.exit(1)
    if args[0] == "create":         # made after a while, like a daemon's create on a loaded machine
        time.sleep(float(os.environ.get("FAKE_CREATE_S", "0")))
        with open(os.environ["FAKE_DOCKER_LOG"], "a") as f:
            f.write(json.dumps(["made", args[args.index("--name") + 1]]) + "\\n")
        if os.environ.get("FAKE_DOCKER_MODE") == "fail":
            sys.exit(125)
        with open(os.path.join(os.path.dirname(os.environ["FAKE_DOCKER_LOG"]), "created.json"), "w") as f:
            json.dump(args, f)
        sys.exit(0)
    if args[0] == "start":          # the container made last, run as `docker run` would run it
        with open(os.path.join(os.path.dirname(os.environ["FAKE_DOCKER_LOG"]), "created.json")) as f:
            args = ["run", *json.load(f)[1:]]
    if args[0] != "run":
        sys.exit(0)
    mounts = [dict(kv.split("=", 1) for kv in next(csv.reader([a])) if "=" in kv)
              for i, a in enumerate(args) if i and args[i - 1] == "--mount"]
    results = next(m["source"] for m in mounts if m["target"] == "/results")
    doc = os.path.join(results, "result.json")
    mode = os.environ["FAKE_DOCKER_MODE"]
    print("fake docker says hello", flush=True)
    if mode == "garbage":
        open(doc, "wb").write(b"\\x00 not a document")
    elif mode == "huge":
        open(doc, "wb").write(b" " * (9 << 20))
    elif mode == "symlink":
        os.symlink("/etc/hostname", doc)
    elif mode == "copy":
        shutil.copyfile(os.environ["FAKE_DOCKER_DOC"], doc)
    elif mode == "sleep":
        time.sleep(120)
    elif mode == "fail":
        print("docker: Error response from daemon: something broke", file=sys.stderr)
        sys.exit(125)
    sys.exit(int(os.environ.get("FAKE_DOCKER_EXIT", "0")))
''')


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text(FAKE_DOCKER.format(python=sys.executable))
    script.chmod(0o755)
    log = tmp_path / "docker.log"
    log.touch()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    monkeypatch.setattr("tempfile.tempdir", str(scratch))

    class Fake:
        def calls(self):
            return [json.loads(line) for line in log.read_text().splitlines()]

        def mode(self, mode, **env):
            monkeypatch.setenv("FAKE_DOCKER_MODE", mode)
            for k, v in env.items():
                monkeypatch.setenv(k, v)

        def leftovers(self):
            return list(scratch.iterdir())

    return Fake()


def _fake_check(tmp_path, **kw) -> RunResult:
    return DockerSandbox("lumen-ex-grader:fake", **kw).run_check(EX1, _ws(tmp_path / "w"), seed=7, device="cpu")


@pytest.mark.parametrize("mode,words", [("garbage", "not valid JSON"), ("huge", "cap"),
                                        ("symlink", "cannot be opened"), ("nothing", "no result document"),
                                        ("fail", "something broke")])
def test_bad_container_output_is_an_error_with_exit_code_3(tmp_path, fake_docker, mode, words):
    fake_docker.mode(mode)
    result = _fake_check(tmp_path)
    assert result.status is Status.ERROR and result.exit_code() == 3
    assert words in result.message, result.message
    assert "hello" not in result.message or mode == "nothing"
    assert fake_docker.leftovers() == []


def test_verdict_comes_only_from_the_document(tmp_path, fake_docker):
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(dict(_good_doc(seed=7), exercise=EX1.summary())))
    fake_docker.mode("copy", FAKE_DOCKER_DOC=str(doc), FAKE_DOCKER_EXIT="1")   # exit code ignored
    result = _fake_check(tmp_path)
    assert result.status is Status.PASS and result.score == 3.0
    names = [c[c.index("--name") + 1] for c in fake_docker.calls() if c[0] == "create"]
    assert ["rm", "-f", names[0]] in fake_docker.calls()      # not cleanly exited: removed by name


def test_a_clean_run_needs_no_extra_docker_calls(tmp_path, fake_docker):
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(_good_doc(seed=7)))
    fake_docker.mode("copy", FAKE_DOCKER_DOC=str(doc))
    assert _fake_check(tmp_path).status is Status.PASS
    # created, then started (docker.py created), and --rm removed it: no extra calls
    assert [c[0] for c in fake_docker.calls()] == ["create", "made", "start"]


def test_wall_clock_limit_kills_and_removes_by_name(tmp_path, fake_docker):
    fake_docker.mode("sleep")
    started = time.monotonic()
    result = _fake_check(tmp_path, wall_limit=1.5)
    assert time.monotonic() - started < 30
    assert result.status is Status.ERROR and "wall-clock limit" in result.message
    calls = fake_docker.calls()
    name = calls[0][calls[0].index("--name") + 1]
    assert ["kill", name] in calls and ["rm", "-f", name] in calls
    assert fake_docker.leftovers() == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.slow
def test_interrupt_still_cleans_up(tmp_path, fake_docker, signum):
    fake_docker.mode("sleep")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = __import__("threading").Timer(1.5, os.kill, (os.getpid(), signum))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            _fake_check(tmp_path)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    calls = fake_docker.calls()
    name = calls[0][calls[0].index("--name") + 1]
    assert ["kill", name] in calls and ["rm", "-f", name] in calls
    assert fake_docker.leftovers() == []
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None) or callable(signal.getsignal(signal.SIGTERM))


@pytest.mark.parametrize("what", ["slot", "fresh worker", "cold check"])
def test_ctrl_c_while_a_container_is_created_still_removes_it(tmp_path, fake_docker, what, monkeypatch):
    """A slot, a worker container or a cold check's container interrupted while docker creates it
    (src/lumen_ex/sandbox/docker.py created): the creation is waited for, then the container is
    removed, so none is made after its removal (the grading slot that `lumen-ex grade`'s Ctrl-C once
    left behind)."""
    fake_docker.mode("nothing", FAKE_CREATE_S="1.5")
    spec = _spec(tmp_path)
    short = Path(__import__("tempfile").mkdtemp(prefix="lx-", dir="/tmp"))     # a socket's path is short
    monkeypatch.setattr("tempfile.tempdir", str(short))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = __import__("threading").Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            if what == "slot":
                docker_slot.slot_zygote("img:1", spec)
            elif what == "fresh worker":
                docker_slot.DockerWorkerLauncher("img:1").launch(spec)
            else:
                _fake_check(tmp_path)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
        leftovers = list(short.iterdir())
        __import__("shutil").rmtree(short)
    assert leftovers == []
    calls = fake_docker.calls()
    name = calls[0][calls[0].index("--name") + 1]
    assert calls[0][0] == "create" and calls[1] == ["made", name], calls
    assert ["rm", "-f", name] in calls[2:], calls
    assert not any(c[0] in ("run", "start") for c in calls), calls


def test_a_created_container_is_started_attached(tmp_path, fake_docker):
    fake_docker.mode("nothing")
    argv = ["docker", "run", "--name", "lumen-x", "--interactive", "img:1", "python"]
    assert docker_backend.created(argv, "lumen-x") == ["docker", "start", "--attach", "--interactive", "lumen-x"]
    assert fake_docker.calls()[0] == ["create", "--name", "lumen-x", "--interactive", "img:1", "python"]
    fake_docker.mode("fail")
    assert docker_backend.created(["docker", "run", "--name", "lumen-y", "img:1"], "lumen-y")[1] == "run"


def test_unreadable_workspace_is_a_usage_error(tmp_path, fake_docker):
    fake_docker.mode("nothing")
    ws = _ws(tmp_path / "w")
    target = ws / EX1.dir / EX1.file
    target.chmod(0o600)
    with pytest.raises(Exception, match="chmod -R o\\+rX"):
        DockerSandbox("x").run_check(EX1, ws, seed=7, device="cpu")


# -------------------------------------------------------------------------------------------------
# Choosing docker: a stale or missing image is never used


@pytest.fixture
def image_is(monkeypatch):
    from lumen_ex.image import engine
    from lumen_ex.image import tag as image

    def set_state(state: str):
        content = image.content_hash()

        def labels(ref):
            if state == "no-engine":
                return "no-engine", {"reason": "Cannot connect to the Docker daemon"}
            if state == "missing" or ref != image.default_ref(content):
                return "missing", {}
            return "present", {image.CONTENT_LABEL: content if state == "current" else "0" * 64}

        monkeypatch.setattr(engine, "image_labels", labels)
        monkeypatch.setattr(engine, "docker_binary", lambda: "/usr/bin/docker")
        monkeypatch.delenv(image.IMAGE_ENV, raising=False)
    return set_state


def test_tag_is_version_and_content_hash(tmp_path):
    from lumen_ex import __version__
    from lumen_ex.image import tag as image

    files = image.package_files()
    assert any(name.startswith("lumen_ex/graders/") for name in files)
    assert "lumen_ex/exercises/01-attention/reference.py" in files
    assert "lumen_ex/sandbox/inside/worker.py" in files and "lumen_ex/sandbox/container.py" in files
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in files)
    tag = image.image_tag()
    assert tag.startswith(f"{__version__}-") and len(tag.split("-")[-1]) == 12
    # Change one hidden test (in a copy) and the hash, hence the tag, changes.
    copy = dict(files)
    name = next(n for n in files if n.startswith("lumen_ex/graders/"))
    changed = tmp_path / "changed.py"
    changed.write_bytes(files[name].read_bytes() + b"\n# edited\n")
    copy[name] = changed
    assert image.content_hash(copy) != image.content_hash(files)


@pytest.mark.parametrize("state", ["missing", "stale"])
def test_docker_with_a_stale_or_missing_image_exits_3_with_the_build_command(image_is, state):
    from lumen_ex.sandbox.select import select_backend

    image_is(state)
    with pytest.raises(SandboxUnavailable) as info:
        select_backend("docker")
    assert info.value.exit_code == 3
    assert "lumen-ex image build" in str(info.value)
    assert state in str(info.value) or "not built" in str(info.value) or "other lumen-ex files" in str(info.value)


@pytest.mark.parametrize("state", ["missing", "stale", "no-engine"])
def test_auto_falls_back_with_a_note(image_is, state):
    from lumen_ex.sandbox.bwrap import BwrapLauncher
    from lumen_ex.sandbox.select import select_backend

    image_is(state)
    launcher, note = select_backend("auto")
    assert not isinstance(launcher, DockerSandbox)
    if BwrapLauncher.availability().ok:
        assert isinstance(launcher, BwrapLauncher)
    if state != "no-engine":
        assert "lumen-ex image build" in note


def test_auto_picks_docker_when_the_current_image_is_there(image_is):
    from lumen_ex.sandbox.select import select_backend

    image_is("current")
    launcher, note = select_backend("auto")
    assert isinstance(launcher, DockerSandbox) and note == ""


def test_cli_missing_image_exits_3(tmp_path):
    ws = _ws(tmp_path)
    env = dict(os.environ, LUMEN_EX_IMAGE="lumen-ex-grader:no-such-tag-for-tests", NO_COLOR="1")
    proc = subprocess.run([LUMEN_EX, "check", "1", "--sandbox", "docker", "--workspace", str(ws)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "docker sandbox unavailable" in proc.stderr


# -------------------------------------------------------------------------------------------------
# Real runs (need the engine and the image)

STUBS = Path(catalog.exercises_root())


def _grade(tmp_path, exercise: int, source, sandbox: str, seed: int = 1234) -> RunResult:
    ws = _ws(tmp_path, exercise, source)
    result = run_check(exercise, workspace=ws, sandbox=sandbox, seed=seed, device="cpu", record=False)
    if sandbox == "docker":
        assert containers_of_workspace(ws) == [], "a container was left behind"
    return result


def _has_suite(exercise: int) -> bool:
    return any(catalog.load().find(exercise).suite_dir.glob("test_*.py"))


@pytest.mark.parametrize("exercise", [1, 2, 14])
@pytest.mark.slow
@needs_docker
def test_reference_passes_identically_under_docker_and_bwrap(tmp_path, exercise):
    """Exercise 14 too: the image has Triton when it is installed here (its interpreter and its compile
    for a GPU, both inside the container)."""
    if catalog.load().find(exercise).missing():
        pytest.skip(catalog.load().find(exercise).missing())
    if not _has_suite(exercise):
        pytest.skip(f"exercise {exercise} has no hidden suite yet")
    ex = catalog.load().find(exercise)
    in_docker = _grade(tmp_path / "d", exercise, ex.reference_path, "docker", seed=4242)
    assert in_docker.status is Status.PASS, in_docker.message
    assert in_docker.sandbox.backend == "docker" and in_docker.sandbox.isolated
    on_host = _grade(tmp_path / "h", exercise, ex.reference_path, best_sandbox(), seed=4242)
    assert on_host.status is Status.PASS, on_host.message
    assert summary(in_docker) == summary(on_host)
    docs = [r.to_dict() for r in (in_docker, on_host)]       # as documents (scores rounded alike)
    assert [(d["score"], d["max_score"], d["seed"], d["status"]) for d in docs] == [(d["score"], d["max_score"], 4242, "pass") for d in docs[::-1]]


@pytest.mark.parametrize("exercise", [1, 2])
@needs_docker
@pytest.mark.slow
def test_stub_fails_under_docker(tmp_path, exercise):
    if not _has_suite(exercise):
        pytest.skip(f"exercise {exercise} has no hidden suite yet")
    result = _grade(tmp_path, exercise, None, "docker")
    assert result.status is Status.FAIL and result.exit_code() == 1
    assert result.score < result.max_score
    assert "not implemented" in json.dumps(result.to_dict())


PROBE = textwrap.dedent('''
    import glob, json, os

    def _facts():
        status = open("/proc/self/status").read()
        field = lambda name: status.split(name + ":")[1].split()[0]
        def can_read(path):
            try:
                open(path, "rb").read(1)
                return True
            except OSError:
                return False
        import torch
        site = os.path.dirname(os.path.dirname(torch.__file__))
        lumen = os.path.join(site, "lumen_ex")
        procs = [d for d in glob.glob("/proc/[0-9]*") if int(d.split("/")[-1]) != os.getpid()]
        cmdlines = []
        for d in procs:
            try:
                cmdlines.append(open(d + "/cmdline").read().replace("\\0", " "))
            except OSError:
                pass
        return {"uid": os.getuid(), "euid": os.geteuid(), "groups": os.getgroups(),
                "cap_eff": int(field("CapEff"), 16), "cap_prm": int(field("CapPrm"), 16),
                "no_new_privs": field("NoNewPrivs"), "seccomp": field("Seccomp"),
                "read_suite": can_read(os.path.join(lumen, "graders", "attention", "test_attention.py")),
                "read_reference": can_read(os.path.join(lumen, "reference", "attention.py")),
                "read_harness": can_read(os.path.join(lumen, "harness", "client.py")),
                "read_worker": can_read(os.path.join(lumen, "sandbox", "inside", "worker.py")),
                "read_record": any(can_read(p) for p in glob.glob(os.path.join(site, "lumen_ex-*.dist-info", "RECORD"))),
                "enter_results": os.access("/results", os.X_OK),
                "other_environs": [d for d in procs if can_read(d + "/environ")],
                "cmdlines": cmdlines, "env": sorted(os.environ)}

    def scaled_dot_product_attention(q, k, v, mask=None):
        print("FACTS" + json.dumps(_facts()))
        raise RuntimeError("probe")

    def causal_mask(L_q, L_k=None, device=None):
        raise RuntimeError("probe")
''')


@needs_docker
@pytest.mark.slow
def test_isolation_inside_the_container(tmp_path):
    result = _grade(tmp_path, 1, PROBE, "docker", seed=987654321)
    assert result.status is Status.FAIL
    output = next(t.output for t in result.tests if "FACTS" in t.output)
    facts = json.loads(output.split("FACTS", 1)[1].splitlines()[0])
    assert facts["uid"] == facts["euid"] == 61001 and facts["groups"] == []
    assert facts["cap_eff"] == facts["cap_prm"] == 0
    assert facts["no_new_privs"] == "1" and facts["seccomp"] == "2"
    assert facts["read_worker"]
    assert not any(facts[k] for k in ("read_suite", "read_reference", "read_harness", "read_record", "enter_results"))
    assert facts["other_environs"] == []
    assert any("lumen-ex-container" in c for c in facts["cmdlines"])         # it does see the harness ...
    assert not any("987654321" in c for c in facts["cmdlines"])        # ... but not the seed
    assert set(facts["env"]) <= {"PATH", "HOME", "LANG", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                 "PYTHONHASHSEED", "PYTHONUNBUFFERED", "LC_CTYPE"}


HANG = "import time\nwhile True:\n    time.sleep(0.1)\n"

# At import: a process of its own that spins on the CPU this one is moved to, then an endless loop
# beside it. Half of the loop's wall time is spent waiting for that CPU.
SHARED_CPU_LOOP = textwrap.dedent('''
    import os
    _cpu = {min(os.sched_getaffinity(0))}
    os.sched_setaffinity(0, _cpu)
    if os.fork() == 0:
        while True:
            pass
    while True:
        pass
''')


@needs_docker
@pytest.mark.slow
def test_inside_the_container_a_calls_limit_leaves_out_its_wait_for_a_cpu(tmp_path):
    """The harness inside the container reads the learner's process (another user) as it does on the
    host (src/lumen_ex/harness/deadline.py): an endless loop at import that shares its CPU with a
    spinning process of its own runs out of time after 10 s of its own time, and its message states
    the wait it was given on top; every test is that timeout. It takes 20 to 30 s (the loop's 10 s
    of its own time, at half a CPU or less, to at most three times the limit): the wait is the point."""
    result = _grade(tmp_path, 1, SHARED_CPU_LOOP, "docker")
    graded = [t for t in result.tests if t.status is not Status.SKIPPED]
    assert graded and all(t.status is Status.TIMEOUT for t in graded), summary(result)
    waited = re.search(r"within 10 s of its own time \(it also waited ([0-9.]+) s for a CPU", graded[0].message)
    assert waited and float(waited.group(1)) > 1.0, graded[0].message


@needs_docker
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.slow
def test_ctrl_c_on_the_cli_leaves_no_container(tmp_path, signum):
    ws = _ws(tmp_path, 1, HANG)
    proc = subprocess.Popen([LUMEN_EX, "check", "1", "--sandbox", "docker", "--workspace", str(ws)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    try:
        assert wait_until(lambda: containers_of_workspace(ws), timeout=60), "the container never started"
        time.sleep(1)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert containers_of_workspace(ws) == []
