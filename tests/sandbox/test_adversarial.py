"""Resource and escape attacks, run for real under docker AND bwrap.

Each case below is a real hostile submission for exercise 1, graded through ``run_check`` exactly
as ``lumen-ex check`` grades it. Whatever the attack does, it must end with:

- the submission failing (or erroring), never passing, scored below the maximum;
- the grader intact: the result comes from the harness (under docker: a valid result document,
  not the host's "no document" error), and no test is blamed on the grader;
- nothing left behind: no process the attack started (each one names itself with a token), no
  container (``docker ps -a`` filtered by this workspace), the workspace, the host's /tmp and home
  folder unchanged, and a secret set in this process's environment nowhere in the result.

The same cases run under both backends (docker skips, with the reason, where the engine or the
image is missing). Then every attack of tests/corpus/hostile (written for bwrap by
tests/sandbox/test_hostile.py) is graded once more under docker. The count of attacks is printed at the end.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import CORPUS, requires_bwrap, tree_hash, workspace_with
from docker_support import containers_of_workspace, docker_param, live_processes_with, needs_docker, wait_until

from lumen_ex.core import catalog
from lumen_ex.core.results import RunResult, Status
from lumen_ex.harness.check import run_check

EXERCISE = catalog.load().find(1)
LIMITS = EXERCISE.limits
BACKENDS = [docker_param("docker"), pytest.param("bwrap", marks=requires_bwrap, id="bwrap")]

# Every attack starts by naming its process (and so every process it forks) with the token, so
# that survivors can be found on the host, inside containers too.
PRELUDE = '''\
import ctypes, json, os, socket, sys, time
TOKEN = "@TOKEN@"
def _name():
    ctypes.CDLL(None).prctl(15, TOKEN.encode(), 0, 0, 0)   # PR_SET_NAME
_name()
'''
WRONG_FUNCTIONS = '''
import torch

def scaled_dot_product_attention(q, k, v, mask=None):
    w = torch.full((*q.shape[:-1], k.shape[-2]), 1.0 / k.shape[-2], dtype=q.dtype)
    return w @ v, w

def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device)
'''

ATTACKS: dict[str, str] = {
    # Allocate and touch twice the memory limit, 64 MB at a time.
    "memory_bomb": '''
chunks, got = [], 0
try:
    for _ in range(@MEMORY_MB@ * 2 // 64):
        chunks.append(bytearray(64 << 20))      # zero-filled, so every page is touched
        got += 64
except MemoryError:
    pass
raise RuntimeError(f"memory bomb stopped at {got} MB")
''',
    # The same, spread over processes that each stay under a per-process limit.
    "memory_bomb_processes": '''
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        _name()
        hold = [bytearray(64 << 20) for _ in range(@MEMORY_MB@ * 6 // 10 // 64)]
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
raise RuntimeError("memory bomb processes ended")
''',
    # Every process forks for ever; the worker itself reports how many forks it got.
    "fork_bomb": '''
forks = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        _name()
        while True:
            try:
                if os.fork() == 0:
                    _name()
            except OSError:
                time.sleep(0.02)
    forks += 1
raise RuntimeError(f"fork bomb stopped after {forks} forks")
''',
    # Fill /tmp with 8 MB files until the disk is full, then try every other place.
    "disk_fill": '''
written, n, err = 0, 0, ""
try:
    while written < (1 << 30):
        with open(f"/tmp/fill-{n}", "wb") as f:
            for _ in range(8):
                f.write(b"x" * (1 << 20))
                written += 1 << 20
        n += 1
except OSError as exc:
    err = exc.strerror
report = {"tmp_mb": written >> 20, "tmp": err}
here = os.path.dirname(os.path.abspath(__file__))
for path in ("/fill", "/usr/fill", "/opt/fill", "/var/fill", "/etc/fill", os.path.join(here, "fill")):
    try:
        with open(path, "wb") as f:
            f.write(b"x" * (1 << 20))
        report[path] = "WROTE"
    except OSError as exc:
        report[path] = exc.errno
raise RuntimeError("REPORT" + json.dumps(report, separators=(",", ":")))
''',
    # 300 MB on stdout and stderr in the first call, then wrong answers.
    "output_flood": '''
_flooded = False
def _flood():
    global _flooded
    if not _flooded:
        _flooded = True
        line = "x" * (1 << 20) + "\\n"
        for i in range(300):
            (sys.stdout if i % 2 else sys.stderr).write(line)
        sys.stdout.flush()
''' + WRONG_FUNCTIONS.replace("def scaled_dot_product_attention(q, k, v, mask=None):\n",
                               "def scaled_dot_product_attention(q, k, v, mask=None):\n    _flood()\n"),
    # Connect to a listener on the host's loopback (and the docker bridge), and to an outside name.
    "network": '''
report = {}
for host, port in (("127.0.0.1", @PORT@), ("172.17.0.1", @PORT@), ("@HOST_IP@", @PORT@),
                   ("example.com", 80), ("1.1.1.1", 53)):
    try:
        socket.create_connection((host, port), timeout=3).close()
        report[host] = "CONNECTED"
    except OSError as exc:
        report[host] = type(exc).__name__
try:
    socket.getaddrinfo("example.com", 80)
    report["dns"] = "RESOLVED"
except OSError as exc:
    report["dns"] = type(exc).__name__
raise RuntimeError("REPORT" + json.dumps(report, separators=(",", ":")))
''',
    # Write to the host's /tmp and home folder, the workspace and the other exercise's file.
    "write_outside": '''
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
report = {}
for path in ("/tmp/" + TOKEN, "@HOST_HOME@/" + TOKEN, os.path.join(root, TOKEN),
             os.path.abspath(__file__), os.path.join(root, "02-kv-cache", "kv_cache.py"),
             os.path.join(root, ".lumen-ex", "progress.json"), os.path.join(root, "lumen-ex.toml")):
    try:
        with open(path, "a") as f:
            f.write("tampered")
        report[path[-24:]] = "WROTE"
    except OSError as exc:
        report[path[-24:]] = exc.errno
raise RuntimeError("REPORT" + json.dumps(report, separators=(",", ":")))
''',
    # Look for the host's secret everywhere a process can look, print all of it, report the hits.
    "read_secret_env": '''
def _dump():
    seen = dict(os.environ)
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        for what in ("environ", "cmdline"):
            try:
                seen[f"/proc/{pid}/{what}"] = open(f"/proc/{pid}/{what}", "rb").read().decode(errors="replace")
            except OSError:
                pass
    print(json.dumps(seen))
    return [k for k, v in seen.items() if "LUMEN_TEST_SECRET" in k or "LUMEN_TEST_SECRET" in v]

def scaled_dot_product_attention(q, k, v, mask=None):
    raise RuntimeError("REPORT" + json.dumps({"hits": _dump()}))

def causal_mask(L_q, L_k=None, device=None):
    raise RuntimeError("REPORT" + json.dumps({"hits": _dump()}))
''',
}


@dataclass
class Attack:
    name: str
    backend: str
    result: RunResult
    seconds: float
    report: dict
    before: dict[str, str]
    after: dict[str, str]


LEDGER: list[Attack] = []


@pytest.fixture(scope="module", autouse=True)
def attack_count(request):
    """Print how many attacks ran, per backend, and whether any got through."""
    yield
    if not LEDGER:
        return
    per = {}
    for a in LEDGER:
        per[a.backend] = per.get(a.backend, 0) + 1
    through = [f"{a.name}@{a.backend}" for a in LEDGER if a.result.status is Status.PASS]
    line = (f"adversarial suite: {len({a.name for a in LEDGER})} attacks, {len(LEDGER)} graded runs "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(per.items()))}), "
            f"{len(through)} got through{': ' + ', '.join(through) if through else ''}")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        if reporter is not None:
            reporter.write("\n")
            reporter.write_line(line)
        else:
            print(line)


@pytest.fixture
def secret_env(monkeypatch):
    """A secret in this process's environment, as an LMS token would be on a grading server."""
    name = f"LUMEN_TEST_SECRET_{secrets.token_hex(4).upper()}"
    value = f"s3cr3t-{secrets.token_hex(16)}"
    monkeypatch.setenv(name, value)
    return name, value


