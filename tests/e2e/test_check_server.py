"""A repeated `lumen-ex check` in the terminal is answered warm by the learner's own background server.

Everything runs for real: the installed command, the server it starts (src/lumen_ex/learner/check_server.py),
its sandboxed workers. Each test gets a runtime folder of its own (XDG_RUNTIME_DIR) and stops every
server it started. What is shown:

- (every check names bwrap: where the grader image is built, `auto` means docker, which is never warm)
- the first check is cold and starts the server; the next one is answered by it (its log says so)
  and prints exactly what a cold check with the same seed prints, and records the same progress;
- the server serves one workspace, this lumen-ex and these exercises by content: another workspace,
  an edited pack or another sandbox names another server (the key), so none is asked for what it
  was not started for;
- it serves only its own user: a runtime folder open to others is never used, and a connection from
  another uid (made possible here on purpose) gets no answer;
- it stops when idle, and on request; with LUMEN_EX_CHECK_SERVER=off or in CI no server is started.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import REFERENCES, pack_copy, requires_bwrap
from docker_support import containers, needs_docker
from helpers.cli import normalise, run, server_env, server_log
from proc_support import running_with, still_running, wait_until

from lumen_ex.core.workspace import Workspace
from lumen_ex.learner import check_server

NO_SCALE = REFERENCES["attention"].read_text().replace("/ math.sqrt(d_k)", "")


@pytest.fixture
def runtime():
    """A private runtime folder for this test's servers (in /tmp: its parents are open to other
    users, as a real /run/user is); every server in it is stopped at the end."""
    folder = Path(tempfile.mkdtemp(prefix="lumen-ex-test-run-"))
    yield folder
    _stop_all(folder)
    shutil.rmtree(folder, ignore_errors=True)


def _stop_all(folder: Path) -> None:
    check_server.stop_all(folder / "lumen-ex")
    _wait_gone(folder)


def _wait_gone(folder: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while list((folder / "lumen-ex").glob("*.sock")) if (folder / "lumen-ex").is_dir() else []:
        assert time.monotonic() < deadline, "a server did not stop"
        time.sleep(0.1)


def wait_for(predicate, timeout: float = 120, why=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out {why()}"
        time.sleep(0.1)


def init(tmp_path: Path, name: str = "ws") -> Path:
    proc = run(["init", name], tmp_path)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / name


def _record(proc) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def _without_durations(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "duration"} | {
        "tests": [{k: v for k, v in t.items() if k != "duration"} for t in record["tests"]]}


@requires_bwrap
@pytest.mark.slow
def test_the_second_check_is_warm_and_prints_what_a_cold_one_prints(tmp_path, runtime):
    """Over 30 s: eight real `lumen-ex check` commands, two of them cold, and the server's start."""
    ws = init(tmp_path)
    (ws / "01-attention" / "attention.py").write_text(NO_SCALE)
    env = server_env(runtime)
    first = run(["check", "1", "--sandbox", "bwrap", "--seed", "7"], ws / "01-attention", env)
    assert first.returncode == 1, first.stdout + first.stderr
    wait_for(lambda: "serving" in server_log(runtime))              # started by the cold check, in the background
    assert "checked" not in server_log(runtime)

    warm = run(["check", "1", "--sandbox", "bwrap", "--seed", "7"], ws / "01-attention", env)
    assert re.search(r"checked 01-attention seed 7: fail", server_log(runtime)), server_log(runtime)
    assert warm.returncode == 1 and warm.stderr == first.stderr
    assert normalise(warm.stdout, tmp_path) == normalise(first.stdout, tmp_path)

    # The same record as a cold check's, the same progress recorded, and a fresh seed when none is given.
    cold_json = run(["check", "1", "--sandbox", "bwrap", "--seed", "8", "--format", "json"], ws / "01-attention",
                    {**env, check_server.SWITCH_ENV: "off"})
    warm_json = run(["check", "1", "--sandbox", "bwrap", "--seed", "8", "--format", "json"], ws / "01-attention", env)
    assert _without_durations(_record(warm_json)) == _without_durations(_record(cold_json))
    progress = Workspace.find(ws).progress()["exercises"]["attention"]
    assert progress["checks"] == 4 and progress["last_status"] == "fail"     # two cold checks, two warm
    seeds = {json.loads(run(["check", "1", "--sandbox", "bwrap", "--format", "json"], ws / "01-attention", env).stdout)["seed"]
             for _ in range(2)}
    assert len(seeds) == 2

    # Another exercise of the same workspace: the server moves to it (one session at a time), its
    # workers forked from the same zygote (src/lumen_ex/learner/prewarm.py SharedLauncher: no torch
    # import of its own), and its record is a cold check's.
    zygotes = _zygotes(ws)
    assert len(zygotes) == 1, zygotes
    other = ["check", "2", "--sandbox", "bwrap", "--seed", "8", "--format", "json"]
    warm_other = run(other, ws / "02-kv-cache", env)
    assert re.search(r"checked 02-kv-cache seed 8: fail", server_log(runtime))
    assert _zygotes(ws) == zygotes and still_running(zygotes)
    cold_other = run(other, ws / "02-kv-cache", {**env, check_server.SWITCH_ENV: "off"})
    assert _without_durations(_record(warm_other)) == _without_durations(_record(cold_other))
    assert len(list((runtime / "lumen-ex").glob("*.sock"))) == 1


