"""Workers forked from one zygote (src/lumen_ex/sandbox/zygote.py) cannot reach each other or the zygote.

Every test here runs real attacks from a learner's module, in workers forked from one zygote (as one
grading process forks every submission's worker from its own), and then checks, from another
submission's worker forked later or alongside, that nothing got through: a process left behind, a
file left in any writable folder, a modified module, a signal or ptrace aimed at the zygote, an
abstract socket or a shared-memory segment, a keyring, a new user namespace, a worker that stops
reading its pipe. Each attack is also shown to work where it should (in the same worker, or in the
unisolated mode), so that a probe that could not fail proves nothing.

Every test runs under both zygotes: bwrap's (one per grading process) and the docker backend's, in
a grading slot's long-lived container (src/lumen_ex/sandbox/docker_slot.py), whose fallback is a fresh
worker in a container of its own.

The same guarantees for the workers bwrap starts on its own are in tests/sandbox/test_sandbox.py,
whose isolation and limit tests also run every probe in a forked worker.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from conftest import CORPORA, CORPUS, REFERENCES
from docker_support import docker_param, slot_launcher
from proc_support import descendants, read, running_with, wait_until

from lumen_ex.harness.client import WorkerFailure, WorkerPool
from lumen_ex.harness.proxy import LearnerModule
from lumen_ex.sandbox import docker, workspace_copy
from lumen_ex.sandbox import zygote as zygotes
from lumen_ex.sandbox.base import WorkerSpec
from lumen_ex.sandbox.bwrap import BwrapLauncher
from lumen_ex.sandbox.cgroups import Cgroup, Limits

pytestmark = pytest.mark.skipif(not zygotes.supported(), reason="no zygote on this machine")

ATTACKS = textwrap.dedent('''
    import ctypes, json, os, signal, socket, sys, time

    libc = ctypes.CDLL(None, use_errno=True)
    HELD = []
    FOLDERS = ("/tmp", "/dev/shm", "/dev", "/dev/mqueue", "/workspace", "/workspace/probe", "/", "/lumen", "/proc",
               "/usr", "/run/lumen", "/sys/fs/cgroup", "/opt/lumen/inside")

    def _err():
        return os.strerror(ctypes.get_errno())

    def status():
        text = open("/proc/self/status").read()
        return json.dumps({k: text.split(k + ":")[1].split()[0]
                           for k in ("CapEff", "CapPrm", "CapAmb", "CapInh", "NoNewPrivs", "Seccomp")})

    def leave_files(marker):
        out = {}
        for folder in FOLDERS:
            try:
                with open(os.path.join(folder, marker), "w") as f:
                    f.write("left by another student")
                out[folder] = "written"
            except OSError as exc:
                out[folder] = type(exc).__name__
        return json.dumps(out)

    def find_files(marker):
        return json.dumps([f for f in FOLDERS if os.path.exists(os.path.join(f, marker))])

    def leave_process(marker):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/bin/sleep", [marker, "300"])
            os._exit(0)
        time.sleep(0.3)
        return "started"

    def processes():
        return json.dumps(sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))

    def tamper():
        import torch
        torch.lumen_mark = "tampered"
        torch.matmul = lambda a, b: torch.zeros(1)
        import math
        math.pi = 3.0
        os.environ["LUMEN_TAMPERED"] = "1"
        sys.modules["lumen_tampered"] = sys
        return "tampered"

    def intact():
        import math
        import torch
        return json.dumps({"mark": hasattr(torch, "lumen_mark"),
                           "matmul": float(torch.matmul(torch.eye(2), torch.eye(2)).sum()),
                           "module": "lumen_tampered" in sys.modules, "pi": math.pi,
                           "env": "LUMEN_TAMPERED" in os.environ})

    def signal_everyone(zygote_pid):
        sent = {}
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in [-1, int(zygote_pid), *range(1, 32768)]:     # (not 0: its own group, itself)
                if pid == os.getpid():
                    continue
                try:
                    os.kill(pid, sig)
                    sent[pid] = sent.get(pid, 0) + 1
                except OSError:
                    pass
        return json.dumps(sorted(sent))

    def trace(zygote_pid):
        out = {}
        for pid in (1, os.getppid(), int(zygote_pid)):
            if libc.ptrace(16, pid, None, None) == 0:      # PTRACE_ATTACH
                out[pid] = "attached"
                libc.ptrace(17, pid, None, None)           # PTRACE_DETACH
            else:
                out[pid] = _err()
        try:
            open(f"/proc/{int(zygote_pid)}/mem", "rb").read(1)
            out["mem"] = "read"
        except OSError as exc:
            out["mem"] = type(exc).__name__
        return json.dumps(out)

    def hold_abstract(name):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\\0" + name)
        s.listen(1)
        HELD.append(s)
        return "listening"

    def reach_abstract(name):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect("\\0" + name)
            return "connected"
        except OSError as exc:
            return type(exc).__name__
        finally:
            s.close()

    def hold_shm(key):
        shmid = libc.shmget(int(key), 4096, 0o1000 | 0o666)    # IPC_CREAT
        return "created" if shmid >= 0 else _err()

    def reach_shm(key):
        return "found" if libc.shmget(int(key), 0, 0) >= 0 else _err()

    def keys_and_namespaces():
        out = {}
        r = libc.syscall(248, b"user", b"lumen-probe", b"secret", 6, -4)   # add_key to the user keyring
        out["add_key"] = "added" if r >= 0 else _err()
        r = libc.syscall(250, 0, -4, 0)                                    # keyctl(GET_KEYRING_ID, user)
        out["keyctl"] = "answered" if r >= 0 else _err()
        r = libc.syscall(272, 0x10000000)                                  # unshare(CLONE_NEWUSER)
        out["unshare_user"] = "unshared" if r == 0 else _err()
        r = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)                  # clone(CLONE_NEWUSER | SIGCHLD)
        if r == 0:
            os._exit(0)
        out["clone_user"] = "cloned" if r > 0 else _err()
        return json.dumps(out)

    def reach_control():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.connect("/run/lumen/zygote.sock")      # where a docker slot's zygote connected
            return "connected"
        except OSError as exc:
            return type(exc).__name__
        finally:
            s.close()

    def stall():
        time.sleep(3600)
''')

NAMES = ["status", "leave_files", "find_files", "leave_process", "processes", "tamper", "intact",
         "signal_everyone", "trace", "hold_abstract", "reach_abstract", "hold_shm", "reach_shm",
         "keys_and_namespaces", "reach_control", "stall"]


@pytest.fixture(scope="module", params=["bwrap", docker_param()])
def zygote(request):
    """A launcher whose workers are forked from one zygote: bwrap's, or a docker grading slot's."""
    if request.param == "bwrap":
        if not BwrapLauncher.availability().ok:
            pytest.skip(BwrapLauncher.availability().reason)
        launcher = zygotes.ZygoteLauncher(BwrapLauncher())
    else:
        launcher = slot_launcher()
    yield launcher
    launcher.close()


def fresh_backend(launcher):
    """What grades a submission without a zygote, under the same backend."""
    return BwrapLauncher() if launcher.name == "bwrap" else docker.DockerSandbox(launcher.image)


def student(tmp_path: Path, launcher, name: str, call_timeout: float = 30.0) -> LearnerModule:
    """A submission's worker: its own workspace, forked from ``launcher``'s zygote."""
    ws = tmp_path / name
    (ws / "probe").mkdir(parents=True)
    (ws / "probe" / "attack.py").write_text(ATTACKS)
    spec = WorkerSpec(workspace=ws, module_dir=ws / "probe", device="cpu", limits=Limits())
    pool = WorkerPool(launcher, spec, module="attack", functions=NAMES, call_timeout=call_timeout)
    sub = LearnerModule(pool, "cpu", "attack.py")
    sub.pool = pool
    sub.status()
    if isinstance(launcher, zygotes.ZygoteLauncher):   # never the fallback's fresh worker
        assert isinstance(pool.worker.launched.proc, zygotes.ForkedProcess)
    return sub


def _zygote_pid(launcher) -> int:
    """The pid, as the host sees it, of the python process inside the zygote's sandbox."""
    if launcher.zygote.pid is not None:
        return launcher.zygote.pid     # a slot's zygote: the kernel said who connected
    outer = launcher.zygote.proc.pid
    running = [p for p in descendants(outer).values() if b"zygote.py" in p.cmdline]
    found = [p.pid for p in running if p.ppid not in {q.pid for q in running}]    # the outermost one
    assert found, "the zygote's process was not found"
    return found[0]


