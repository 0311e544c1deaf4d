"""Every attack on the grader, run for real, parametrised by the backends it concerns.

Two kinds of hostile submission for exercise 1, each graded through the real entry point
(lumen_ex.harness.check.run_check) exactly as ``lumen-ex check`` grades it:

- the hostile corpus, tests/corpus/hostile: each file is a real attack, not a simulation, and
  starts with::

      # attack: <one line>
      # category: process | forging | cheating | secrets

  Every one is graded under bubblewrap and under docker. The in-process tricks, IN_SLOT, have their
  worker forked as `lumen-ex grade` forks it: from a warm zygote under bwrap, in a grading slot under
  docker. Every other attack is graded as a cold `lumen-ex check` grades it: a fresh worker under bwrap,
  a cold `lumen-ex check --sandbox docker` (harness included) in a container. The in-process tricks that process
  separation alone defeats (monkeypatching, subclasses, frame walking, sys.exit, forged stdout
  ...) are graded under the unisolated mode ("none") as well, since that mode must defeat them
  too; the attacks that only a sandbox can stop (killing the grader, reading its files or secrets,
  writing into the workspace) are not. Some attacks have checks of their own under bwrap and
  "none" (the dedicated tests below); under docker each is graded by the generic test.
- resource and escape attacks, written out below (memory and fork bombs, disk fill, output flood,
  network, writes outside, the host's secret): each is graded under docker and under bwrap.

Whatever a submission does, the verdict must come from the harness's own records:

- the status is fail or error, never pass, and the score is below the maximum;
- the grader survives (more than one test result, and under docker a valid result document, not
  the host's "no document" error), and no test is blamed on the grader ("grader" diagnosis): a
  hostile worker must not be able to turn its own failure into "a bug in lumen-ex";
- the result record is complete and valid JSON, and it names the backend that graded it;
- nothing is left behind: no worker cgroup, no process the attack started (each one names itself
  with a token), no container (``docker ps -a`` filtered by the workspace), the workspace
  unchanged (and for the resource attacks the host's /tmp and home folder), and a secret set in
  this process's environment nowhere in the result.

The bwrap and "none" cases skip where bubblewrap is unavailable; the docker cases skip, with the
reason, where the docker engine or the grader image of this lumen-ex is missing. A session-end
summary reports how many attacks ran, per backend, and whether any got through.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import CORPORA, CORPUS, requires_bwrap, tree_hash, workspace_with
from corpus_headers import headers
from docker_support import (
    containers_of_workspace,
    docker_param,
    requires_docker,
    slot_launcher,
)
from proc_support import running_with, wait_until

from lumen_ex.core import catalog
from lumen_ex.core.results import RunResult, Status
from lumen_ex.harness.check import run_check, worker_spec

EXERCISE = catalog.load().find(1)
LIMITS = EXERCISE.limits

# The backends, as parameters that skip (with the reason) where the backend cannot run here. The
# unisolated mode is graded beside bwrap, so it skips with it.
BWRAP = pytest.param("bwrap", marks=requires_bwrap, id="bwrap")
NONE = pytest.param("none", marks=requires_bwrap, id="none")
BWRAP_AND_NONE = [BWRAP, NONE]
DOCKER_AND_BWRAP = [docker_param("docker"), BWRAP]
BACKEND_MARKS = {"bwrap": requires_bwrap, "none": requires_bwrap, "docker": requires_docker}


def on(name: str, backend: str) -> pytest.param:
    """The parameter (attack, backend), skipping as that backend's cases do."""
    return pytest.param(name, backend, marks=BACKEND_MARKS[backend], id=f"{name}-{backend}")


# -------------------------------------------------------------------------------------------------
# The hostile corpus and which backends each attack concerns

HOSTILE = CORPUS / "hostile"
ATTACKS = sorted(HOSTILE.glob("*.py"))
CATEGORIES = ("process", "forging", "cheating", "secrets")
# Replaced by a fresh token in every file that uses it (the processes it starts carry it).
MARKER = "LUMEN-HOSTILE-MARKER"