def _zygotes(ws: Path) -> list:
    """The zygotes of the server of ``ws`` (its command line names the workspace)."""
    servers = [p for p in running_with("lumen_ex.learner.warm_server") if p.shows(str(ws))]
    assert len(servers) == 1, servers
    # the server's own child (bwrap, or the shell that stages its binds), not the python inside it
    # nor the workers it forks, whose command lines name zygote.py too
    return [p for p in running_with("zygote.py") if p.ppid == servers[0].pid]


@requires_bwrap
@pytest.mark.slow
def test_a_save_is_graded_at_once_and_the_next_check_of_those_bytes_is_answered_with_it(tmp_path, runtime):
    """The server grades a save before it is asked (src/lumen_ex/learner/warm_server.py ``Early``):
    the next check that names no seed gets that grading, once, if the file still holds those bytes.
    About 10 s: eleven real checks, two of them cold."""
    ws = init(tmp_path)
    target, here = ws / "01-attention" / "attention.py", ws / "01-attention"
    env = server_env(runtime)
    check = ["check", "1", "--sandbox", "bwrap", "--format", "json"]
    assert run(check, here, env).returncode == 1                 # the stub, cold: starts the server
    wait_for(lambda: "watching" in server_log(runtime))

    target.write_text(NO_SCALE)
    wait_for(lambda: "graded the save" in server_log(runtime), why=lambda: server_log(runtime))
    assert Workspace.find(ws).progress()["exercises"]["attention"]["checks"] == 1   # not recorded until asked for
    warm = _record(run(check, here, env))
    assert server_log(runtime).count("graded when saved") == 1, server_log(runtime)
    assert warm["status"] == "fail" and warm["source"]["sha256"] == hashlib.sha256(NO_SCALE.encode()).hexdigest()
    # The very record a cold check of the same bytes with the same seed makes, and recorded now.
    cold = _record(run([*check, "--seed", str(warm["seed"])], here, {**env, check_server.SWITCH_ENV: "off"}))
    assert _without_durations(warm) == _without_durations(cold)
    assert Workspace.find(ws).progress()["exercises"]["attention"]["checks"] == 3

    # Served once: the same bytes checked again are graded again, with a seed of their own.
    again = _record(run(check, here, env))
    assert server_log(runtime).count("graded when saved") == 1 and again["seed"] != warm["seed"]

    # A check that names its seed is graded when asked, whatever was graded on the save.
    reference = REFERENCES["attention"].read_text()
    target.write_text(reference)
    wait_for(lambda: server_log(runtime).count("graded the save") == 2, why=lambda: server_log(runtime))
    named = _record(run([*check, "--seed", "3"], here, env))
    assert named["status"] == "pass" and named["seed"] == 3 and server_log(runtime).count("graded when saved") == 1

    # Saved and checked at once, again and again: whether the save's grading is done, under way or
    # not begun, and whatever older bytes were being graded, the check grades what the file holds.
    for text, status in [(NO_SCALE, "fail"), (reference, "pass")] * 2:
        target.write_text(text)
        record = _record(run(check, here, env))
        assert (record["status"], record["source"]["sha256"]) == (status, hashlib.sha256(text.encode()).hexdigest())