# -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_forked_worker_keeps_no_capability_and_is_filtered(zygote, tmp_path):
    sub = student(tmp_path, zygote, "a")
    try:
        facts = json.loads(sub.status())
    finally:
        sub.pool.close()
    assert [int(facts[k], 16) for k in ("CapEff", "CapPrm", "CapAmb", "CapInh")] == [0, 0, 0, 0], facts
    assert facts["NoNewPrivs"] == "1" and facts["Seccomp"] == "2", facts


@pytest.mark.slow
def test_files_left_behind_reach_no_other_student(zygote, tmp_path):
    marker = f"lumen-left-{uuid.uuid4().hex}"
    first = student(tmp_path, zygote, "first")
    alongside = student(tmp_path, zygote, "alongside")   # alive at the same time
    try:
        wrote = json.loads(first.leave_files(marker))
        assert wrote["/tmp"] == "written" and wrote["/dev/shm"] == "written"   # the attack is real
        assert json.loads(first.find_files(marker)) == ["/tmp", "/dev/shm"]
        assert {f for f, r in wrote.items() if r == "written"} == {"/tmp", "/dev/shm"}, wrote
        assert json.loads(alongside.find_files(marker)) == []
    finally:
        first.pool.close()
        alongside.pool.close()
    later = student(tmp_path, zygote, "later")
    try:
        assert json.loads(later.find_files(marker)) == []
    finally:
        later.pool.close()
    assert not list(Path("/tmp").glob(marker)) and not list(Path("/dev/shm").glob(marker))   # nor the host


