"""Hostile submissions for exercise 1: every one must FAIL, under the real sandbox.

Each file in corpus/hostile/ is a real attack, not a simulation, and starts with::

    # attack: <one line>
    # category: process | forging | cheating | secrets

Every attack is graded through the real entry point (lumen_ex.harness.check.run_check) under bubblewrap.
The in-process tricks that process separation alone defeats (monkeypatching, subclasses, frame
walking, sys.exit, forged stdout ...) are graded under the unisolated mode ("none") as well, since
that mode must defeat them too. Attacks that only a sandbox can stop (killing the grader, reading
its files or secrets, writing into the workspace) run under bwrap only.

Whatever a submission does, the verdict must come from the harness's own records:

- the status is fail or error, never pass, and the score is below the maximum;
- no test is blamed on the grader ("grader" diagnosis): a hostile worker must not be able to turn
  its own failure into "a bug in lumen-ex";
- the result record is complete and valid JSON, and no worker cgroup is left behind.

A session-end summary line reports how many attacks ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import CORPUS, requires_bwrap, tree_hash, workspace_with
from corpus_headers import headers

from lumen_ex.core import catalog
from lumen_ex.core.results import RunResult, Status
from lumen_ex.harness.check import run_check

pytestmark = requires_bwrap

HOSTILE = CORPUS / "hostile"
ATTACKS = sorted(HOSTILE.glob("*.py"))
CATEGORIES = ("process", "forging", "cheating", "secrets")
EXERCISE = catalog.load().find(1)

# Attacks that process separation alone defeats: also graded under the unisolated mode.
IN_PROCESS = {"sys_exit", "atexit_exit", "keyboard_interrupt", "exit_after_fake_pass",
              "monkeypatch_comparisons", "subclass_eq_true", "subclass_torch_function", "lazy_subclass",
              "frame_gc_search", "fake_output_all_fds", "fake_reply_frame", "tamper_worker_replies",
              "inconsistent_shapes", "forbidden_alias", "forbidden_evasion", "daemon_escape"}
# Graded by the generic test below; the others have a test of their own.
GENERIC = {"sys_exit", "atexit_exit", "keyboard_interrupt", "kill_parent", "killpg",
           "monkeypatch_comparisons", "subclass_eq_true", "subclass_torch_function", "lazy_subclass",
           "frame_gc_search", "fake_reply_frame", "tamper_worker_replies", "inconsistent_shapes",
           "forbidden_alias", "forbidden_evasion", "import_reference"}
DEDICATED = {"exit_after_fake_pass", "hang_at_import", "infinite_loop", "daemon_escape",
             "fake_output_all_fds", "write_result_files", "probe_hidden_files", "read_secrets"}
# Slow attacks (a full gc scan per call) run a subset of the suite: the verdict is the point.
SELECT = {"frame_gc_search": "test_values or test_mask or test_causal_mask"}
# The diagnosis kind the first failing test must have.
FIRST_KIND = {"forbidden_alias": "forbidden", "forbidden_evasion": "forbidden"}
# Where every failing test must say exactly this (kind, text in the summary).
ALL_FAILURES = {"sys_exit": ("exception", "SystemExit"),
                "keyboard_interrupt": ("exception", "KeyboardInterrupt")}


# -------------------------------------------------------------------------------------------------
# Running one attack, and the ledger printed at the end


@dataclass
class Run:
    attack: str
    sandbox: str
    result: RunResult
    seconds: float
    workspace: Path
    before: dict[str, str]
    after: dict[str, str]


LEDGER: list[Run] = []


@pytest.fixture(scope="module", autouse=True)
def attack_summary(request):
    yield
    if not LEDGER:
        return
    attacks = [r for r in LEDGER if r.attack != "control"]
    controls = [r for r in LEDGER if r.attack == "control"]
    by_sandbox = {}
    for run in attacks:
        by_sandbox[run.sandbox] = by_sandbox.get(run.sandbox, 0) + 1
    passed = [f"{r.attack}@{r.sandbox}" for r in attacks if r.result.status is Status.PASS]
    blamed = [f"{r.attack}@{r.sandbox}" for r in attacks
              if any(t.diagnosis and t.diagnosis.kind == "grader" for t in r.result.tests)]
    lines = [
        f"hostile submissions: {len({r.attack for r in attacks})} attacks in {len(attacks)} graded runs "
        f"({', '.join(f'{k}: {v}' for k, v in sorted(by_sandbox.items()))}), "
        f"{sum(r.seconds for r in LEDGER):.0f} s of grading",
        f"  attacks that PASSED: {len(passed)}{' (' + ', '.join(passed) + ')' if passed else ''}; "
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


def check(tmp: Path, name: str, sandbox: str, *, source: str | None = None, select: str | None = None,
          seed: int = 1234) -> Run:
    """Grade one attack for real, hashing the workspace before and after."""
    root = workspace_with(tmp / f"{name}-{sandbox}", 1,
                          source if source is not None else (HOSTILE / f"{name}.py").read_text())
    before = tree_hash(root)
    started = time.monotonic()
    result = run_check(1, workspace=root, sandbox=sandbox, seed=seed, device="cpu", record=False,
                       select=select)
    run = Run(name, sandbox, result, time.monotonic() - started, root, before, tree_hash(root))
    LEDGER.append(run)
    return run


def describe(result: RunResult) -> str:
    lines = [f"status={result.status.value} score={result.score:.3f}/{result.max_score:.3f} ({result.message})"]
    for t in result.tests:
        d = t.diagnosis
        lines.append(f"  {t.status.value:8} {t.id}" + (f"  [{d.kind}] {d.summary[:160]}" if d else ""))
    return "\n".join(lines)


def assert_defeated(run: Run) -> None:
    """The attack failed, and the record of it is the harness's own, whole and clean."""
    r = run.result
    assert r.status in (Status.FAIL, Status.ERROR), f"ATTACK PASSED: {run.attack} under {run.sandbox}\n{describe(r)}"
    assert r.score < r.max_score, describe(r)
    assert r.tests, "no test results at all"
    blamed = [t.id for t in r.tests if t.diagnosis and t.diagnosis.kind == "grader"]
    assert not blamed, (f"{run.attack} under {run.sandbox} made the grader fail (status {r.status.value}, "
                        f"blamed on lumen-ex) in {blamed}\n{describe(r)}")
    data = json.loads(r.to_json())
    assert data["status"] == r.status.value and data["status"] != "pass"
    assert r.sandbox.backend == run.sandbox
    assert not leftover_cgroups(), f"worker cgroups left behind after {run.attack}: {leftover_cgroups()}"


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