@needs_docker
@pytest.mark.slow
def test_under_docker_the_second_check_is_warm_in_a_slot_that_stops_with_the_server(tmp_path, runtime):
    """A learner whose `check` uses docker (auto, once the image is built) gets the warm path too: the
    server keeps one container, its slot (src/lumen_ex/sandbox/docker_slot.py), and forks each check's
    worker in it. The output is a cold docker check's; the record too, but for how each limit was held
    (a cgroup of the harness's own for a forked worker, the container's limits for a check's own
    container) and the harness's Python (the server's, not the image's), as in `lumen-ex grade
    --sandbox docker`. The slot goes when the server does.

    Over 30 s (about 40 s in the full run): four real `lumen-ex check` commands, two of them cold
    containers, the server's start with its slot's, and the slot's removal."""
    ws = init(tmp_path)
    (ws / "01-attention" / "attention.py").write_text(NO_SCALE)
    env = server_env(runtime, **{check_server.IDLE_ENV: "20"})
    slots_before = set(containers(name="lumen-slot-"))
    args = ["check", "1", "--sandbox", "docker", "--seed", "7"]
    cold = run([*args, "--format", "json"], ws / "01-attention", env)
    assert cold.returncode == 1, cold.stdout + cold.stderr
    wait_for(lambda: "serving" in server_log(runtime))
    warm = run([*args, "--format", "json"], ws / "01-attention", env)
    assert re.search(r"checked 01-attention seed 7: fail", server_log(runtime)), server_log(runtime)
    cold_record, warm_record = json.loads(cold.stdout), json.loads(warm.stdout)
    assert warm_record["sandbox"]["limits"]["tmp"].endswith("in the slot's container; everything else read-only")
    strip = lambda d: _without_durations(d) | {   # noqa: E731
        "sandbox": {k: v for k, v in d["sandbox"].items() if k != "limits"},
        "versions": {k: v for k, v in d["versions"].items() if k != "python"}}
    assert strip(warm_record) == strip(cold_record)
    assert len(set(containers(name="lumen-slot-")) - slots_before) == 1       # the server's slot
    rich = [run(args, ws / "01-attention", server_env(runtime, **extra)) for extra in ({check_server.SWITCH_ENV: "off"}, {})]
    assert normalise(rich[1].stdout, tmp_path) == normalise(rich[0].stdout, tmp_path)
    _stop_all(runtime)
    assert wait_until(lambda: not set(containers(name="lumen-slot-")) - slots_before, 60), "the slot outlived its server"


@requires_bwrap
@pytest.mark.slow
def test_a_server_removes_what_killed_ones_left_of_their_sandboxes(tmp_path, runtime):
    """A server killed with SIGKILL cannot remove its zygote's bwrap stage or its docker slot's
    folder; the next server does, when their owner is gone (src/lumen_ex/sandbox/leftovers.py)."""
    from lumen_ex.sandbox import leftovers

    ws, tmp = init(tmp_path), tmp_path / "tmp"
    gone = subprocess.Popen(["true"])
    gone.wait()
    slot = tmp / f"{leftovers.SLOT_PREFIX}{gone.pid}-killed"
    (slot / "control").mkdir(parents=True)
    (slot / "seccomp.json").write_text("{}")
    mine = tmp / f"{leftovers.SLOT_PREFIX}{os.getpid()}-alive"    # this test's process runs: kept
    mine.mkdir()
    run(["check", "1", "--sandbox", "bwrap"], ws / "01-attention", server_env(runtime, TMPDIR=str(tmp)))
    wait_for(lambda: "serving" in server_log(runtime))
    wait_for(lambda: not slot.exists())
    assert mine.exists() and f"removed {slot.name}" in server_log(runtime)


@requires_bwrap
@pytest.mark.slow
def test_no_server_when_turned_off_or_in_ci_and_it_stops_when_idle(tmp_path, runtime):
    ws = init(tmp_path)
    for extra in ({check_server.SWITCH_ENV: "off"}, {"CI": "true"}):
        assert run(["check", "1", "--sandbox", "bwrap"], ws / "01-attention", server_env(runtime, **extra)).returncode == 1
        assert not (runtime / "lumen-ex").exists() or not list((runtime / "lumen-ex").iterdir())
    run(["check", "1", "--sandbox", "bwrap"], ws / "01-attention", server_env(runtime, **{check_server.IDLE_ENV: "3"}))
    wait_for(lambda: "serving" in server_log(runtime))
    wait_for(lambda: "stopped" in server_log(runtime), timeout=90)   # no check came: it stopped by itself
    _wait_gone(runtime)


