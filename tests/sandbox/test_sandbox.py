"""The sandboxes themselves, probed from inside by real code through the real worker.

Each probe is a tiny learner module whose functions report what they could see or do; the tests
assert on those reports (isolation) or on how the worker died (limits). Nothing is mocked: the
probe runs under the same launcher, limits and pipes as a learner's code.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from conftest import REFERENCES, requires_bwrap
from proc_support import running_with, wait_until

from lumen_ex.harness import deadline
from lumen_ex.harness.client import WorkerCrashed, WorkerFailure, WorkerPool
from lumen_ex.harness.memory import process_tree
from lumen_ex.harness.proxy import LearnerModule
from lumen_ex.sandbox import zygote as zygotes
from lumen_ex.sandbox.base import WorkerSpec
from lumen_ex.sandbox.bwrap import BwrapLauncher
from lumen_ex.sandbox.cgroups import Cgroup, Limits
from lumen_ex.sandbox.unisolated import UnisolatedLauncher

PROBES = textwrap.dedent('''
    import json, os, socket, subprocess, sys, time

    def facts():
        status = open("/proc/self/status").read()
        field = lambda name: status.split(name + ":")[1].split()[0]
        out = {"uid": os.getuid(), "gid": os.getgid(), "cap_eff": field("CapEff"),
               "no_new_privs": field("NoNewPrivs"), "env": dict(os.environ),
               "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
               "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
               "root": sorted(os.listdir("/")), "hostname": socket.gethostname(),
               "interfaces": sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else None}
        return json.dumps(out)

    def try_connect(host, port):
        try:
            socket.create_connection((host, int(port)), timeout=3).close()
            return "connected"
        except OSError as exc:
            return type(exc).__name__ + ": " + str(exc)

    def try_resolve(name):
        try:
            return "resolved " + str(socket.getaddrinfo(name, 80)[0][4])
        except OSError as exc:
            return type(exc).__name__

    def try_write(path):
        try:
            with open(path, "w") as f:
                f.write("written by the sandbox")
            return "written"
        except OSError as exc:
            return type(exc).__name__ + ": " + str(exc.strerror)

    def try_read(path):
        try:
            return "read " + str(len(open(path, "rb").read()))
        except OSError as exc:
            return type(exc).__name__

    def listdir(path):
        try:
            return json.dumps(sorted(os.listdir(path)))
        except OSError as exc:
            return type(exc).__name__

    def fork_bomb(n):
        children = 0
        for _ in range(int(n)):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            children += 1
        return children

    def daemon(marker):
        # Detach a grandchild into its own session, as a learner might to outlive the check.
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/bin/sleep", [marker, "300"])
            os._exit(0)
        time.sleep(0.5)
        return "started"

    def eat_memory(mb):
        import torch
        try:
            t = torch.ones(int(mb) * 1024 * 1024 // 8, dtype=torch.float64)
            return "allocated " + str(float(t.sum()))
        except (RuntimeError, MemoryError) as exc:
            return "refused: " + type(exc).__name__

    def spin():
        while True:
            pass

    def burn(seconds):
        """Run on the CPU for ``seconds`` of this process's own time, however long that takes."""
        start = time.process_time()
        while time.process_time() - start < seconds:
            pass
        return "burnt"

    def nap(seconds):
        time.sleep(seconds)

    def scratch_writes():
        import tempfile
        folder = tempfile.mkdtemp(prefix="probe-")
        with open(os.path.join(folder, "kept.txt"), "w") as f:
            f.write("left by the learner")
        home = os.path.join(os.path.expanduser("~"), "probe-home.txt")
        with open(home, "w") as f:
            f.write("left by the learner")
        return json.dumps({"cwd": os.getcwd(), "home": os.environ.get("HOME"), "tmpdir": os.environ.get("TMPDIR"),
                           "written": [folder, home]})

    def write_big(path, mb):
        try:
            with open(path, "wb") as f:
                for _ in range(int(mb)):
                    f.write(b"x" * (1024 * 1024))
            return "wrote " + str(mb)
        except OSError as exc:
            return type(exc).__name__ + ": " + str(exc.strerror)
