"""`lumen-ex watch`: re-checks on save, fresh worker per check, file events, polling, clean exit.

Everything runs for real: the sandbox (bwrap where it works here, else the unisolated mode), the
worker processes, inotify or polling, real files written the ways editors write them.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REFERENCES, ROOT, best_sandbox, interruptible, make_workspace
from docker_support import containers, needs_docker
from proc_support import Proc, descendants, still_running_after, wait_until

from lumen_ex.core.errors import SandboxUnavailable
from lumen_ex.learner.watch import Inotify, WatchSession
from lumen_ex.sandbox.docker_slot import DockerSlotLauncher
from lumen_ex.sandbox.zygote import ZygoteLauncher
from lumen_ex.sandbox.zygote import supported as zygote_supported

LUMEN_EX = str(Path(sys.executable).parent / "lumen-ex")
REFERENCE = (REFERENCES["attention"]).read_text()
NO_SCALE = REFERENCE.replace("/ math.sqrt(d_k)", "")
assert NO_SCALE != REFERENCE
# Appended to a file, so that it parses (a `from __future__` import must come first): its import is slow.
SLOW_IMPORT = "\nimport time\n\ntime.sleep({seconds})\n"

# Wrong (no scale), and leaves a mark in the worker process when imported.
MARKS_THE_WORKER = NO_SCALE + """

torch.lumen_was_here = True
"""

# Correct, but only in a worker that nothing imported into before: a reused worker would still
# hold the mark (or the first module itself, cached), and this check would fail.
CORRECT_IN_A_FRESH_WORKER = REFERENCE + """

_reference = scaled_dot_product_attention


def scaled_dot_product_attention(q, k, v, mask=None):
    out, weights = _reference(q, k, v, mask)
    return (out + 1 if getattr(torch, "lumen_was_here", False) else out), weights
"""

CHANGE_TIMEOUT = 10.0


def save(path: Path, text: str) -> None:
    """Save in place, as most editors do: one IN_CLOSE_WRITE."""
    with open(path, "w") as f:
        f.write(text)


def save_by_rename(path: Path, text: str) -> None:
    """Save as vim/emacs/IDEs with 'atomic save' do: write a temporary file, rename it over."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def next_change(session: WatchSession, timeout: float = CHANGE_TIMEOUT):
    return next(session.wait_for_change(timeout=timeout), None)


@pytest.fixture
def workspace(tmp_path):
    return make_workspace(tmp_path).root


@pytest.fixture
def session_factory(workspace):
    made = []

    def make(**kwargs) -> WatchSession:
        kwargs.setdefault("sandbox", best_sandbox())
        session = WatchSession("1", workspace=workspace, seed=7, device="cpu", record=False, **kwargs)
        made.append(session)
        return session

    yield make
    for session in made:
        session.close()


def exercise_file(workspace: Path) -> Path:
    return workspace / "01-attention" / "attention.py"


@pytest.mark.slow
def test_rechecks_after_each_save_stub_reference_buggy(session_factory, workspace):
    session = session_factory()
    target = exercise_file(workspace)
    statuses = [session.check_once().status.value]            # the stub as created

    save(target, REFERENCE)
    change = next_change(session)
    assert change is not None and change.source == "inotify"
    statuses.append(session.check_once().status.value)

    save(target, NO_SCALE)
    assert next_change(session) is not None
    buggy = session.check_once()
    statuses.append(buggy.status.value)

    assert statuses == ["fail", "pass", "fail"]
    assert session.checks == 3
    # The re-check says what is wrong with the new content, not the old.
    assert any(t.status.value == "fail" and t.group == "values" for t in buggy.tests)
    assert not any("not implemented" in (t.message or "") for t in buggy.tests)


@pytest.mark.slow
def test_save_without_a_change_does_not_recheck(session_factory, workspace):
    session = session_factory()
    target = exercise_file(workspace)
    session.check_once()
    stub = target.read_text()

    save(target, stub)                      # same bytes: an editor's ":w" with nothing changed
    save_by_rename(target, stub)            # same bytes, new inode
    os.utime(target)                        # a touch
    assert next_change(session, timeout=1.5) is None
    assert session.checks == 1

    save(target, stub + "\n# edited\n")     # then a real edit is seen at once
    assert next_change(session) is not None