# Attacks that process separation alone defeats: also graded under the unisolated mode.
IN_PROCESS = {"sys_exit", "atexit_exit", "keyboard_interrupt", "exit_after_fake_pass",
              "monkeypatch_comparisons", "subclass_eq_true", "subclass_torch_function", "lazy_subclass",
              "frame_gc_search", "fake_output_all_fds", "fake_reply_frame", "tamper_worker_replies",
              "inconsistent_shapes", "forbidden_alias", "forbidden_evasion", "daemon_escape"}
# Graded by the generic test under bwrap (and "none"); the others have a test of their own there.
# Under docker every attack is graded by the generic test.
GENERIC = {"sys_exit", "atexit_exit", "keyboard_interrupt", "kill_parent", "killpg",
           "monkeypatch_comparisons", "subclass_eq_true", "subclass_torch_function", "lazy_subclass",
           "frame_gc_search", "fake_reply_frame", "tamper_worker_replies", "inconsistent_shapes",
           "forbidden_alias", "forbidden_evasion", "import_reference"}
DEDICATED = {"exit_after_fake_pass", "hang_at_import", "infinite_loop", "daemon_escape",
             "fake_output_all_fds", "write_result_files", "probe_hidden_files", "read_secrets"}
# Slow attacks (a full gc scan per call) run a subset of the suite: the verdict is the point.
SELECT = {"frame_gc_search": "test_values or test_mask or test_causal_mask"}
# The diagnosis kind the first failing test must have (under bwrap and "none").
FIRST_KIND = {"forbidden_alias": "forbidden", "forbidden_evasion": "forbidden"}
# Where every failing test must say exactly this (kind, text in the summary; under bwrap and "none").
ALL_FAILURES = {"sys_exit": ("exception", "SystemExit"),
                "keyboard_interrupt": ("exception", "KeyboardInterrupt")}

# Under docker, the in-process tricks that only the hidden suite's own checks meet (no forged output,
# reply or result document, no process outliving its worker) are graded as `lumen-ex grade --sandbox
# docker` and a repeated `lumen-ex check --sandbox docker` grade them: the harness in this process, the
# worker forked in a grading slot's container (src/lumen_ex/sandbox/docker_slot.py; the "docker" xdist
# group, which counts slots). Every other attack is graded by a cold check, as `lumen-ex check --sandbox
# docker` grades it with no server: the whole check, harness included, in a container of its own.
# tests/sandbox/test_zygote.py holds a slot's verdicts to a cold check's, sys_exit, atexit_exit and
# monkeypatch_comparisons among its files.
IN_SLOT = IN_PROCESS - {"exit_after_fake_pass", "fake_output_all_fds", "fake_reply_frame", "tamper_worker_replies",
                        "daemon_escape"}
# Under bwrap the same tricks are graded with the worker forked from a warm zygote of this process, as
# `lumen-ex grade --sandbox bwrap`, `lumen-ex watch` and the check server fork theirs ("bwrap-forked");
# every other GENERIC attack by a fresh worker, as a cold `lumen-ex check` starts it.
# tests/e2e/test_seed_stability.py grades every hostile file forked as well, at three seeds.
# Each warm backend: the sandbox it grades under, and the fixture of the launcher that forks its workers.
FORKED = {"docker-slot": ("docker", "docker_slot"), "bwrap-forked": ("bwrap", "forked_bwrap")}


def sandbox_of(backend: str) -> str:
    """The sandbox a test backend grades under ("docker-slot" and "bwrap-forked" fork their workers)."""
    return FORKED[backend][0] if backend in FORKED else backend


def on_docker(name: str) -> pytest.param:
    """The docker parameter of the generic test: ``docker-slot`` for IN_SLOT, else ``docker`` (cold)."""
    if name in IN_SLOT:
        return pytest.param(name, "docker-slot", marks=[*requires_docker, pytest.mark.xdist_group("docker")],
                            id=f"{name}-docker-slot")
    return on(name, "docker")


def on_bwrap(name: str) -> pytest.param:
    """The bwrap parameter of the generic test: ``bwrap-forked`` for IN_SLOT, else ``bwrap`` (a fresh worker)."""
    if name in IN_SLOT:
        return pytest.param(name, "bwrap-forked", marks=requires_bwrap, id=f"{name}-bwrap-forked")
    return on(name, "bwrap")


CORPUS_RUNS = ([on_bwrap(name) for name in sorted(GENERIC)]
               + [on(name, "none") for name in sorted(GENERIC & IN_PROCESS)]
               + [on_docker(path.stem) for path in ATTACKS])