def test_a_process_left_behind_dies_with_its_worker(zygote, tmp_path):
    marker = f"lumen-daemon-{uuid.uuid4().hex}"
    first = student(tmp_path, zygote, "first")
    try:
        assert first.leave_process(marker) == "started"
        assert wait_until(lambda: running_with(marker), 10), "the daemon should run while its worker does"
        assert len(json.loads(first.processes())) >= 3    # init, worker, daemon: visible to itself
    finally:
        first.pool.close()
    assert wait_until(lambda: not running_with(marker), timeout=10), [str(p) for p in running_with(marker)]
    later = student(tmp_path, zygote, "later")
    try:
        assert json.loads(later.processes()) == [1, 2], "another student's worker sees only its init and itself"
    finally:
        later.pool.close()


def test_modified_modules_stay_in_their_worker(zygote, tmp_path):
    first = student(tmp_path, zygote, "first")
    try:
        assert first.tamper() == "tampered"
        assert json.loads(first.intact()) == {"mark": True, "matmul": 0.0, "module": True, "pi": 3.0,
                                              "env": True}     # the attack is real, in its own worker
        alongside = student(tmp_path, zygote, "alongside")
        try:
            assert json.loads(alongside.intact()) == {"mark": False, "matmul": 2.0, "module": False,
                                                      "pi": 3.141592653589793, "env": False}
        finally:
            alongside.pool.close()
    finally:
        first.pool.close()


def test_signals_cannot_reach_the_zygote(zygote, tmp_path):
    first = student(tmp_path, zygote, "first")
    target = _zygote_pid(zygote)
    try:
        reached = json.loads(first.signal_everyone(target))
    finally:
        first.pool.close()
    assert set(reached) <= {-1, 1}, reached    # only its own init (which ignores them) was there to signal
    assert zygote.zygote is not None and zygote.zygote.alive()
    assert read(target).state != "T", "the zygote was stopped"
    later = student(tmp_path, zygote, "later")
    try:
        assert json.loads(later.processes()) == [1, 2]
    finally:
        later.pool.close()


def test_ptrace_cannot_reach_the_zygote_or_the_init(zygote, tmp_path):
    first = student(tmp_path, zygote, "first")
    target = _zygote_pid(zygote)
    try:
        traced = json.loads(first.trace(target))
    finally:
        first.pool.close()
    assert "attached" not in traced.values(), traced
    assert traced["mem"] in ("FileNotFoundError", "PermissionError"), traced
    assert read(target).state != "t"