@pytest.mark.slow
def test_each_check_gets_a_fresh_worker(session_factory, workspace):
    session = session_factory()
    target = exercise_file(workspace)
    save(target, MARKS_THE_WORKER)
    assert session.check_once().status.value == "fail"

    save(target, CORRECT_IN_A_FRESH_WORKER)
    assert next_change(session) is not None
    second = session.check_once()
    assert second.status.value == "pass", second.message   # nothing of the first run was seen

    save(target, MARKS_THE_WORKER)
    assert next_change(session) is not None
    assert session.check_once().status.value == "fail"
    save(target, CORRECT_IN_A_FRESH_WORKER + "\n# saved again\n")
    assert next_change(session) is not None
    assert session.check_once().status.value == "pass"

    pids = [p for p in session.worker_pids if p is not None]
    assert len(pids) == len(set(pids)) >= 3   # never the same worker process twice
    # Under bwrap every one of them was forked from the session's warm zygote (a fork per check,
    # not a torch import: src/lumen_ex/sandbox/select.py forking), and closing the session stops it.
    launcher = session.launcher.inner
    if best_sandbox() == "bwrap" and zygote_supported():
        assert isinstance(launcher, ZygoteLauncher) and launcher.zygote is not None
        assert launcher.forked >= 4, launcher.forked
        zygote = launcher.zygote.proc
        session.close()
        assert launcher.zygote is None and zygote.poll() is not None, "the zygote outlived its session"


# Correct only while the file of data beside it says so (a learner whose code reads a file of theirs).
READS_A_FILE = REFERENCE.replace("/ math.sqrt(d_k)", "/ math.sqrt(d_k) * SCALE").replace(
    "import torch\n", "import torch\n\nwith open(__file__.rsplit('/', 1)[0] + '/scale.txt') as _f:\n"
    "    SCALE = float(_f.read())\n", 1)
assert READS_A_FILE.count("SCALE") == 2


@pytest.mark.slow
def test_a_file_saved_before_a_check_is_the_one_it_reads(session_factory, workspace, monkeypatch):
    """A worker forked in advance holds a copy of the workspace made when it was forked: a file of
    the learner's saved after that (here one the exercise file reads) must still be seen as it is
    when the next check begins (the worker is replaced). The source scan would refuse the open()
    (src/lumen_ex/harness/source_scan.py): it is switched off, so that the worker's view is what is tested."""
    from lumen_ex.harness.source_scan import SourceScan

    monkeypatch.setattr(SourceScan, "unverifiable", lambda self, fn: [])
    session = session_factory()
    target, data = exercise_file(workspace), exercise_file(workspace).with_name("scale.txt")
    save(data, "2.0\n")                                   # wrong: twice the scale
    save(target, READS_A_FILE)
    assert next_change(session) is not None
    assert session.check_once().status.value == "fail"
    assert session.wait_worker()                           # the next worker, ready in advance
    save(data, "1.0\n")                                   # fixed in the file of data ...
    save(target, READS_A_FILE + "\n# saved again\n")    # ... and the exercise file saved
    assert next_change(session) is not None
    result = session.check_once()
    assert result.status.value == "pass", [t.message for t in result.tests if t.status.value != "pass"][:2]


@pytest.mark.slow
def test_a_save_by_rename_is_seen(session_factory, workspace):
    session = session_factory()
    target = exercise_file(workspace)
    assert session.check_once().status.value == "fail"
    save_by_rename(target, REFERENCE)
    change = next_change(session)
    assert change is not None and change.source == "inotify"
    assert session.check_once().status.value == "pass"


@pytest.mark.slow
def test_polling_fallback_sees_saves(session_factory, workspace):
    session = session_factory(poll=True)
    target = exercise_file(workspace)
    assert session.check_once().status.value == "fail"

    save(target, REFERENCE)
    change = next_change(session)
    assert change is not None and change.source == "poll"
    assert session.check_once().status.value == "pass"

    save_by_rename(target, NO_SCALE)
    assert next_change(session) is not None
    assert session.check_once().status.value == "fail"

    save(target, NO_SCALE)                       # unchanged content: nothing to do
    assert next_change(session, timeout=1.0) is None