# -------------------------------------------------------------------------------------------------
# Grading one attack, and the ledger printed at the end


@dataclass
class Run:
    attack: str
    backend: str
    result: RunResult
    seconds: float
    workspace: Path
    before: dict[str, str]
    after: dict[str, str]
    report: dict = field(default_factory=dict)     # the REPORT{...} an attack raised, if any
    survivors_gone: bool = True                     # no process carrying its token outlived the check
    kind: str = "corpus"                            # corpus | resource | control
    # This process's worker cgroups before the check: what it leaves is compared with these (another
    # test run earlier in the same process, under pytest-xdist, may have left one of its own).
    cgroups_before: frozenset = field(default_factory=lambda: frozenset(leftover_cgroups()))


LEDGER: list[Run] = []


@pytest.fixture(scope="module", autouse=True)
def attack_summary(request):
    """Print how many attacks ran, per backend, and whether any got through."""
    yield
    if not LEDGER:
        return
    attacks = [r for r in LEDGER if r.kind != "control"]
    controls = [r for r in LEDGER if r.kind == "control"]
    per = {}
    for run in attacks:
        per[run.backend] = per.get(run.backend, 0) + 1
    kinds = {kind: len({r.attack for r in attacks if r.kind == kind}) for kind in ("corpus", "resource")}
    passed = [f"{r.attack}@{r.backend}" for r in attacks if r.result.status is Status.PASS]
    blamed = [f"{r.attack}@{r.backend}" for r in attacks
              if any(t.diagnosis and t.diagnosis.kind == "grader" for t in r.result.tests)]
    lines = [
        f"attack suite: {len({r.attack for r in attacks})} attacks (hostile corpus: {kinds['corpus']}, "
        f"resource and escape: {kinds['resource']}) in {len(attacks)} graded runs "
        f"({', '.join(f'{k}: {v}' for k, v in sorted(per.items()))}), "
        f"{sum(r.seconds for r in LEDGER):.0f} s of grading",
        f"  attacks that PASSED (got through): {len(passed)}{' (' + ', '.join(passed) + ')' if passed else ''}; "
        f"blamed on the grader: {len(blamed)}{' (' + ', '.join(blamed) + ')' if blamed else ''}; "
        f"honest controls passed: {sum(r.result.status is Status.PASS for r in controls)}/{len(controls)}",
    ]
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        if reporter is not None:
            reporter.write("\n")
        for line in lines:
            if reporter is not None:
                reporter.write_line(line)
            else:
                print(line)


def leftover_cgroups() -> list[str]:
    """Worker cgroups of this process still present (each worker gets lumen-ex-<our pid>-N)."""
    from lumen_ex.sandbox import cgroups as limits

    return [str(p) for p in limits.worker_cgroups(os.getpid())]


def grade_attack(tmp: Path, name: str, backend: str, source: str, *, select: str | None = None,
                 seed: int = 1234, token: str | None = None, kind: str = "corpus", launcher=None) -> Run:
    """Grade one attack for real, hashing the workspace before and after. With ``token``, first
    wait (up to 10 s) for every process carrying it to be gone, and record whether they went.
    ``backend`` "docker-slot" ("bwrap-forked") grades under docker (bwrap) with ``launcher`` (a grading
    slot, a zygote) forking the workers."""
    root = workspace_with(tmp / f"{name}-{backend}", 1, source)
    before = tree_hash(root)
    if launcher is not None:    # its zygote, and the cgroup the zygote lives in, before the cgroups are listed
        launcher.start(worker_spec(EXERCISE, root, root / EXERCISE.dir / EXERCISE.file, "cpu"))
    cgroups = frozenset(leftover_cgroups())
    started = time.monotonic()
    result = run_check(1, workspace=root, sandbox=sandbox_of(backend), seed=seed, device="cpu",
                       record=False, select=select, launcher=launcher)
    seconds = time.monotonic() - started
    gone = wait_until(lambda: not running_with(token), timeout=10) if token else True
    run = Run(name, backend, result, seconds, root, before, tree_hash(root), _report(result), gone, kind, cgroups)
    LEDGER.append(run)
    return run


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