# -------------------------------------------------------------------------------------------------
# The control: an honest solution passes, identically, under both modes


@pytest.fixture(scope="module")
def control(tmp_path_factory) -> dict[str, Run]:
    tmp = tmp_path_factory.mktemp("control")
    source = (CORPUS / "attention" / "correct" / "einsum_arange.py").read_text()
    return {sb: check(tmp, "control", sb, source=source) for sb in ("bwrap", "none")}


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
# The generic attacks


GENERIC_RUNS = [(name, sb) for name in sorted(GENERIC) for sb in ("bwrap", "none")
                if sb == "bwrap" or name in IN_PROCESS]


@pytest.mark.parametrize("name,sandbox", GENERIC_RUNS, ids=[f"{n}-{s}" for n, s in GENERIC_RUNS])
def test_attack_fails(tmp_path, name, sandbox):
    run = check(tmp_path, name, sandbox, select=SELECT.get(name))
    assert_defeated(run)
    assert run.before == run.after, "the workspace changed"
    if name in FIRST_KIND:
        assert run.result.first_failure.diagnosis.kind == FIRST_KIND[name], describe(run.result)
    if name in ALL_FAILURES:
        kind, text = ALL_FAILURES[name]
        for t in run.result.tests:
            if t.status is not Status.PASS and t.status is not Status.SKIPPED and t.id != "test_attention.py::test_functions_defined":
                assert t.diagnosis.kind == kind and text in t.diagnosis.summary, describe(run.result)


# -------------------------------------------------------------------------------------------------
# Attacks with checks of their own