@pytest.mark.slow
def test_a_save_during_a_check_is_not_lost(session_factory, workspace):
    import threading

    session = session_factory()
    target = exercise_file(workspace)
    session.check_once()
    save(target, REFERENCE + SLOW_IMPORT.format(seconds=3))   # the worker takes 3 s to import it
    assert next_change(session) is not None
    checks = len(session.worker_pids)

    def save_once_checking():     # a check takes its worker once it has hashed the file (watch_session.py)
        if wait_until(lambda: len(session.worker_pids) > checks, 60):
            time.sleep(1.0)                                          # it has copied the file too by then,
            save(target, NO_SCALE)                                   # and its worker imports for 3 s

    later = threading.Thread(target=save_once_checking)
    later.start()
    try:
        during = session.check_once()
    finally:
        later.join()
    assert during.status.value == "pass", during.message   # the bytes it began with, not the save's
    assert next_change(session) is not None
    assert session.check_once().status.value == "fail"
    assert next_change(session, timeout=1.0) is None


def test_a_save_before_the_snapshot_is_not_checked_twice(session_factory, workspace, monkeypatch):
    """A save that lands after a check hashed the file but before it took its snapshot is graded by
    that check; the session remembers the bytes it graded, so the save is not checked again."""
    from lumen_ex.core import snapshot

    session = session_factory()
    target = exercise_file(workspace)
    session.check_once()
    save(target, REFERENCE)
    assert next_change(session) is not None
    take = snapshot.take

    def save_first(path):
        save(target, NO_SCALE)          # the save lands now, between the hash and the snapshot
        return take(path)

    monkeypatch.setattr(snapshot, "take", save_first)
    assert session.check_once().status.value == "fail"       # NO_SCALE's bytes were graded
    monkeypatch.setattr(snapshot, "take", take)
    assert next_change(session, timeout=1.0) is None


@pytest.mark.slow
def test_the_prepared_pytest_session_gives_the_same_verdicts(session_factory, workspace):
    from lumen_ex.harness.check import run_check

    save(exercise_file(workspace), NO_SCALE)
    cold = run_check("1", workspace=workspace, sandbox=best_sandbox(), seed=7, device="cpu", record=False)
    session = session_factory()
    session.check_once()                    # the first check collects the suite itself
    save(exercise_file(workspace), NO_SCALE + "\n# again\n")
    assert next_change(session) is not None
    assert session._prepared is not None    # the next one runs in a session collected in advance
    warm = session.check_once()

    def verdicts(result):
        return [(t.id, t.status.value, t.diagnosis.kind if t.diagnosis else None, t.score) for t in result.tests]

    assert verdicts(warm) == verdicts(cold)
    assert (warm.status, warm.score, warm.message) == (cold.status, cold.score, cold.message)


def test_inotify_reports_only_the_watched_file(tmp_path):
    try:
        watcher = Inotify(tmp_path, "attention.py")
    except OSError as exc:
        pytest.skip(f"inotify unavailable: {exc}")
    try:
        (tmp_path / "other.py").write_text("x")
        time.sleep(0.05)
        assert watcher.read() is False
        (tmp_path / "attention.py").write_text("x")
        time.sleep(0.05)
        assert watcher.read() is True
    finally:
        watcher.close()


def test_docker_where_no_slot_can_run_is_refused_with_a_next_step(workspace, monkeypatch):
    """Under docker, watch forks its workers in one container (a slot); where none can run (no
    seccomp filter or SO_PASSCRED: not x86_64 Linux), it says so and what to use instead."""
    from lumen_ex.learner import prewarm
    from lumen_ex.sandbox import select
    from lumen_ex.sandbox.docker import DockerSandbox

    monkeypatch.setattr(select, "supported", lambda: False)
    monkeypatch.setattr(prewarm, "select_backend", lambda name: (DockerSandbox("img:1"), ""))
    with pytest.raises(SandboxUnavailable) as info:
        WatchSession("1", workspace=workspace, sandbox="docker")
    assert "cannot be kept warm" in info.value.message and "bwrap" in info.value.next_step