''')


def pool_for(tmp_path: Path, launcher, limits: Limits = Limits(), call_timeout: float = 30.0,
             warm: bool = False) -> LearnerModule:
    ws = tmp_path / "ws"
    (ws / "probe").mkdir(parents=True)
    (ws / "probe" / "probe_mod.py").write_text(PROBES)
    (ws / "probe" / "other.txt").write_text("learner file")
    spec = WorkerSpec(workspace=ws, module_dir=ws / "probe", device="cpu", limits=limits, warm=warm)
    names = ["facts", "try_connect", "try_resolve", "try_write", "try_read", "listdir", "fork_bomb",
             "daemon", "eat_memory", "spin", "burn", "nap", "write_big", "scratch_writes"]
    pool = WorkerPool(launcher, spec, module="probe_mod", functions=names, call_timeout=call_timeout)
    sub = LearnerModule(pool, "cpu", "probe_mod.py")
    sub.pool = pool
    return sub


@pytest.fixture(scope="module")
def zygote():
    """One zygote for the whole module, as a grading process keeps one for all its checks: every
    forked worker below is another submission's, from the same zygote."""
    if not BwrapLauncher.availability().ok or not zygotes.supported():
        pytest.skip("no bwrap zygote here")
    launcher = zygotes.ZygoteLauncher(BwrapLauncher())
    yield launcher
    launcher.close()


def _launcher(kind: str, request):
    if kind in ("bwrap", "forked") and not BwrapLauncher.availability().ok:
        pytest.skip(BwrapLauncher.availability().reason)
    if kind == "forked":
        return request.getfixturevalue("zygote")
    return BwrapLauncher() if kind == "bwrap" else UnisolatedLauncher()


def _check_forked(sub, kind: str) -> None:
    if kind == "forked":   # the test must grade a forked worker, not the fallback's fresh one
        assert isinstance(sub.pool.worker.launched.proc, zygotes.ForkedProcess)


@pytest.fixture(params=["bwrap", "forked"])
def bwrap(request, tmp_path):
    """A bwrap worker: started on its own, or forked from a zygote (src/lumen_ex/sandbox/zygote.py)."""
    sub = pool_for(tmp_path, _launcher(request.param, request))
    sub.facts()   # started
    _check_forked(sub, request.param)
    yield sub
    sub.pool.close()


@pytest.fixture(params=["bwrap", "forked", "none"])
def any_sandbox(request, tmp_path):
    sub = pool_for(tmp_path, _launcher(request.param, request))
    sub.facts()
    _check_forked(sub, request.param)
    yield sub
    sub.pool.close()


# -------------------------------------------------------------------------------------------------
# Isolation (bwrap)


@requires_bwrap
@pytest.mark.slow
def test_unprivileged_without_capabilities(bwrap):
    facts = json.loads(bwrap.facts())
    assert (facts["uid"], facts["gid"]) == (65534, 65534)
    assert int(facts["cap_eff"], 16) == 0
    assert facts["no_new_privs"] == "1"


@requires_bwrap
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "started-in-advance"])
@pytest.mark.slow
def test_own_pid_namespace_and_clean_environment(tmp_path, warm):
    """Also for a worker started in advance, which loads torch's meta kernels before its hello
    (and torch then sets variables of its own: worker.py takes them out again)."""
    sub = pool_for(tmp_path, BwrapLauncher(), warm=warm)
    try:
        facts = json.loads(sub.facts())
    finally:
        sub.pool.close()
    assert len(facts["pids"]) <= 3, facts["pids"]          # bwrap's init, the worker, nothing else
    assert set(facts["env"]) <= {"PATH", "HOME", "LANG", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                 "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PWD", "LC_CTYPE"}
    assert facts["hostname"] == "lumen-sandbox"


@requires_bwrap
@pytest.mark.slow
def test_no_inherited_descriptors(tmp_path):
    leak = open(tmp_path / "leak.txt", "w")           # an fd open in the harness must not get in
    os.set_inheritable(leak.fileno(), True)
    sub = pool_for(tmp_path / "x", BwrapLauncher())
    try:
        fds = set(json.loads(sub.facts())["fds"])
        argv = sub.pool.worker.launched.proc.args
        protocol = {int(argv[argv.index("fds") + 1]), int(argv[argv.index("fds") + 2])}
        listing = max(fds - protocol)                      # the fd os.listdir itself opened
        assert fds == {0, 1, 2} | protocol | {listing}, fds
        assert leak.fileno() not in fds - {listing}
    finally:
        sub.pool.close()
        leak.close()


@requires_bwrap
@pytest.mark.slow
def test_no_network(bwrap):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        port = listener.getsockname()[1]
        assert bwrap.try_connect("127.0.0.1", port).startswith(("ConnectionRefusedError", "OSError"))
        assert bwrap.try_connect("1.1.1.1", 53).startswith("OSError")
        assert not bwrap.try_resolve("pypi.org").startswith("resolved")
    finally:
        listener.close()


@requires_bwrap
@pytest.mark.slow
def test_filesystem_read_only_and_private(bwrap, tmp_path):
    assert "Read-only" in bwrap.try_write("/workspace/probe/other.txt")
    assert "Read-only" in bwrap.try_write("/workspace/new.txt") or "Permission" in bwrap.try_write("/workspace/new.txt")
    assert bwrap.try_write("/usr/x").startswith(("OSError", "PermissionError"))
    marker = f"lumen-probe-{uuid.uuid4().hex}"
    assert bwrap.try_write(f"/tmp/{marker}") == "written"
    assert not (Path("/tmp") / marker).exists()         # the sandbox's /tmp is its own tmpfs
    assert (tmp_path / "ws" / "probe" / "other.txt").read_text() == "learner file"


@requires_bwrap
@pytest.mark.slow
def test_a_pack_under_a_mounted_folder_is_invisible(tmp_path, monkeypatch):
    """An instructor's pack (LUMEN_EX_PATH) inside a folder the sandbox mounts for the interpreter
    (the Python environment's prefix): its reference, suite and corpus are masked. The control, the
    unisolated mode, reads them: the attack is real."""
    from lumen_ex.authoring.scaffold import new_pack

    root = Path(sys.prefix) / f"lumen-ex-test-pack-{os.getpid()}"
    try:
        new_pack(root, slug="softmax", title="Softmax", name="mounted")
        monkeypatch.setenv("LUMEN_EX_PATH", str(root))
        targets = [root / "pack.toml", root / "101-softmax" / "reference.py",
                   root / "101-softmax" / "suite" / "test_softmax.py", root / "101-softmax" / "mistakes.py",
                   root / "101-softmax" / "corpus" / "buggy" / "wrong_axis.py"]
        for launcher in (BwrapLauncher(), UnisolatedLauncher()):
            sub = pool_for(tmp_path / launcher.name, launcher)
            try:
                reads = [sub.try_read(str(t)) for t in targets]
                listing = sub.listdir(str(root))
            finally:
                sub.pool.close()
            if launcher.name == "bwrap":
                assert all(r.startswith(("FileNotFound", "Permission")) for r in reads), reads
                assert listing in ("FileNotFoundError", "[]"), listing
            else:
                assert all(r.startswith("read ") for r in reads), reads
    finally:
        shutil.rmtree(root, ignore_errors=True)


@requires_bwrap
@pytest.mark.slow
def test_grader_files_are_invisible(bwrap):
    import lumen_ex.exercises
    import lumen_ex.graders

    for pkg in (lumen_ex.graders, lumen_ex.exercises):   # the suites' support, and the built-in pack
        folder = Path(pkg.__file__).parent
        listing = bwrap.listdir(str(folder))
        assert listing in ("FileNotFoundError", "[]"), listing
        assert bwrap.try_read(str(folder / "__init__.py")).startswith(("FileNotFound", "Permission"))
    assert bwrap.try_read("/etc/shadow") == "FileNotFoundError"
    assert bwrap.listdir("/root") in ("FileNotFoundError", "PermissionError", "[]", '[".pyenv"]')


@requires_bwrap
def test_installed_package_is_masked():
    """Every lumen_ex package folder inside a mounted runtime folder (as in a normal, non-editable
    install into site-packages) is covered by an empty tmpfs in the sandbox."""
    from lumen_ex.sandbox import bwrap as bw

    runtime = bw.python_runtime()
    masked = bw._grader_dirs(runtime.mounts)
    for folder in [str(bw.package_dir())]:
        inside = any(Path(folder).is_relative_to(m) for m in runtime.mounts)
        assert (folder in masked) == inside


# -------------------------------------------------------------------------------------------------
# Limits, under every sandbox (bwrap and the unisolated mode share the enforcement)


@pytest.mark.slow
def test_fork_bomb_is_stopped(any_sandbox):
    forked = any_sandbox.fork_bomb(300)
    assert forked < Limits().processes, f"{forked} processes forked past a limit of {Limits().processes}"


@pytest.mark.slow
def test_memory_bomb_is_stopped(any_sandbox):
    """Touching twice the limit either kills the worker (cgroup) or fails the allocation (rlimit)."""
    try:
        result = any_sandbox.eat_memory(2 * Limits().memory_mb)
    except WorkerCrashed as exc:
        assert "out of memory" in str(exc), str(exc)
    else:
        assert result.startswith("refused"), result


@pytest.mark.slow
def test_memory_limit_without_a_cgroup_falls_back_to_rlimit(tmp_path, monkeypatch):
    """With no cgroup (a normal user's laptop), RLIMIT_AS holds memory on the CPU."""
    monkeypatch.setattr(Cgroup, "create", classmethod(lambda cls, limits: None))
    sub = pool_for(tmp_path, UnisolatedLauncher())
    try:
        assert sub.pool.enforced["memory"].startswith("rlimit")
        assert sub.eat_memory(4 * Limits().memory_mb).startswith("refused")
    finally:
        sub.pool.close()


@pytest.mark.slow
def test_cpu_time_limit(tmp_path):
    sub = pool_for(tmp_path, UnisolatedLauncher(), limits=Limits(cpu_seconds=3), call_timeout=60)
    try:
        started = time.monotonic()
        with pytest.raises(WorkerCrashed, match="CPU time limit"):
            sub.spin()
        assert time.monotonic() - started < 30
    finally:
        sub.pool.close()


@pytest.mark.slow
def test_file_size_limit(any_sandbox):
    result = any_sandbox.write_big("/tmp/big.bin" if any_sandbox.pool.launcher.isolated else "big.bin", 40)
    assert not result.startswith("wrote"), result
    assert "too large" in result or "No space" in result


@pytest.mark.slow
def test_the_unisolated_workers_temporary_files_and_home_go_with_it(tmp_path):
    """The unisolated mode hides nothing, but what a worker writes with ``tempfile`` or under ``~``
    (a learner's scratch files, Triton's cache in exercise 14) lands in its throwaway folder and is
    removed with the worker, not left in the host's /tmp (src/lumen_ex/sandbox/unisolated.py)."""
    sub = pool_for(tmp_path, UnisolatedLauncher())
    try:
        seen = json.loads(sub.scratch_writes())
    finally:
        sub.pool.close()
    scratch = seen["cwd"]
    # named for this process (the harness), so that a sweep after a SIGKILL finds it (test_leftovers.py)
    assert seen["home"] == seen["tmpdir"] == scratch and Path(scratch).name.startswith(f"lumen-ex-worker-{os.getpid()}-")
    assert all(Path(path).is_relative_to(scratch) for path in seen["written"]), seen
    assert not Path(scratch).exists() and not any(Path(path).exists() for path in seen["written"]), seen


@pytest.mark.slow
def test_call_timeout_kills_and_restarts(tmp_path):
    sub = pool_for(tmp_path, UnisolatedLauncher(), call_timeout=1.5)
    try:
        with pytest.raises(WorkerFailure, match="did not return within"):
            sub.spin()
        assert json.loads(sub.facts())["uid"] == os.getuid()   # a fresh worker answers
        assert sub.pool.restarts == 1
    finally:
        sub.pool.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bwrap", "forked", "none"])
def test_a_busy_cpu_does_not_eat_a_calls_time_limit(tmp_path, request, monkeypatch, kind):
    """A call's limit leaves out the time the worker waited for a CPU that other processes held
    (src/lumen_ex/harness/deadline.py): 0.4 s of work sharing one CPU with three busy processes
    takes about 1.6 s on the wall clock, over a 1 s limit, and still returns. An infinite loop under
    the same load still runs out of time, and says how long it waited; a sleep waits for no CPU.
    The cap on the stretch is raised here, so that the test suite's own load cannot reach it
    (test_deadline_stretch_is_bounded holds the cap)."""
    monkeypatch.setattr(deadline, "STRETCH", 20.0)
    sub = pool_for(tmp_path, _launcher(kind, request), call_timeout=1.0)
    hogs: list[subprocess.Popen] = []
    try:
        sub.facts()                               # started, before the load
        _check_forked(sub, kind)
        one_cpu = {min(os.sched_getaffinity(0))}
        for pid in process_tree(sub.pool.worker.launched.proc.pid):
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(tid), one_cpu)
        hog = f"import os; os.sched_setaffinity(0, {one_cpu!r})\nwhile True: pass"
        # each in a session of its own, as the worker is: the scheduler shares a CPU between sessions
        hogs = [subprocess.Popen([sys.executable, "-I", "-c", hog], start_new_session=True) for _ in range(3)]
        started = time.monotonic()
        assert sub.burn(0.4) == "burnt"
        assert time.monotonic() - started > 1.0, "the load did not slow the call past its limit: this test proves nothing"
        assert sub.pool.restarts == 0
        with pytest.raises(WorkerFailure, match=r"did not return within 1 s of its own time \(it also waited"):
            sub.spin()
        with pytest.raises(WorkerFailure) as slept:
            sub.nap(60)
        assert "for a CPU" not in str(slept.value), str(slept.value)
    finally:
        for hog_proc in hogs:
            hog_proc.kill()
            hog_proc.wait()
        sub.pool.close()


def test_deadline_stretch_is_bounded(monkeypatch):
    """However long the worker waited for a CPU, a call's deadline moves to at most STRETCH times its
    limit, and never past the run's own deadline; with no schedstat to read it does not move."""
    monkeypatch.setattr(deadline, "MARK_AFTER", 0.0)
    waits = {7: 0}
    monkeypatch.setattr(deadline, "run_queue_waits", lambda root: dict(waits))
    plain = deadline.StretchedDeadline(123, 2.0)
    plain.tick()
    assert not plain.stretch() and plain.note() == ""           # no wait, no move
    waits[7] = int(1.5e9)
    assert plain.stretch() and plain.at == pytest.approx(plain.started + 3.5)
    assert "waited 1.5 s for a CPU" in plain.note()
    waits[7] = int(100e9)
    assert plain.stretch() and plain.at == pytest.approx(plain.started + 2.0 * deadline.STRETCH)
    assert not plain.stretch()                                   # at the cap: no further
    capped = deadline.StretchedDeadline(123, 2.0, latest=time.monotonic() + 2.5)
    capped.tick()
    waits[7] = int(200e9)
    assert capped.stretch() and capped.at == pytest.approx(capped.latest) and capped.latest < capped.started + 2.6
    monkeypatch.setattr(deadline, "run_queue_waits", lambda root: {})
    blind = deadline.StretchedDeadline(123, 2.0)
    blind.tick()
    assert not blind.stretch()


@pytest.mark.slow
def test_no_process_outlives_the_worker(any_sandbox):
    marker = f"lumen-daemon-{uuid.uuid4().hex}"
    assert any_sandbox.daemon(marker) == "started"
    assert wait_until(lambda: running_with(marker), 10), "the probe's daemon should be running before cleanup"
    any_sandbox.pool.close()
    assert wait_until(lambda: not running_with(marker), timeout=10), [str(p) for p in running_with(marker)]


@pytest.mark.slow
def test_limits_mechanism_is_reported(any_sandbox):
    enforced = any_sandbox.pool.enforced
    assert set(enforced) >= {"memory", "processes", "cpu_time", "file_size"}
    probe = Cgroup.create(Limits()) if os.geteuid() == 0 else None
    if probe is not None:
        probe.remove()
        assert enforced["memory"].startswith("cgroup") and enforced["processes"].startswith("cgroup")


@requires_bwrap
@pytest.mark.slow
def test_an_interpreter_path_through_an_unmounted_folder_still_starts_workers(tmp_path):
    """``cd bench && ../.venv/bin/python ...`` gives a sys.executable with ``..`` through a folder the
    sandbox does not mount: the worker must be started by a path the sandbox can resolve."""
    from conftest import workspace_with

    root = workspace_with(tmp_path, 1, REFERENCES["attention"])
    detour = tmp_path / "elsewhere"
    detour.mkdir()
    python = os.path.relpath(sys.executable, detour)   # ../../..: started from detour, sys.executable keeps it
    assert python.startswith("..") and os.path.samefile(detour / python, sys.executable)
    code = ("import sys\nfrom lumen_ex.harness.check import run_check\n"
            f"r = run_check(1, workspace={str(root)!r}, sandbox='bwrap', seed=3, device='cpu', record=False)\n"
            "print(r.status.value, r.score, r.max_score)\n")
    proc = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=300, cwd=detour)
    assert proc.returncode == 0, proc.stderr[-2000:]
    status, score, top = proc.stdout.split()
    assert status == "pass" and float(score) == float(top), proc.stdout


@requires_bwrap
@pytest.mark.slow
def test_a_worker_that_dies_before_its_hello_is_never_the_learners_fault(tmp_path, monkeypatch):
    """A worker that cannot start (here, for real under bwrap: an address-space limit that torch's
    import does not fit in, so the worker dies before its hello) has run none of the learner's code:
    every test is a grader error that says the process did not start and that it is not their code,
    never "importing your module" nor a verdict on the file (a correct one here)."""
    from conftest import workspace_with

    from lumen_ex.harness import check
    from lumen_ex.harness.client import START_HINT

    spec_of = check.worker_spec
    monkeypatch.setattr(check, "worker_spec", lambda *a, **k: _tiny(spec_of(*a, **k)))
    root = workspace_with(tmp_path, 1, REFERENCES["attention"])
    result = check.run_check(1, workspace=root, sandbox="bwrap", seed=3, device="cpu", record=False,
                             select="test_values or test_causal_mask")
    ran = [t for t in result.tests if t.status.value != "skipped"]
    assert result.status.value == "error" and ran, [(t.id, t.status, t.message) for t in result.tests]
    for t in ran:
        assert t.status.value == "error" and t.diagnosis.kind == "grader", (t.id, t.status, t.message)
        assert "the sandboxed process did not start" in t.message and "importing your module" not in t.message
        assert t.diagnosis.hint == START_HINT


def _tiny(spec: WorkerSpec) -> WorkerSpec:
    """``spec`` with 64 MB of address space: Python starts, torch's import cannot."""
    from dataclasses import replace

    return replace(spec, limits=replace(spec.limits, memory_mb=64))


@pytest.mark.parametrize("why", ["not installed", "no user namespaces"])
def test_a_missing_sandbox_is_one_line_and_the_step_that_brings_it(monkeypatch, why):
    """`--sandbox bwrap` where bwrap cannot run: exit code 3, the reason, then the one step that fixes
    it, as the backend words it (an install command, or a sysctl: never "Install it" for a sysctl);
    `--sandbox auto` says the same step in its NOT ISOLATED warning."""
    from lumen_ex.core.errors import SandboxUnavailable
    from lumen_ex.sandbox import bwrap as bwrap_mod
    from lumen_ex.sandbox import select

    def refused(*args, **kwargs):
        if why == "not installed":
            return None
        raise subprocess.CalledProcessError(1, "bwrap", stderr=b"bwrap: No permissions to creating new namespace")

    monkeypatch.setattr(bwrap_mod.shutil, "which", lambda name: None if name == "bwrap" and why == "not installed"
                        else f"/usr/bin/{name}")
    monkeypatch.setattr(bwrap_mod.subprocess, "run", refused)
    monkeypatch.setattr(bwrap_mod, "_PROBED", [])       # probed again, here
    step = ("Install it: sudo apt-get install -y bubblewrap" if why == "not installed"
            else "Enable unprivileged user namespaces: sudo sysctl -w kernel.unprivileged_userns_clone=1")
    with pytest.raises(SandboxUnavailable) as info:
        select.select_backend("bwrap")
    assert info.value.exit_code == 3 and info.value.next_step.startswith(step), info.value.next_step
    assert "\n" not in str(info.value) and str(info.value).count("Install it") <= 1, str(info.value)
    monkeypatch.setattr(select.docker, "probe", lambda: (select.docker.Availability(False, "no engine"),
                                                         type("State", (), {"state": "no-engine"})()))
    launcher, note = select.select_backend("auto")
    assert isinstance(launcher, UnisolatedLauncher)
    assert f"To get one: {step}" in note, note