def host_ip() -> str:
    """An address of this host other than loopback (where the host has one)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


class Listener:
    """A TCP listener on every host address, counting the connections it accepts."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self):
        self.stop.set()
        self.thread.join(timeout=2)
        self.sock.close()


def attack(tmp_path: Path, name: str, backend: str, source: str, *, secret: tuple[str, str]) -> Attack:
    """Grade one attack for real and check everything that must hold after any attack."""
    token = "lx" + secrets.token_hex(5)                 # 12 characters: fits a process name
    home = Path.home()
    host_files = [Path("/tmp") / token, home / token]
    listener = Listener()
    try:
        code = (PRELUDE + source).replace("@TOKEN@", token).replace("@MEMORY_MB@", str(LIMITS.memory_mb))
        code = code.replace("@PORT@", str(listener.port)).replace("@HOST_IP@", host_ip())
        code = code.replace("@HOST_HOME@", str(home))
        root = workspace_with(tmp_path / f"{name}-{backend}", 1, code)
        before = tree_hash(root)
        started = time.monotonic()
        result = run_check(1, workspace=root, sandbox=backend, seed=1234, device="cpu", record=False)
        seconds = time.monotonic() - started
        survivors_gone = wait_until(lambda: not live_processes_with(token), timeout=10)
        accepted = listener.accepted
    finally:
        listener.close()
    record = Attack(name, backend, result, seconds, _report(result), before, tree_hash(root))
    LEDGER.append(record)
    text = result.to_json()
    assert result.status in (Status.FAIL, Status.ERROR), f"{name} PASSED under {backend}:\n{_describe(result)}"
    assert result.score < result.max_score
    assert result.sandbox.backend == backend
    assert len(result.tests) > 1, f"the grader itself did not survive {name} under {backend}:\n{_describe(result)}"
    assert not [t.id for t in result.tests if t.diagnosis and t.diagnosis.kind == "grader"], _describe(result)
    assert survivors_gone, f"processes of {name} outlived the check under {backend}: {live_processes_with(token)}"
    if backend == "docker":
        assert containers_of_workspace(root) == [], "a container was left behind"
    assert record.before == record.after, f"{name} changed the workspace under {backend}"
    for path in host_files:
        assert not path.exists(), f"{name} wrote {path} on the host under {backend}"
    assert accepted == 0, f"{name} reached a listener on the host under {backend}"
    assert secret[1] not in text, f"the host's secret reached the result under {backend}"
    return record