@needs_docker
@pytest.mark.slow
def test_under_docker_each_check_is_forked_in_one_slot_that_stops_with_the_session(session_factory, workspace):
    slots_before = set(containers(name="lumen-slot-"))
    session = session_factory(sandbox="docker")
    target = exercise_file(workspace)
    save(target, MARKS_THE_WORKER)
    first = session.check_once()
    assert first.status.value == "fail" and first.sandbox.backend == "docker"
    save(target, CORRECT_IN_A_FRESH_WORKER)
    assert next_change(session) is not None
    second = session.check_once()
    assert second.status.value == "pass", second.message      # a fresh worker: nothing of the first run seen
    launcher = session.launcher.inner
    assert isinstance(launcher, DockerSlotLauncher) and launcher.forked >= 2
    assert len(set(containers(name="lumen-slot-")) - slots_before) == 1
    session.close()
    assert wait_until(lambda: not set(containers(name="lumen-slot-")) - slots_before, 60), "the slot outlived its session"


# -------------------------------------------------------------------------------------------------
# The command: Ctrl-C leaves nothing behind


def _cgroups_of(pid: int) -> list[Path]:
    root = Path("/sys/fs/cgroup")
    return [p for p in root.glob(f"**/lumen-ex-{pid}-*") if p.is_dir()] if root.is_dir() else []