def describe(result: RunResult) -> str:
    lines = [f"status={result.status.value} score={result.score:.3f}/{result.max_score:.3f} ({result.message})"]
    for t in result.tests:
        d = t.diagnosis
        lines.append(f"  {t.status.value:8} {t.id}" + (f"  [{d.kind}] {d.summary[:200]}" if d else ""))
    return "\n".join(lines)


def _first_message(result: RunResult) -> str:
    return next((t.diagnosis.summary for t in result.tests if t.diagnosis), "")


def assert_defeated(run: Run) -> None:
    """The attack failed, the grader survived it, and the record of it is the harness's own,
    whole and clean."""
    r = run.result
    assert r.status in (Status.FAIL, Status.ERROR), f"ATTACK PASSED: {run.attack} under {run.backend}\n{describe(r)}"
    assert r.score < r.max_score, describe(r)
    assert r.tests, "no test results at all"
    assert len(r.tests) > 1, f"the grader itself did not survive {run.attack} under {run.backend}:\n{describe(r)}"
    blamed = [t.id for t in r.tests if t.diagnosis and t.diagnosis.kind == "grader"]
    assert not blamed, (f"{run.attack} under {run.backend} made the grader fail (status {r.status.value}, "
                        f"blamed on lumen-ex) in {blamed}\n{describe(r)}")
    data = json.loads(r.to_json())
    assert data["status"] == r.status.value and data["status"] != "pass"
    assert r.sandbox.backend == sandbox_of(run.backend)
    left = sorted(set(leftover_cgroups()) - run.cgroups_before)
    assert not left, f"worker cgroups left behind after {run.attack}: {left}"


@pytest.fixture(scope="module")
def docker_slot():
    """One grading slot for the module's IN_SLOT attacks, as one `lumen-ex grade --sandbox docker`
    process keeps one for its whole batch: each attack's worker is forked in it, fresh."""
    launcher = slot_launcher()
    yield launcher
    launcher.close()


@pytest.fixture
def secret_env(monkeypatch):
    """A secret in this process's environment, as an LMS token would be on a grading server."""
    name = f"LUMEN_TEST_SECRET_{secrets.token_hex(4).upper()}"
    value = f"s3cr3t-{secrets.token_hex(16)}"
    monkeypatch.setenv(name, value)
    return name, value


def test_every_attack_has_headers_and_a_plan():
    assert len(ATTACKS) >= 20, [p.stem for p in ATTACKS]
    for path in ATTACKS:
        h = headers(path)
        assert h.get("attack"), f"{path.name}: missing '# attack:' header"
        assert h.get("category") in CATEGORIES, f"{path.name}: category {h.get('category')!r}"
    names = {p.stem for p in ATTACKS}
    assert names == GENERIC | DEDICATED, f"attacks without a test: {names - GENERIC - DEDICATED}, " \
                                         f"tests without an attack: {(GENERIC | DEDICATED) - names}"
    assert GENERIC.isdisjoint(DEDICATED) and IN_PROCESS <= names
    docker_runs = {p.values[0] for p in CORPUS_RUNS if p.values[1].startswith("docker")}
    assert docker_runs == names, f"attacks not graded under docker: {names - docker_runs}"


# -------------------------------------------------------------------------------------------------
# The control: an honest solution passes, identically, under bwrap and the unisolated mode


@pytest.fixture(scope="module")
def control(tmp_path_factory) -> dict[str, Run]:
    tmp = tmp_path_factory.mktemp("control")
    source = (CORPORA["attention"] / "correct" / "einsum_arange.py").read_text()
    return {sb: grade_attack(tmp, "control", sb, source, kind="control") for sb in ("bwrap", "none")}


@requires_bwrap
@pytest.mark.slow
def test_control_honest_solution_passes_identically(control):
    views = {}
    for sb, run in control.items():
        r = run.result
        assert r.status is Status.PASS, f"{sb}:\n{describe(r)}"
        assert r.score == pytest.approx(r.max_score) and r.max_score == pytest.approx(EXERCISE.max_score)
        assert run.before == run.after
        views[sb] = [(t.id, t.status, round(t.score, 6), round(t.max_score, 6)) for t in r.tests]
    assert views["bwrap"] == views["none"]