def _report(result: RunResult) -> dict:
    for t in result.tests:
        text = t.diagnosis.summary if t.diagnosis else ""
        m = re.search(r"REPORT(\{.*\})", text)
        if m:
            try:
                return json.loads(m.group(1))
            except ValueError:
                return {"unparsed": m.group(1)}
    return {}


def _describe(result: RunResult) -> str:
    lines = [f"status={result.status.value} score={result.score}/{result.max_score} ({result.message})"]
    for t in result.tests[:8]:
        why = f"{t.diagnosis.kind}: {t.diagnosis.summary[:200]}" if t.diagnosis else ""
        lines.append(f"  {t.status.value:8} {t.id} {why}")
    return "\n".join(lines)


def _first_message(result: RunResult) -> str:
    return next((t.diagnosis.summary for t in result.tests if t.diagnosis), "")


# -------------------------------------------------------------------------------------------------
# The cases


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_bomb(tmp_path, backend, secret_env):
    run = attack(tmp_path, "memory_bomb", backend, ATTACKS["memory_bomb"], secret=secret_env)
    message = _first_message(run.result)
    stopped = re.search(r"memory bomb stopped at (\d+) MB", message)
    if stopped:                                    # the allocation was refused (RLIMIT_AS)
        assert int(stopped.group(1)) <= LIMITS.memory_mb, message
    else:                                          # or the worker was killed (cgroup / container OOM)
        assert "out of memory" in message or "SIGKILL" in message, message


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_bomb_across_processes(tmp_path, backend, secret_env):
    run = attack(tmp_path, "memory_bomb_processes", backend, ATTACKS["memory_bomb_processes"], secret=secret_env)
    assert run.seconds < 120


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_fork_bomb(tmp_path, backend, secret_env):
    run = attack(tmp_path, "fork_bomb", backend, ATTACKS["fork_bomb"], secret=secret_env)
    message = _first_message(run.result)
    forks = re.search(r"stopped after (\d+) forks", message)
    if forks:
        assert int(forks.group(1)) < LIMITS.processes + 64, message