def test_sockets_and_shared_memory_reach_no_other_student(zygote, tmp_path):
    name, key = f"lumen-{uuid.uuid4().hex}", 0x4C550000 + os.getpid() % 0xFFFF
    first = student(tmp_path, zygote, "first")
    alongside = student(tmp_path, zygote, "alongside")
    try:
        assert first.hold_abstract(name) == "listening" and first.reach_abstract(name) == "connected"
        assert first.hold_shm(key) == "created" and first.reach_shm(key) == "found"
        assert alongside.reach_abstract(name) != "connected"
        assert alongside.reach_shm(key) != "found"
    finally:
        first.pool.close()
        alongside.pool.close()


def test_the_zygotes_socket_is_closed_to_workers(zygote, tmp_path):
    """A slot's zygote connected to this side through a socket in a folder bound into its
    container: once it has, the socket is gone and the folder read-only in every worker."""
    sub = student(tmp_path, zygote, "a")
    try:
        assert sub.reach_control() in ("FileNotFoundError", "ConnectionRefusedError", "PermissionError")
        assert json.loads(sub.leave_files("lumen-control-probe"))["/run/lumen"] != "written"
    finally:
        sub.pool.close()


def test_no_keyring_and_no_user_namespace(zygote, tmp_path):
    sub = student(tmp_path, zygote, "a")
    try:
        out = json.loads(sub.keys_and_namespaces())
    finally:
        sub.pool.close()
    assert out == {"add_key": "Operation not permitted", "keyctl": "Operation not permitted",
                   "unshare_user": "Operation not permitted", "clone_user": "Operation not permitted"}, out


def test_a_worker_that_stops_reading_is_cut_off_and_the_next_one_forks(zygote, tmp_path):
    stuck = student(tmp_path, zygote, "stuck", call_timeout=1.5)
    try:
        started = time.monotonic()
        with pytest.raises(WorkerFailure, match="did not return within"):
            stuck.stall()
        assert time.monotonic() - started < 10
        assert json.loads(stuck.processes()) == [1, 2]     # its pool's replacement: forked, fresh
        assert stuck.pool.restarts == 1
        assert isinstance(stuck.pool.worker.launched.proc, zygotes.ForkedProcess)
    finally:
        stuck.pool.close()
    assert zygote.zygote.alive()


@pytest.mark.slow
def test_the_zygote_shows_in_no_worker_and_forks_many(zygote, tmp_path):
    """Fifty submissions in a row from one zygote: each sees a fresh sandbox of its own."""
    before = zygote.forked
    for i in range(50):
        sub = student(tmp_path, zygote, f"s{i}")
        try:
            assert json.loads(sub.processes()) == [1, 2]
        finally:
            sub.pool.close()
    assert zygote.forked - before == 50 and zygote.failures == 0


def _fresh_seccomp(launcher) -> str:
    """A fresh worker's seccomp mode: none under bwrap, docker's default profile in a container."""
    return "0" if launcher.name == "bwrap" else "2"


UNDER_TMP_SCRIPT = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    import torch
    from lumen_ex.harness.client import WorkerPool
    from lumen_ex.sandbox.base import WorkerSpec
    from lumen_ex.sandbox.bwrap import BwrapLauncher
    from lumen_ex.sandbox.cgroups import Limits
    from lumen_ex.sandbox.inside import wire
    from lumen_ex.sandbox.zygote import ZygoteLauncher

    ws = Path(sys.argv[1])
    launcher = ZygoteLauncher(BwrapLauncher())
    pool = WorkerPool(launcher, WorkerSpec(workspace=ws, module_dir=ws / "probe", device="cpu", limits=Limits()),
                      module="probe", functions=["f"], call_timeout=60)
    tensors = []
    header = {"op": "call", "fn": "f", "device": "cpu", "args": wire.pack((torch.zeros(2),), tensors)[0], "kwargs": {}}
    pool.ready()
    reply = pool.call(header, tensors, 60).header
    print(json.dumps({"ok": reply.get("ok"), "error": reply.get("error"), "forked": launcher.forked}))
    pool.close()
    launcher.close()