# -------------------------------------------------------------------------------------------------
# The hostile corpus, by the generic test: every attack under docker, GENERIC under bwrap (and "none")


@pytest.mark.parametrize("name,backend", CORPUS_RUNS)
@pytest.mark.slow
def test_attack_fails(request, tmp_path, name, backend, secret_env):
    marker = f"lumen-hostile-{secrets.token_hex(8)}"
    source = (HOSTILE / f"{name}.py").read_text().replace(MARKER, marker)
    slot = request.getfixturevalue(FORKED[backend][1]) if backend in FORKED else None
    forked = slot.forked if slot else 0
    run = grade_attack(tmp_path, name, backend, source, select=SELECT.get(name), token=marker, launcher=slot)
    if slot:   # forked, not started by the fallback (a fresh worker, in a container of its own under docker)
        assert slot.forked > forked, f"{name}: no worker was forked"
    assert_defeated(run)
    assert run.before == run.after, "the workspace changed"
    assert run.survivors_gone, f"a process of {name} outlived the check under {backend}: {[str(p) for p in running_with(marker)]}"
    if backend.startswith("docker"):
        assert containers_of_workspace(run.workspace) == [], "a container was left behind"
    assert secret_env[1] not in run.result.to_json(), f"the host's secret reached the result under {backend}"
    # The verdict details below were written for a harness on this side: bwrap, the unisolated mode and a
    # docker slot (a cold docker check's harness runs in its container).
    if name in FIRST_KIND and backend != "docker":
        assert run.result.first_failure.diagnosis.kind == FIRST_KIND[name], describe(run.result)
    if name in ALL_FAILURES and backend != "docker":
        kind, text = ALL_FAILURES[name]
        for t in run.result.tests:
            if t.status is not Status.PASS and t.status is not Status.SKIPPED and t.id != "test_attention.py::test_functions_defined":
                assert t.diagnosis.kind == kind and text in t.diagnosis.summary, describe(run.result)
    # The DEDICATED attacks reach this test under docker only; their own tests check more under bwrap.
    output = "".join(t.output for t in run.result.tests)
    if name == "probe_hidden_files":
        assert "PROBE found 0" in output, output[:2000]
    if name == "write_result_files":
        assert not re.search(r"^WROTE /(workspace|results)", output, re.M), output[:2000]


# -------------------------------------------------------------------------------------------------
# Hostile attacks with checks of their own (under bwrap, and "none" where it must defeat them too)


def check(tmp: Path, name: str, backend: str, *, source: str | None = None, select: str | None = None) -> Run:
    """Grade the corpus attack ``name`` (or ``source`` in its place) for real."""
    return grade_attack(tmp, name, backend, source if source is not None else (HOSTILE / f"{name}.py").read_text(),
                        select=select)


@pytest.fixture
def scan_blind(monkeypatch):
    """The source scan's refusals switched off (src/lumen_ex/harness/source_scan.py refuses `import os` and the
    like, so it would stop these attacks before the sandbox is tested): each layer proven alone."""
    from lumen_ex.harness.source_scan import SourceScan

    monkeypatch.setattr(SourceScan, "unverifiable", lambda self, fn: [])


@pytest.mark.parametrize("backend", BWRAP_AND_NONE)
@pytest.mark.slow
def test_exit_after_fake_pass_line(tmp_path, control, backend, scan_blind):
    """os._exit(0) after a fake pytest summary: that test crashes, the worker restarts, and every
    other test is still graded on its own merits."""
    run = check(tmp_path, "exit_after_fake_pass", backend)
    assert_defeated(run)
    r = run.result
    assert [t.id for t in r.tests] == [t.id for t in control[backend].result.tests], "the result is incomplete"
    crashed = [t for t in r.tests if t.diagnosis and t.diagnosis.kind == "crash"]
    assert crashed and all("exit code 0" in t.diagnosis.summary for t in crashed), describe(r)
    assert any(t.diagnosis and t.diagnosis.kind == "values" for t in r.tests), "later tests were not graded"
    assert any(t.status is Status.PASS and "causal_mask[" in t.id for t in r.tests), describe(r)
    assert "27 passed" in "".join(t.output for t in crashed), "the forged line should be shown as output"