@pytest.fixture
def scan_blind(monkeypatch):
    """The source scan's refusals switched off (src/lumen_ex/harness/source_scan.py refuses `import os` and the
    like, so it would stop these attacks before the sandbox is tested): each layer proven alone."""
    from lumen_ex.harness.source_scan import SourceScan

    monkeypatch.setattr(SourceScan, "unverifiable", lambda self, fn: [])


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_exit_after_fake_pass_line(tmp_path, control, sandbox, scan_blind):
    """os._exit(0) after a fake pytest summary: that test crashes, the worker restarts, and every
    other test is still graded on its own merits."""
    run = check(tmp_path, "exit_after_fake_pass", sandbox)
    assert_defeated(run)
    r = run.result
    assert [t.id for t in r.tests] == [t.id for t in control[sandbox].result.tests], "the result is incomplete"
    crashed = [t for t in r.tests if t.diagnosis and t.diagnosis.kind == "crash"]
    assert crashed and all("exit code 0" in t.diagnosis.summary for t in crashed), describe(r)
    assert any(t.diagnosis and t.diagnosis.kind == "values" for t in r.tests), "later tests were not graded"
    assert any(t.status is Status.PASS and "causal_mask[" in t.id for t in r.tests), describe(r)
    assert "27 passed" in "".join(t.output for t in crashed), "the forged line should be shown as output"


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


def test_infinite_loop_times_out_once(tmp_path):
    run = check(tmp_path, "infinite_loop", "bwrap", select="test_causal_mask_on_device or test_values")
    assert_defeated(run)
    r = run.result
    assert run.seconds < 30, f"the check took {run.seconds:.1f} s"
    timed_out = [t.id for t in r.tests if t.status is Status.TIMEOUT]
    assert timed_out == ["test_attention.py::test_causal_mask_on_device"], describe(r)
    values = [t for t in r.tests if "test_values" in t.id]
    assert len(values) == 4 and all(t.diagnosis and t.diagnosis.kind == "values" for t in values), describe(r)


def _marker_pids(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_daemon_does_not_outlive_the_check(tmp_path, sandbox):
    marker = f"lumen-hostile-{secrets.token_hex(8)}"
    source = (HOSTILE / "daemon_escape.py").read_text().replace("LUMEN-HOSTILE-MARKER", marker)
    run = check(tmp_path, "daemon_escape", sandbox, source=source)
    try:
        left = _marker_pids(marker)
        deadline = time.monotonic() + 2
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = _marker_pids(marker)
        assert "daemon spawned" in "".join(t.output for t in run.result.tests), "the daemon never started"
        assert not left, f"the daemon outlived the check under {sandbox}: pids {left}"
        assert_defeated(run)
    finally:
        for pid in _marker_pids(marker):   # ours: started by this test's submission
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_forged_output_stays_output(tmp_path, sandbox):
    """Fake pass lines and a fake result JSON, on stdout, stderr and every writable fd, are shown
    to the learner as output and play no part in the verdict."""
    run = check(tmp_path, "fake_output_all_fds", sandbox)
    assert_defeated(run)
    data = json.loads(run.result.to_json())
    assert "FORGED-RESULT-MARKER" in "".join(t["output"] for t in data["tests"]), "the forged output was not captured"
    for t in data["tests"]:
        t.pop("output")
    assert "FORGED-RESULT-MARKER" not in json.dumps(data), "forged text reached the verdict fields"
    assert any(t.diagnosis and t.diagnosis.kind == "protocol" for t in run.result.tests), \
        "bytes sprayed on the reply pipe should be caught as a protocol error"


def test_writes_cannot_reach_workspace_or_host(tmp_path):
    marker = f"lumen-hostile-{secrets.token_hex(8)}"
    source = (HOSTILE / "write_result_files.py").read_text().replace("LUMEN-HOSTILE-MARKER", marker)
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


def test_hidden_files_are_invisible_in_the_sandbox(tmp_path, scan_blind):
    """The probe's causal_mask is all True when it found the hidden suite or reference, else all
    False: the first wrong value it gets reported for says which."""
    run = check(tmp_path, "probe_hidden_files", "bwrap", select="test_causal_mask")
    assert_defeated(run)
    output = "".join(t.output for t in run.result.tests)
    assert _causal_got(run) == 0.0, f"the probe found hidden files under bwrap:\n{output[:2000]}"
    assert "PROBE found 0" in output, output[:2000]


def test_probe_does_find_the_files_when_not_isolated(tmp_path, scan_blind):
    """Positive control for the probe above: without a sandbox the same code finds them."""
    run = check(tmp_path, "probe_hidden_files", "none", select="test_causal_mask")
    assert_defeated(run)
    assert _causal_got(run) == 1.0, "the probe is blind: the bwrap result above proves nothing"


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