''')


@pytest.mark.slow
def test_a_forked_worker_imports_from_an_interpreter_that_lives_under_tmp(tmp_path):
    """A checkout (and its venv) under /tmp: each forked worker gets an empty /tmp of its own, which
    once hid the interpreter's folders, so a module nothing had imported yet (torch.func's
    torch._dynamo, or here a module of the venv's own) was "not found" in a forked worker alone. The
    venv here is made under /tmp (pytest's tmp_path) and adds this checkout's site-packages."""
    import subprocess
    import sys
    import sysconfig

    if not BwrapLauncher.availability().ok:
        pytest.skip(BwrapLauncher.availability().reason)
    venv = tmp_path / "venv"
    assert str(venv.resolve()).startswith("/tmp/"), venv
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site_dir = Path(sysconfig.get_paths(vars={"base": str(venv)})["purelib"])
    here = sysconfig.get_paths()["purelib"]
    (site_dir / "checkout.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    (site_dir / "lazy_probe_mod.py").write_text("ONE = 1\n")     # imported by the learner's call only
    (tmp_path / "ws" / "probe").mkdir(parents=True)
    (tmp_path / "ws" / "probe" / "probe.py").write_text("def f(x):\n    import lazy_probe_mod\n"
                                                          "    return x + lazy_probe_mod.ONE\n")
    proc = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", UNDER_TMP_SCRIPT, str(tmp_path / "ws")],
                          capture_output=True, text=True, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["forked"] >= 1, answer                       # a forked worker, not the fresh fallback
    assert answer["ok"] is True, answer


def _graded_by_a_fresh_worker(launcher, ws: Path, **files: str) -> None:
    """A submission in ``ws`` (the attack module and ``files``) answers from a fresh worker of
    ``launcher``'s fallback, not a forked one."""
    (ws / "probe").mkdir(parents=True)
    (ws / "probe" / "attack.py").write_text(ATTACKS)
    for name, text in files.items():
        (ws / "probe" / name).write_text(text)
    spec = WorkerSpec(workspace=ws, module_dir=ws / "probe", device="cpu", limits=Limits())
    pool = WorkerPool(launcher, spec, module="attack", functions=NAMES)
    try:
        assert json.loads(LearnerModule(pool, "cpu", "attack.py").status())["Seccomp"] == _fresh_seccomp(launcher)
        assert not isinstance(pool.worker.launched.proc, zygotes.ForkedProcess)
    finally:
        pool.close()


@pytest.mark.slow
def test_a_workspace_too_large_to_copy_gets_a_fresh_worker(zygote, tmp_path, monkeypatch):
    monkeypatch.setattr(workspace_copy, "WORKSPACE_FILES", 1)
    _graded_by_a_fresh_worker(zygote, tmp_path / "big", **{"data.txt": "more than one file"})


@pytest.mark.slow
def test_a_worker_the_zygote_cannot_hold_is_a_fresh_one_with_its_own_limits(tmp_path, monkeypatch):
    """Without a cgroup (a learner's laptop) a forked worker's memory limit is an rlimit, which it may
    lower but not raise: a zygote started for one exercise cannot fork the worker of an exercise
    allowed more memory (a pack's exercises may differ; a grading process, the check server and the
    playground each keep one zygote for every exercise). That worker is a fresh one, held to its own
    limit; one allowed less is still forked. (Under docker, a slot's container caps its workers too,
    by the same rule, src/lumen_ex/sandbox/zygote.py ``ZygoteLauncher._covers``.)"""
    if not BwrapLauncher.availability().ok:
        pytest.skip(BwrapLauncher.availability().reason)
    monkeypatch.setattr(Cgroup, "create", classmethod(lambda cls, limits: None))
    ws = tmp_path / "ws"
    (ws / "probe").mkdir(parents=True)
    (ws / "probe" / "limits.py").write_text(
        "import resource\ndef address_space():\n    return list(resource.getrlimit(resource.RLIMIT_AS))\n")
    launcher = zygotes.ZygoteLauncher(BwrapLauncher())
    try:
        for mb, forked in ((2048, True), (4096, False), (1024, True)):
            spec = WorkerSpec(workspace=ws, module_dir=ws / "probe", device="cpu", limits=Limits(memory_mb=mb))
            pool = WorkerPool(launcher, spec, module="limits", functions=["address_space"])
            try:
                assert list(LearnerModule(pool, "cpu", "limits.py").address_space()) == [mb << 20, mb << 20]
                assert isinstance(pool.worker.launched.proc, zygotes.ForkedProcess) is forked, mb
            finally:
                pool.close()
        assert launcher.forked == 2
    finally:
        launcher.close()


@pytest.mark.slow
def test_a_zygote_that_dies_now_and_then_is_replaced_each_time(tmp_path):
    """The check server and the playground keep one zygote for hours: one that dies after it has
    forked workers is replaced, however often that happens; two in a row that fail before any fork
    are the end of forking (src/lumen_ex/sandbox/zygote.py ``ZygoteLauncher.failures``)."""
    if not BwrapLauncher.availability().ok:
        pytest.skip(BwrapLauncher.availability().reason)
    launcher = zygotes.ZygoteLauncher(BwrapLauncher())
    try:
        for _ in range(3):
            sub = student(tmp_path, launcher, uuid.uuid4().hex[:8])      # forked (student() checks it)
            sub.pool.close()
            launcher.zygote.proc.kill()
            launcher.zygote.proc.wait(30)
        sub = student(tmp_path, launcher, "last")
        sub.pool.close()
        assert launcher.forked == 4 and launcher.failures == 0
    finally:
        launcher.close()


@pytest.mark.slow
def test_verdicts_are_the_same_forked_or_fresh(zygote, tmp_path):
    """Correct, buggy and hostile files graded by forked workers and by fresh ones alike. The fresh
    side is a cold check: its first worker fresh, and under bwrap each replacement of a worker that
    failed forked from the check's own zygote (src/lumen_ex/sandbox/select.py replacing,
    tests/sandbox/test_cold_replacements.py); under docker a fresh worker in the check's container.

    Over 30 s (about 80 s under docker on two cores): 12 files graded twice, and under docker the
    fresh side pays a torch import for every worker, which the hostile files kill at every test."""
    from conftest import workspace_with

    from lumen_ex.harness.check import run_check

    cases = [(1, REFERENCES["attention"]), (2, REFERENCES["kv_cache"]),
             *[(1, p) for p in sorted((CORPORA["attention"] / "buggy").glob("*.py"))[:3]],
             *[(2, p) for p in sorted((CORPORA["kv_cache"] / "buggy").glob("*.py"))[:2]],
             *[(1, CORPUS / "hostile" / f"{n}.py") for n in ("kill_parent", "sys_exit", "tamper_worker_replies",
                                                              "atexit_exit", "monkeypatch_comparisons")]]
    assert len(cases) == 12 and all(p.is_file() for _, p in cases)
    fresh = fresh_backend(zygote)
    for i, (number, path) in enumerate(cases):
        ws = workspace_with(tmp_path / f"case{i}", number, path.read_text())
        results = [run_check(number, workspace=ws, seed=5, record=False, launcher=launcher)
                   for launcher in (zygote, fresh)]
        forked, alone = ([(t.id, t.status.value, t.score) for t in r.tests] for r in results)
        assert forked == alone, path.name


@pytest.mark.slow
def test_a_forked_sandbox_that_cannot_be_built_gets_a_fresh_worker_instead(zygote, tmp_path, monkeypatch):
    """The init refuses a workspace entry outside /workspace; that is the grader's failure, never
    the submission's: the launch falls back to a fresh worker, which answers."""
    monkeypatch.setattr(zygotes, "workspace_copy", lambda root: ([{"kind": "dir", "path": "../escape"}], b""))
    _graded_by_a_fresh_worker(zygote, tmp_path / "ws")
    assert zygote.zygote is not None and zygote.zygote.alive()   # the zygote itself serves on


@pytest.mark.slow
def test_a_forked_worker_that_cannot_join_its_cgroup_gets_a_fresh_worker_instead(zygote, tmp_path, monkeypatch):
    """Moving the init into its cgroup fails (here on purpose): the init is killed and a fresh
    worker takes the check, as for any other failure of the grader's own."""
    from lumen_ex.sandbox.cgroups import Cgroup

    if Cgroup.create(Limits()) is None:
        pytest.skip("no cgroup here")

    joined = Cgroup.add

    def refuse(self, pid):     # another process (the forked init) is refused; a fresh worker joins itself
        if pid != os.getpid():
            raise PermissionError(13, "refused on purpose")
        joined(self, pid)

    monkeypatch.setattr(Cgroup, "add", refuse)
    _graded_by_a_fresh_worker(zygote, tmp_path / "ws")
    assert zygote.zygote is not None and zygote.zygote.alive()