@requires_bwrap
@pytest.mark.slow
def test_hang_at_import_is_remembered(tmp_path, control):
    """A module that never finishes importing costs one call limit, not one per test."""
    run = check(tmp_path, "hang_at_import", "bwrap")
    assert_defeated(run)
    r = run.result
    assert run.seconds < 40, f"the check took {run.seconds:.1f} s"
    assert [t.id for t in r.tests] == [t.id for t in control["bwrap"].result.tests], describe(r)
    for t in r.tests:
        if t.group == "cuda":      # without a GPU the GPU test is skipped, whatever the file does
            assert t.status is Status.SKIPPED, describe(r)
            continue
        assert t.status is Status.TIMEOUT and t.diagnosis.kind == "timeout", describe(r)
        assert "import" in t.diagnosis.summary, describe(r)


@requires_bwrap
@pytest.mark.slow
def test_infinite_loop_times_out_once(tmp_path):
    run = check(tmp_path, "infinite_loop", "bwrap", select="test_causal_mask_on_device or test_values")
    assert_defeated(run)
    r = run.result
    # one call limit (10 s), plus what a busy machine kept the loop waiting for a CPU, which the
    # limit leaves out and the message states (src/lumen_ex/harness/deadline.py)
    waited = sum(float(s) for t in r.tests for s in re.findall(r"waited ([0-9.]+) s for a CPU", t.message))
    assert run.seconds < 30 + waited, f"the check took {run.seconds:.1f} s ({waited:.1f} s of it waiting for a CPU)"
    timed_out = [t.id for t in r.tests if t.status is Status.TIMEOUT]
    assert timed_out == ["test_attention.py::test_causal_mask_on_device"], describe(r)
    values = [t for t in r.tests if "test_values" in t.id]
    assert len(values) == 4 and all(t.diagnosis and t.diagnosis.kind == "values" for t in values), describe(r)


@pytest.mark.parametrize("backend", BWRAP_AND_NONE)
@pytest.mark.slow
def test_daemon_does_not_outlive_the_check(tmp_path, backend):
    marker = f"lumen-hostile-{secrets.token_hex(8)}"
    source = (HOSTILE / "daemon_escape.py").read_text().replace(MARKER, marker)
    run = check(tmp_path, "daemon_escape", backend, source=source)
    try:
        wait_until(lambda: not running_with(marker), timeout=10)
        left = [str(p) for p in running_with(marker)]
        assert "daemon spawned" in "".join(t.output for t in run.result.tests), "the daemon never started"
        assert not left, f"the daemon outlived the check under {backend}: {left}"
        assert_defeated(run)
    finally:
        for proc in running_with(marker):   # ours: started by this test's submission
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.parametrize("backend", BWRAP_AND_NONE)
@pytest.mark.slow
def test_forged_output_stays_output(tmp_path, backend):
    """Fake pass lines and a fake result JSON, on stdout, stderr and every writable fd, are shown
    to the learner as output and play no part in the verdict."""
    run = check(tmp_path, "fake_output_all_fds", backend)
    assert_defeated(run)
    data = json.loads(run.result.to_json())
    assert "FORGED-RESULT-MARKER" in "".join(t["output"] for t in data["tests"]), "the forged output was not captured"
    for t in data["tests"]:
        t.pop("output")
    assert "FORGED-RESULT-MARKER" not in json.dumps(data), "forged text reached the verdict fields"
    assert any(t.diagnosis and t.diagnosis.kind == "protocol" for t in run.result.tests), \
        "bytes sprayed on the reply pipe should be caught as a protocol error"


@requires_bwrap
@pytest.mark.slow
def test_writes_cannot_reach_workspace_or_host(tmp_path):
    marker = f"lumen-hostile-{secrets.token_hex(8)}"
    source = (HOSTILE / "write_result_files.py").read_text().replace(MARKER, marker)
    run = check(tmp_path, "write_result_files", "bwrap", source=source)
    assert_defeated(run)
    assert run.before == run.after, "the workspace changed: " + str(
        {k for k in set(run.before) | set(run.after) if run.before.get(k) != run.after.get(k)})
    output = "".join(t.output for t in run.result.tests)
    assert "DENIED /workspace/" in output, f"the attack did not run as expected:\n{output[:2000]}"
    assert not re.search(r"^WROTE /workspace", output, re.M), output[:2000]
    for line in re.findall(r"^WROTE (\S+)$", output, re.M):
        assert line.startswith("/tmp/"), f"a write escaped the private /tmp: {line}"
    for host in ("/tmp/result.json", "/tmp/report.json", os.path.expanduser("~/result.json")):
        if os.path.exists(host):
            assert marker not in Path(host).read_text(errors="replace"), f"{host} on the host was written"