def test_a_server_is_for_one_workspace_sandbox_and_set_of_exercises_by_content(tmp_path, monkeypatch):
    a, b = init(tmp_path, "a"), init(tmp_path, "b")
    key = check_server.server_key(a, "bwrap", "auto")
    assert key == check_server.server_key(a, "bwrap", "auto")
    assert key != check_server.server_key(b, "bwrap", "auto")
    assert key != check_server.server_key(a, "none", "auto")
    assert key != check_server.server_key(a, "bwrap", "cpu")
    pack = pack_copy(tmp_path)
    monkeypatch.setenv("LUMEN_EX_PATH", str(pack))
    with_pack = check_server.server_key(a, "bwrap", "auto")
    assert with_pack != key                                   # another pack in use
    suite = next(pack.glob("01-*/suite/*.py"))
    suite.write_text(suite.read_text() + "\n# edited, same version\n")
    assert check_server.server_key(a, "bwrap", "auto") != with_pack   # an edit, with no version bump


def test_a_runtime_folder_that_others_can_open_is_never_used(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = check_server.runtime_dir(create=True)
    assert folder == tmp_path / "lumen-ex" and folder.stat().st_mode & 0o777 == 0o700
    folder.chmod(0o755)
    assert check_server.runtime_dir() is None
    folder.chmod(0o700)
    shutil.rmtree(folder)
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    folder.symlink_to(target)                                  # a link is never followed
    assert check_server.runtime_dir() is None and check_server.runtime_dir(create=True) is None


@requires_bwrap
@pytest.mark.slow
def test_another_user_gets_no_answer(tmp_path, runtime):
    """With the folder opened on purpose, a connection from uid 65534 is accepted by the kernel and
    closed by the server without a word (nor a check); the server goes on serving its own user."""
    ws = init(tmp_path)
    env = server_env(runtime)
    run(["check", "1", "--sandbox", "bwrap"], ws / "01-attention", env)
    wait_for(lambda: "serving" in server_log(runtime))
    folder = runtime / "lumen-ex"
    sock = next(folder.glob("*.sock"))
    for path in (runtime, folder, sock):
        path.chmod(0o777)
    answer_r, answer_w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the other user
        try:
            os.close(answer_r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(120)
                s.connect(str(sock))
                s.sendall(b'{"exercise": "1", "seed": 7, "note": ""}\n')
                os.write(answer_w, b"got:" + s.recv(1 << 16))
        except BaseException as exc:  # noqa: BLE001
            os.write(answer_w, f"error:{type(exc).__name__}".encode())
        finally:
            os._exit(0)
    os.close(answer_w)
    os.waitpid(pid, 0)
    said = os.read(answer_r, 1 << 16)
    # connected, then closed without an answer (a reset: the server did not even read the request)
    assert said in (b"got:", b"error:ConnectionResetError"), said
    for path in (sock, folder, runtime):
        path.chmod(0o700 if path != sock else 0o600)
    assert "checked" not in server_log(runtime)
    assert run(["check", "1", "--sandbox", "bwrap", "--seed", "7"], ws / "01-attention", env).returncode == 1
    assert "checked 01-attention seed 7" in server_log(runtime)    # its own user is still served


def test_a_server_that_polls_the_file_still_stops_when_idle(tmp_path, runtime):
    """Where inotify cannot be used the server looks at the file every poll interval: those looks
    are not checks, and it stops after its idle time all the same (src/lumen_ex/learner/warm_server.py)."""
    from lumen_ex.learner.warm_server import CheckServer

    class Polled:                      # the session's side the loop uses: no inotify, no save
        poll_interval, looks, closed = 0.02, 0, False

        def watch_fileno(self):
            return None

        def saved(self):
            self.looks += 1
            return None

        def close(self):
            self.closed = True

    folder = runtime / "lumen-ex"      # a short path: a unix socket's is at most 107 bytes
    folder.mkdir(mode=0o700)
    server = CheckServer("k" * 32, tmp_path, "bwrap", "cpu", folder)
    assert server.bind()
    session = server.session = Polled()
    started = time.monotonic()
    loop = threading.Thread(target=server.serve, kwargs={"idle_s": 0.5}, daemon=True)
    loop.start()
    loop.join(10)
    assert not loop.is_alive(), "the server did not stop when idle"
    assert time.monotonic() - started >= 0.5
    assert session.looks >= 5 and session.closed and not (folder / f"{'k' * 32}.sock").exists()