class WatchProcess:
    def __init__(self, workspace: Path, *args: str):
        self.proc = subprocess.Popen(
            [LUMEN_EX, "watch", "1", "--workspace", str(workspace), "--sandbox", best_sandbox(),
             "--seed", "3", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, COLUMNS="120"),
            preexec_fn=interruptible)
        self.out = b""

    def wait_footers(self, n: int, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while self.out.count(b"Ctrl-C to stop") < n:
            assert time.monotonic() < deadline, f"no footer in time:\n{self.out.decode()}"
            assert self.proc.poll() is None, f"watch exited:\n{self.out.decode()}\n{self.proc.stderr.read().decode()}"
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                self.out += os.read(self.proc.stdout.fileno(), 1 << 16)
        return self.out.decode()

    def interrupt(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return self.proc.returncode, self.proc.stderr.read().decode()


def interrupt_and_check_nothing_is_left(watch: WatchProcess, children: list[Proc]) -> None:
    """Ctrl-C the watcher: it exits 0 without a traceback, and its workers and cgroups are gone."""
    assert watch.proc.poll() is None, f"the watcher ended early: {watch.proc.returncode}"
    try:
        code, err = watch.interrupt()
    finally:
        if watch.proc.poll() is None:
            watch.proc.kill()
    assert code == 0, err
    left = still_running_after(children)
    assert not left, [str(p) for p in left]
    assert not _cgroups_of(watch.proc.pid)
    assert "Traceback" not in err


@pytest.mark.slow
def test_ctrl_c_exits_0_and_leaves_no_worker_or_cgroup(workspace):
    watch = WatchProcess(workspace)
    try:
        text = watch.wait_footers(1)
        assert "lumen-ex check 1" in text and "watching 01-attention/attention.py (Ctrl-C to stop)" in text
        save(exercise_file(workspace), REFERENCE)
        text = watch.wait_footers(2)
        assert "All tests passed" in text.split("Ctrl-C to stop")[1]
        # the next worker is launched as soon as the result is shown
        assert wait_until(lambda: descendants(watch.proc.pid), 30), "a worker should be kept waiting for the next save"
        children = list(descendants(watch.proc.pid).values())
    except BaseException:
        watch.proc.kill()
        raise
    interrupt_and_check_nothing_is_left(watch, children)


@pytest.mark.slow
def test_the_first_failing_test_is_shown_before_the_rest_of_the_check(workspace):
    """`lumen-ex watch` prints the title of the first test that fails as soon as it fails, then the
    whole result when the check ends (issue "The learner's loop": the first failure as soon as it is known)."""
    watch = WatchProcess(workspace)
    try:
        first = watch.wait_footers(1)
        assert first.count("failing so far") == 1 and first.index("failing so far") < first.index("first failure:")
        save(exercise_file(workspace), REFERENCE)                 # a passing check: nothing early
        second = watch.wait_footers(2)[len(first):]
        assert "failing so far" not in second and "All tests passed" in second
        save(exercise_file(workspace), NO_SCALE)
        third = watch.wait_footers(3)[len(first) + len(second):]
        assert third.count("failing so far") == 1, third
        assert third.index("failing so far") < third.index("first failure:"), third
        line = next(ln for ln in third.splitlines() if "failing so far" in ln)
        assert re.search(r"\(\d+ of \d+ tests run; the rest follows\)", line), line
    finally:
        watch.proc.kill()
        watch.proc.wait()


def test_progress_tells_the_first_failing_test_of_each_check(session_factory, workspace):
    """The progress plugin (src/lumen_ex/harness/progress.py) that watch and the playground listen to:
    each check's events count its failures and name the first failing test by the suite's title."""
    from lumen_ex.harness.progress import Progress

    progress = Progress()
    session = session_factory(plugins=(progress,))
    events: list[dict] = []
    progress.reset(events.append)
    save(exercise_file(workspace), NO_SCALE)
    result = session.check_once()
    failing = [t for t in result.tests if t.status.value == "fail"]
    assert failing and events[-1]["done"] == events[-1]["total"] == len(result.tests)
    assert events[-1]["failed"] == len(failing)
    told = [e for e in events if e["first_failed"]]
    assert told and told[0]["failed"] == 1 and {e["first_failed"] for e in told} == {told[0]["first_failed"]}
    assert told[0]["first_failed"] in {t.name for t in failing} or any(told[0]["first_failed"] in t.name for t in failing)
    assert [e for e in events if not e["first_failed"]], "no test had failed at the start"
    events.clear()
    progress.reset(events.append)
    save(exercise_file(workspace), REFERENCE)
    assert next_change(session) is not None
    assert session.check_once().status.value == "pass"
    assert events and all(e["failed"] == 0 and e["first_failed"] == "" for e in events)


@pytest.mark.slow
def test_ctrl_c_during_a_check_exits_0_and_leaves_nothing(workspace):
    slow_import = REFERENCE + SLOW_IMPORT.format(seconds=30)
    watch = WatchProcess(workspace)
    try:
        watch.wait_footers(1)
        save(exercise_file(workspace), slow_import)
        time.sleep(1.5)                         # the check is now waiting for the import
        assert wait_until(lambda: descendants(watch.proc.pid), 30)
        children = list(descendants(watch.proc.pid).values())
    except BaseException:
        watch.proc.kill()
        raise
    interrupt_and_check_nothing_is_left(watch, children)


def test_watch_has_help_and_is_in_the_readme():
    proc = subprocess.run([LUMEN_EX, "watch", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "Usage: lumen-ex watch" in proc.stdout and "--poll" in proc.stdout
    assert "lumen-ex watch" in (ROOT / "README.md").read_text()


@pytest.mark.slow
def test_exercise_5s_fresh_worker_for_memory_is_launched_in_advance(workspace):
    """Exercise 5's memory test asks for a fresh worker mid-suite (its baseline is torch alone). In
    watch mode that worker is a spare launched while the learner reads: handed to the check that
    needs it, never to two checks, kept when a check failed before needing it, and killed on close.
    A quadratic file still fails the memory test on the spare; the reference still passes."""
    from lumen_ex.core import catalog

    ex = catalog.load().find(5)
    buggy = ex.root / "corpus" / "buggy"
    reference = ex.reference_path.read_text()
    target = workspace / ex.dir / ex.file
    save(target, reference)
    session = WatchSession("5", workspace=workspace, sandbox=best_sandbox(), seed=7, device="cpu", record=False)
    try:
        assert session.check_once().status.value == "pass"       # asks for a fresh worker: launched then
        assert session.wait_worker() and session.launcher.spare is not None
        spare = session.launcher.spare

        save(target, (buggy / "no_scale.py").read_text())      # fails before the memory test needs it
        assert next_change(session) is not None
        assert session.check_once().status.value == "fail"
        assert session.launcher.spare is spare and spare.alive()   # unused: kept for the next check

        save(target, (buggy / "full_scores_then_blocks.py").read_text())
        assert next_change(session) is not None
        quadratic = session.check_once()
        memory = next(t for t in quadratic.tests if t.id.endswith("test_memory_linear_in_length"))
        assert memory.status.value == "fail" and memory.diagnosis.misconception == "quadratic-memory"
        assert not spare.alive()                                  # used by that check, and killed with it
        assert session.wait_worker() and session.launcher.spare not in (None, spare)

        save(target, reference + "\n# saved again\n")
        assert next_change(session) is not None
        assert session.check_once().status.value == "pass"
        assert session.wait_worker()
        last = session.launcher.spare
    finally:
        session.close()
    assert last is not None and not last.alive()                 # closing the session killed it