def _causal_got(run: Run) -> float:
    t = next(t for t in run.result.tests if t.id.endswith("test_causal_mask[square]"))
    assert t.diagnosis is not None and t.diagnosis.kind == "values", describe(run.result)
    return t.diagnosis.details["got_value"]


@requires_bwrap
@pytest.mark.slow
def test_hidden_files_are_invisible_in_the_sandbox(tmp_path, scan_blind):
    """The probe's causal_mask is all True when it found the hidden suite or reference, else all
    False: the first wrong value it gets reported for says which."""
    run = check(tmp_path, "probe_hidden_files", "bwrap", select="test_causal_mask")
    assert_defeated(run)
    output = "".join(t.output for t in run.result.tests)
    assert _causal_got(run) == 0.0, f"the probe found hidden files under bwrap:\n{output[:2000]}"
    assert "PROBE found 0" in output, output[:2000]


@requires_bwrap
@pytest.mark.slow
def test_probe_does_find_the_files_when_not_isolated(tmp_path, scan_blind):
    """Positive control for the probe above: without a sandbox the same code finds them."""
    run = check(tmp_path, "probe_hidden_files", "none", select="test_causal_mask")
    assert_defeated(run)
    assert _causal_got(run) == 1.0, "the probe is blind: the bwrap result above proves nothing"


@requires_bwrap
@pytest.mark.slow
def test_host_secret_never_reaches_the_record(tmp_path, monkeypatch):
    """The secret is in the grading process's environment from its start (so it is in
    /proc/<pid>/environ too, not only in os.environ): the submission dumps its environment and
    every /proc/*/environ and cmdline it can read, and none of it may carry the secret."""
    secret = f"s3cr3t-{secrets.token_hex(12)}"
    monkeypatch.setenv("LUMEN_EX_TEST_SECRET", secret)
    root = workspace_with(tmp_path / "secrets", 1, HOSTILE / "read_secrets.py")
    script = ("import sys\nfrom lumen_ex.harness.check import run_check\n"
              "r = run_check(1, workspace=sys.argv[1], sandbox='bwrap', seed=1234, device='cpu', record=False,"
              " select='test_values or test_causal_mask')\nprint(r.to_json())\n")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = RunResult.from_dict(json.loads(proc.stdout))
    LEDGER.append(Run("read_secrets", "bwrap", result, time.monotonic() - started, root, {}, {}))
    assert_defeated(LEDGER[-1])
    text = result.to_json()
    assert "/proc/1/cmdline" in text and "env HOME=/tmp" in text, "the dump was not captured"
    assert secret not in text, "the host secret leaked into the result record"
    assert secret.removeprefix("s3cr3t-") not in text


# -------------------------------------------------------------------------------------------------
# Resource and escape attacks, under docker and bwrap

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