@pytest.mark.parametrize("backend", BACKENDS)
def test_disk_fill(tmp_path, backend, secret_env):
    run = attack(tmp_path, "disk_fill", backend, ATTACKS["disk_fill"], secret=secret_env)
    report = run.report
    assert report, _describe(run.result)
    assert report["tmp_mb"] <= LIMITS.tmp_mb + 8 and report["tmp"], report
    assert "WROTE" not in report.values(), report


@pytest.mark.parametrize("backend", BACKENDS)
def test_output_flood(tmp_path, backend, secret_env):
    run = attack(tmp_path, "output_flood", backend, ATTACKS["output_flood"], secret=secret_env)
    assert run.seconds < 90, f"300 MB of output blocked the check for {run.seconds:.0f} s"
    outputs = [t.output for t in run.result.tests]
    assert max(len(o) for o in outputs) <= 8192 + 200, "the output was not capped"
    assert any(o.startswith("x" * 4096) for o in outputs), "the flood was not captured at all"


@pytest.mark.parametrize("backend", BACKENDS)
def test_network(tmp_path, backend, secret_env):
    run = attack(tmp_path, "network", backend, ATTACKS["network"], secret=secret_env)
    assert run.report, _describe(run.result)
    assert "CONNECTED" not in run.report.values() and run.report.get("dns") != "RESOLVED", run.report


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_outside(tmp_path, backend, secret_env):
    run = attack(tmp_path, "write_outside", backend, ATTACKS["write_outside"], secret=secret_env)
    assert run.report, _describe(run.result)
    # Only the sandbox's private /tmp may take a write.
    wrote = [k for k, v in run.report.items() if v == "WROTE"]
    assert all(k.startswith("/tmp/") for k in wrote), run.report


@pytest.mark.parametrize("backend", BACKENDS)
def test_secret_env(tmp_path, backend, secret_env):
    run = attack(tmp_path, "read_secret_env", backend, ATTACKS["read_secret_env"], secret=secret_env)
    assert run.report == {"hits": []}, run.report
    assert any('"HOME": "/tmp"' in t.output for t in run.result.tests), "the dump was not captured"


# -------------------------------------------------------------------------------------------------
# The hostile corpus (tests/corpus/hostile, graded under bwrap by tests/sandbox/test_hostile.py), under docker

HOSTILE = sorted((CORPUS / "hostile").glob("*.py"))
MARKER = "LUMEN-HOSTILE-MARKER"
SELECT = {"frame_gc_search": "test_values or test_mask or test_causal_mask"}


@needs_docker
@pytest.mark.parametrize("path", HOSTILE, ids=[p.stem for p in HOSTILE])
def test_hostile_corpus_under_docker(tmp_path, path, secret_env):
    marker = f"lumen-hostile-{secrets.token_hex(8)}"
    root = workspace_with(tmp_path, 1, path.read_text().replace(MARKER, marker))
    before = tree_hash(root)
    started = time.monotonic()
    result = run_check(1, workspace=root, sandbox="docker", seed=1234, device="cpu", record=False,
                       select=SELECT.get(path.stem))
    LEDGER.append(Attack(f"hostile/{path.stem}", "docker", result, time.monotonic() - started, {},
                         before, tree_hash(root)))
    assert result.status in (Status.FAIL, Status.ERROR), f"{path.stem} PASSED under docker:\n{_describe(result)}"
    assert result.score < result.max_score
    assert len(result.tests) > 1, _describe(result)
    assert not [t.id for t in result.tests if t.diagnosis and t.diagnosis.kind == "grader"], _describe(result)
    assert tree_hash(root) == before, "the workspace changed"
    assert containers_of_workspace(root) == []
    assert wait_until(lambda: not live_processes_with(marker), timeout=10), "a process outlived the check"
    assert secret_env[1] not in result.to_json()
    output = "".join(t.output for t in result.tests)
    if path.stem == "probe_hidden_files":
        assert "PROBE found 0" in output, output[:2000]
    if path.stem == "write_result_files":
        assert not re.search(r"^WROTE /(workspace|results)", output, re.M), output[:2000]