RESOURCE_ATTACKS: dict[str, str] = {
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


def resource_attack(tmp_path: Path, name: str, backend: str, *, secret: tuple[str, str]) -> Run:
    """Grade one resource or escape attack for real and check everything that must hold after any
    attack: defeated, nothing left behind on the host, no connection to it, no secret in the result."""
    token = "lx" + secrets.token_hex(5)                 # 12 characters: fits a process name
    home = Path.home()
    host_files = [Path("/tmp") / token, home / token]
    listener = Listener()
    try:
        code = (PRELUDE + RESOURCE_ATTACKS[name]).replace("@TOKEN@", token)
        code = code.replace("@MEMORY_MB@", str(LIMITS.memory_mb))
        code = code.replace("@PORT@", str(listener.port)).replace("@HOST_IP@", host_ip())
        code = code.replace("@HOST_HOME@", str(home))
        run = grade_attack(tmp_path, name, backend, code, token=token, kind="resource")
        accepted = listener.accepted
    finally:
        listener.close()
    assert_defeated(run)
    assert run.survivors_gone, f"processes of {name} outlived the check under {backend}: {[str(p) for p in running_with(token)]}"
    if backend == "docker":
        assert containers_of_workspace(run.workspace) == [], "a container was left behind"
    assert run.before == run.after, f"{name} changed the workspace under {backend}"
    for path in host_files:
        assert not path.exists(), f"{name} wrote {path} on the host under {backend}"
    assert accepted == 0, f"{name} reached a listener on the host under {backend}"
    assert secret[1] not in run.result.to_json(), f"the host's secret reached the result under {backend}"
    return run


@pytest.mark.slow
@pytest.mark.parametrize("backend", DOCKER_AND_BWRAP)
def test_memory_bomb(tmp_path, backend, secret_env):
    run = resource_attack(tmp_path, "memory_bomb", backend, secret=secret_env)
    message = _first_message(run.result)
    stopped = re.search(r"memory bomb stopped at (\d+) MB", message)
    if stopped:                                    # the allocation was refused (RLIMIT_AS)
        assert int(stopped.group(1)) <= LIMITS.memory_mb, message
    else:                                          # or the worker was killed (cgroup / container OOM)
        assert "out of memory" in message or "SIGKILL" in message, message


@pytest.mark.slow
@pytest.mark.parametrize("backend", DOCKER_AND_BWRAP)
def test_memory_bomb_across_processes(tmp_path, backend, secret_env):
    run = resource_attack(tmp_path, "memory_bomb_processes", backend, secret=secret_env)
    assert run.seconds < 120


@pytest.mark.slow
@pytest.mark.parametrize("backend", DOCKER_AND_BWRAP)
def test_fork_bomb(tmp_path, backend, secret_env):
    run = resource_attack(tmp_path, "fork_bomb", backend, secret=secret_env)
    message = _first_message(run.result)
    forks = re.search(r"stopped after (\d+) forks", message)
    if forks:
        assert int(forks.group(1)) < LIMITS.processes + 64, message


@pytest.mark.parametrize("backend", DOCKER_AND_BWRAP)
@pytest.mark.slow
def test_disk_fill(tmp_path, backend, secret_env):
    run = resource_attack(tmp_path, "disk_fill", backend, secret=secret_env)
    report = run.report
    assert report, describe(run.result)
    assert report["tmp_mb"] <= LIMITS.tmp_mb + 8 and report["tmp"], report
    assert "WROTE" not in report.values(), report


@pytest.mark.parametrize("backend", DOCKER_AND_BWRAP)
@pytest.mark.slow
def test_output_flood(tmp_path, backend, secret_env):
    run = resource_attack(tmp_path, "output_flood", backend, secret=secret_env)
    assert run.seconds < 90, f"300 MB of output blocked the check for {run.seconds:.0f} s"
    outputs = [t.output for t in run.result.tests]
    assert max(len(o) for o in outputs) <= 8192 + 200, "the output was not capped"
    assert any(o.startswith("x" * 4096) for o in outputs), "the flood was not captured at all"


@pytest.mark.parametrize("backend", DOCKER_AND_BWRAP)
@pytest.mark.slow
def test_network(tmp_path, backend, secret_env):
    run = resource_attack(tmp_path, "network", backend, secret=secret_env)
    assert run.report, describe(run.result)
    assert "CONNECTED" not in run.report.values() and run.report.get("dns") != "RESOLVED", run.report


@pytest.mark.parametrize("backend", DOCKER_AND_BWRAP)
@pytest.mark.slow
def test_writes_outside(tmp_path, backend, secret_env):
    run = resource_attack(tmp_path, "write_outside", backend, secret=secret_env)
    assert run.report, describe(run.result)
    # Only the sandbox's private /tmp may take a write.
    wrote = [k for k, v in run.report.items() if v == "WROTE"]
    assert all(k.startswith("/tmp/") for k in wrote), run.report


@pytest.mark.parametrize("backend", DOCKER_AND_BWRAP)
@pytest.mark.slow
def test_secret_env(tmp_path, backend, secret_env):
    run = resource_attack(tmp_path, "read_secret_env", backend, secret=secret_env)
    assert run.report == {"hits": []}, run.report
    assert any('"HOME": "/tmp"' in t.output for t in run.result.tests), "the dump was not captured"
