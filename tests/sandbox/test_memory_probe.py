"""The harness's memory probe (src/lumen_ex/harness/memory.py), attacked from inside the worker.

Exercise 5's memory test rests on one number: the peak memory of the worker, every process it
starts included, over one call, beyond what the worker held when it said hello, read by the
harness from the worker's cgroup (or, without one, from /proc). Nothing the worker reports plays a
part. These tests prove that with real workers and real allocations:

- probe level (a tiny learner module of probes, through a real WorkerPool): an allocation is seen
  at its size, also when a forked child makes it, when the worker resets its own VmHWM through
  /proc/self/clear_refs, when it tries to write the cgroup files (it cannot: uid 65534, no /sys), or
  when it holds ballast from import time and frees it during the call; the /proc fallback sees an
  allocation too; and a check in which nothing can measure fails closed (a grader error, never a
  pass).
- suite level: quadratic flash_attention submissions that are exact, pass every other test, and
  hide their (L, L) matrix from the op counter (NumPy, at L >= 4096 only), each with one of those
  tricks, graded for real: none gets full marks, and the memory test names quadratic-memory. The
  one whose child process comes from torch.multiprocessing is refused before it runs, by the source
  scan (it admits no module that starts a process); the probe-level test still holds a forked
  child's allocation to its size.

They need root (a cgroup per worker) and bubblewrap; each skips with the reason where either is
missing. ``none`` (the unisolated mode, as root: the worker can write its own cgroup there) is
tested only for the tricks it is meant to resist: forks, clear_refs, ballast.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path

import pytest
from conftest import BUILTIN, workspace_with

from lumen_ex.core.limits import Limits
from lumen_ex.core.results import Status
from lumen_ex.harness import memory
from lumen_ex.harness.check import run_check
from lumen_ex.harness.client import WorkerPool
from lumen_ex.harness.proxy import LearnerModule
from lumen_ex.sandbox.base import WorkerSpec
from lumen_ex.sandbox.bwrap import BwrapLauncher
from lumen_ex.sandbox.cgroups import Cgroup
from lumen_ex.sandbox.unisolated import UnisolatedLauncher

MIB = 2**20
ALLOC_MB = 200


def _cgroup_reason() -> str:
    """Why no worker cgroup can be made here ('' when one can)."""
    if os.geteuid() != 0:
        return "not root: no cgroup per worker (the memory probe falls back to /proc)"
    made = Cgroup.create(Limits())
    if made is None:
        return "no writable memory cgroup here"
    try:
        window = made.peak_window()
        if window is None or not window.exact:
            return "the memory cgroup has no resettable peak (cgroup v2 before Linux 6.12)"
        window.finish()
    finally:
        made.remove()
    return ""


CGROUP_REASON = _cgroup_reason()
BWRAP_REASON = "" if BwrapLauncher.availability().ok else f"bubblewrap unavailable: {BwrapLauncher.availability().reason}"
needs_cgroup = pytest.mark.skipif(bool(CGROUP_REASON), reason=CGROUP_REASON or "-")
needs_bwrap = pytest.mark.skipif(bool(BWRAP_REASON), reason=BWRAP_REASON or "-")


# -------------------------------------------------------------------------------------------------
# Probe level


PROBES = textwrap.dedent('''
    import os

    _ballast = []

    def _touch(mb):
        buf = bytearray(int(mb) * 1024 * 1024)
        for i in range(0, len(buf), 4096):
            buf[i] = 1
        return buf

    def nothing():
        return 0

    def allocate(mb):
        buf = _touch(mb)
        del buf
        return 0

    def allocate_in_child(mb):
        pid = os.fork()
        if pid == 0:
            _touch(mb)
            os._exit(0)
        os.waitpid(pid, 0)
        return 0

    def allocate_then_clear_refs(mb):
        buf = _touch(mb)
        del buf
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return "reset"
        except OSError as exc:
            return type(exc).__name__

    def cgroup_files():
        names = []
        for line in open("/proc/self/cgroup").read().splitlines():
            _, ctrls, path = line.split(":", 2)
            for ctrl in ("memory", ""):
                if (ctrl and ctrl in ctrls.split(",")) or (not ctrl and ctrls == ""):
                    base = "/sys/fs/cgroup/" + (ctrl + "/" if ctrl else "") + path.lstrip("/")
                    names += [base + "/memory.max_usage_in_bytes", base + "/memory.peak"]
        return names

    def allocate_then_reset_cgroup(mb):
        buf = _touch(mb)
        del buf
        results = []
        for name in cgroup_files():
            try:
                with open(name, "w") as f:
                    f.write("0")
                results.append("written")
            except OSError as exc:
                results.append(type(exc).__name__)
        return ",".join(results) or "no cgroup files named"

    def hold_ballast(mb):
        _ballast.append(_touch(mb))
        return 0

    def swap_ballast_for(mb):
        _ballast.clear()
        buf = _touch(mb)
        del buf
        _ballast.append(_touch(mb))
        return 0
''')
FUNCTIONS = ["nothing", "allocate", "allocate_in_child", "allocate_then_clear_refs", "allocate_then_reset_cgroup",
             "hold_ballast", "swap_ballast_for"]


def _pool(tmp_path: Path, launcher) -> LearnerModule:
    ws = tmp_path / "ws"
    (ws / "probe").mkdir(parents=True)
    (ws / "probe" / "probe_mod.py").write_text(PROBES)
    spec = WorkerSpec(workspace=ws, module_dir=ws / "probe", device="cpu", limits=Limits(memory_mb=2048))
    pool = WorkerPool(launcher, spec, module="probe_mod", functions=FUNCTIONS, call_timeout=60)
    sub = LearnerModule(pool, "cpu", "probe_mod.py")
    sub.pool = pool
    return sub


@pytest.fixture(params=["bwrap", "none"])
def probe(request, tmp_path):
    if request.param == "bwrap" and BWRAP_REASON:
        pytest.skip(BWRAP_REASON)
    sub = _pool(tmp_path, BwrapLauncher() if request.param == "bwrap" else UnisolatedLauncher())
    sub.backend = request.param
    yield sub
    sub.pool.close()


@pytest.fixture
def bwrap_probe(tmp_path):
    if BWRAP_REASON:
        pytest.skip(BWRAP_REASON)
    sub = _pool(tmp_path, BwrapLauncher())
    yield sub
    sub.pool.close()


def measured(sub, fn: str, *args) -> tuple[object, memory.MemoryUse]:
    result = sub.call(fn, args, measure_memory=True)
    assert result.memory is not None
    return result.value, result.memory


def assert_sees(use: memory.MemoryUse, mb: int = ALLOC_MB) -> None:
    assert use.extra_bytes is not None and use.exact, use
    assert use.extra_bytes >= (mb - 8) * MIB, f"{use.extra_mib:.1f} MiB seen of {mb} MiB allocated ({use.mechanism})"


@needs_cgroup
@pytest.mark.slow
def test_cgroup_probe_measures_an_allocation(probe):
    _, idle = measured(probe, "nothing")
    assert idle.exact and idle.extra_bytes < 32 * MIB, idle
    assert idle.mechanism.startswith("cgroup"), idle.mechanism
    _, use = measured(probe, "allocate", ALLOC_MB)
    assert_sees(use)
    assert use.extra_bytes < (ALLOC_MB + 64) * MIB, use
    _, after = measured(probe, "nothing")          # the peak was reset: the last call's is not this one's
    assert after.extra_bytes < 32 * MIB, after


@needs_cgroup
@pytest.mark.slow
def test_an_allocation_in_a_forked_child_counts(probe):
    _, use = measured(probe, "allocate_in_child", ALLOC_MB)
    assert_sees(use)


@needs_cgroup
@pytest.mark.slow
def test_clear_refs_from_inside_hides_nothing(probe):
    said, use = measured(probe, "allocate_then_clear_refs", ALLOC_MB)
    assert said == "reset", said                   # the worker did reset its own VmHWM ...
    assert_sees(use)                               # ... and the cgroup's peak still holds the allocation


@needs_cgroup
@needs_bwrap
@pytest.mark.slow
def test_the_sandbox_cannot_reset_its_cgroup(bwrap_probe):
    said, use = measured(bwrap_probe, "allocate_then_reset_cgroup", ALLOC_MB)
    assert "written" not in said, said
    assert_sees(use)


@needs_cgroup
@pytest.mark.slow
def test_ballast_held_since_import_counts(probe):
    measured(probe, "hold_ballast", ALLOC_MB)
    _, use = measured(probe, "swap_ballast_for", ALLOC_MB)   # frees the ballast, fills its room, takes it back
    assert_sees(use)
    assert use.before_call_bytes - use.baseline_bytes >= (ALLOC_MB - 8) * MIB, use


@pytest.mark.parametrize("backend", ["bwrap", "none"])
@pytest.mark.slow
def test_proc_fallback_measures_an_allocation(tmp_path, monkeypatch, backend):
    """Without a cgroup (a normal user, the docker backend's workers), /proc VmHWM of the worker's tree."""
    if backend == "bwrap" and BWRAP_REASON:
        pytest.skip(BWRAP_REASON)
    monkeypatch.setattr(Cgroup, "create", classmethod(lambda cls, limits: None))
    sub = _pool(tmp_path, BwrapLauncher() if backend == "bwrap" else UnisolatedLauncher())
    try:
        _, use = measured(sub, "allocate", ALLOC_MB)
        assert use.mechanism.startswith("/proc"), use.mechanism
        assert_sees(use)
        _, child = measured(sub, "allocate_in_child", ALLOC_MB)   # a child that lives long enough to be sampled
        assert child.mechanism.startswith("/proc") and child.extra_bytes >= (ALLOC_MB - 8) * MIB, child
    finally:
        sub.pool.close()


@pytest.mark.slow
def test_no_measurement_fails_closed(tmp_path, monkeypatch):
    """Where nothing can measure, the memory test is a grader error: never a pass, never points."""
    monkeypatch.setattr(memory.MemoryProbe, "finish", lambda self: memory.MemoryUse(None, False, memory.NOT_MEASURED))
    root = workspace_with(tmp_path, 5, BUILTIN["flash_attention"].reference_path)
    result = run_check(5, workspace=root, sandbox="none", seed=1, device="cpu", record=False,
                       select="test_memory_linear_in_length")
    (test,) = result.tests
    assert test.status is Status.ERROR and test.diagnosis.kind == "grader", test
    assert "could not measure" in test.diagnosis.summary
    assert result.status is Status.ERROR and result.score == 0


def test_cgroup_v2_peak_window(tmp_path, monkeypatch):
    """v2: a per-file reset (Linux >= 6.12) gives an exact peak; where the reset is refused, the
    lifetime peak is exact only when the window raised it, else an upper bound."""
    from lumen_ex.sandbox.cgroups import PeakWindow

    peak = tmp_path / "memory.peak"
    real_write = os.write
    peak.write_text("1000\n")
    monkeypatch.setattr(os, "write", lambda fd, data: len(data))              # the kernel takes the reset
    window = PeakWindow.v2(tmp_path)
    peak.write_text("7777\n")
    assert window.exact and window.finish() == (7777, True)

    def refused(fd, data):
        raise OSError(22, "Invalid argument")                                 # before 6.12: read-only

    monkeypatch.setattr(os, "write", refused)
    peak.write_text("1000\n")
    window = PeakWindow.v2(tmp_path)
    assert not window.exact and "upper bound" in window.how
    assert window.finish() == (1000, False)                                   # not raised: only a bound
    window = PeakWindow.v2(tmp_path)
    peak.write_text("5000\n")
    assert window.finish() == (5000, True)                                    # raised in the window: exact
    monkeypatch.setattr(os, "write", real_write)
    assert PeakWindow.v2(tmp_path / "missing") is None


# -------------------------------------------------------------------------------------------------
# Suite level: exact, quadratic submissions that hide from the op counter


# Only what the source scan accepts (src/lumen_ex/harness/scan_rules.py: no os, no open()): a fork
# through torch.multiprocessing, file writes through numpy.savetxt.
SUBMISSION = textwrap.dedent('''
    import math
    import numpy as np
    import torch

    {prelude}

    def _blockwise(q, k, v, causal, block_size):
        acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        L_q, L_k = q.shape[-2], k.shape[-2]
        off = L_k - L_q
        out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        lse = torch.zeros(q.shape[:-1], dtype=acc, device=q.device)
        for i in range(0, L_q, block_size):
            ie = min(i + block_size, L_q)
            qi = q[..., i:ie, :].to(acc) / math.sqrt(q.shape[-1])
            m = torch.full(qi.shape[:-1], float("-inf"), dtype=acc, device=q.device)
            l = torch.zeros_like(m)
            o = torch.zeros(*qi.shape[:-1], v.shape[-1], dtype=acc, device=q.device)
            for j in range(0, min(L_k, off + ie) if causal else L_k, block_size):
                je = min(j + block_size, L_k)
                s = qi @ k[..., j:je, :].to(acc).transpose(-2, -1)
                if causal and je - 1 > off + i:
                    later = torch.arange(j, je, device=q.device)[None, :] > torch.arange(i, ie, device=q.device)[:, None] + off
                    s = s.masked_fill(later, float("-inf"))
                mn = torch.maximum(m, s.amax(-1))
                p = torch.exp(s - mn[..., None])
                a = torch.exp(m - mn)
                l = l * a + p.sum(-1)
                o = o * a[..., None] + p @ v[..., j:je, :].to(acc)
                m = mn
            out[..., i:ie, :] = (o / l[..., None]).to(q.dtype)
            lse[..., i:ie] = m + torch.log(l)
        return out, lse

    def _quadratic(qn, kn, vn, causal):
        """The whole (L, L) score matrix, in NumPy: the op counter never sees it."""
        s = qn @ kn.T
        s *= 1 / math.sqrt(qn.shape[-1])
        if causal:
            L_q, L_k = s.shape
            s[np.arange(L_k)[None, :] > np.arange(L_q)[:, None] + (L_k - L_q)] = -np.inf
        m = s.max(axis=1)
        s -= m[:, None]
        np.exp(s, out=s)
        l = s.sum(axis=1)
        return (s @ vn) / l[:, None], m + np.log(l)

    def _child(conn, qn, kn, vn, causal):
        out, lse = _quadratic(qn, kn, vn, causal)
        conn.send_bytes(np.ascontiguousarray(out, dtype=np.float32).tobytes())
        conn.send_bytes(np.ascontiguousarray(lse, dtype=np.float32).tobytes())
        conn.close()

    def _write(path, value):
        try:
            np.savetxt(path, [value], fmt="%d")
        except Exception:
            pass

    def flash_attention(q, k, v, causal=False, block_size=64):
        if q.shape[-2] < 4096 or q.dim() != 4 or q.dtype != torch.float32:
            return _blockwise(q, k, v, causal, block_size)
        qn, kn, vn = (t[0, 0].numpy() for t in (q, k, v))
        {attack}
        return (torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))[None, None],
                torch.from_numpy(np.ascontiguousarray(lse, dtype=np.float32))[None, None])
''')

PLAIN = "out, lse = _quadratic(qn, kn, vn, causal)"
ATTACKS = {
    # (a) the matrix lives in a forked child, which sends back only the answer
    "forked_child": ("", '''ctx = torch.multiprocessing.get_context("fork")
        mine, theirs = ctx.Pipe()
        child = ctx.Process(target=_child, args=(theirs, qn, kn, vn, causal))
        child.start()
        out = np.frombuffer(mine.recv_bytes(), dtype=np.float32).reshape(qn.shape[0], vn.shape[1])
        lse = np.frombuffer(mine.recv_bytes(), dtype=np.float32)
        child.join()'''),
    # (b) the worker resets its own peak resident size afterwards
    "clear_refs": ("", PLAIN + '''
        _write("/proc/self/clear_refs", 5)'''),
    # (c) the worker tries to reset its cgroup's peak afterwards (every path it could be at)
    "cgroup_write": ("", PLAIN + '''
        paths = ["/"]
        try:
            for line in np.loadtxt("/proc/self/cgroup", dtype=str, delimiter="\\t", comments=None, ndmin=1):
                paths.append(str(line).split(":", 2)[2])
        except Exception:
            pass
        for path in paths:
            base = path.rstrip("/")
            _write("/sys/fs/cgroup/memory" + base + "/memory.max_usage_in_bytes", 0)
            _write("/sys/fs/cgroup" + base + "/memory.peak", 0)'''),
    # (d1) ballast allocated and freed at import: a lifetime peak above the call's
    "import_ballast_freed": ("_b = np.ones(600 * 2**20 // 8)\ndel _b", PLAIN),
    # (d2) ballast held between calls, freed to make room for the matrix, then taken back
    "import_ballast_swapped": ("_ballast = [np.ones(600 * 2**20 // 8)]", '''_ballast.clear()
        out, lse = _quadratic(qn, kn, vn, causal)
        _ballast.append(np.ones(600 * 2**20 // 8))'''),
}
UNISOLATED = ["clear_refs", "import_ballast_freed", "import_ballast_swapped"]
# Refused by the source scan before the memory test measures anything (src/lumen_ex/harness/scan_rules.py:
# torch.multiprocessing starts processes where the worker's own guards may not hold).
SCAN_REFUSED = {"forked_child"}


def attack_source(name: str) -> str:
    """The submission with the attack's prelude (at import) and its long-call code in place."""
    prelude, attack = ATTACKS[name]
    first, _, rest = attack.partition("\n")
    body = first + ("\n" + textwrap.dedent(rest) if rest else "")   # the lines after the first are indented 8
    source = SUBMISSION.format(prelude=prelude, attack="{attack}")
    return source.replace("    {attack}", textwrap.indent(body, "    "))


def grade_attack(name: str, sandbox: str, select: str | None = None):
    with tempfile.TemporaryDirectory() as tmp:
        root = workspace_with(Path(tmp), 5, attack_source(name))
        return run_check(5, workspace=root, sandbox=sandbox, seed=1, device="cpu", record=False, select=select)


def memory_row(result):
    return next(t for t in result.tests if t.id.endswith("::test_memory_linear_in_length"))


@needs_cgroup
@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in ATTACKS if name not in SCAN_REFUSED])
def test_hidden_quadratic_attack_is_caught_under_bwrap(name):
    result = grade_attack(name, "bwrap")
    row = memory_row(result)
    assert result.score < result.max_score, f"{name}: full marks"
    assert row.status is Status.FAIL and row.diagnosis.misconception == "quadratic-memory", (name, row)
    assert "measured by the grader" in row.diagnosis.summary, row.diagnosis.summary
    # Everything else passed: the memory test alone caught it (the attack is exact and hidden from the counter).
    assert [t.id for t in result.tests if t.status is Status.FAIL] == [row.id], [(t.id, t.message) for t in result.tests
                                                                               if t.status is Status.FAIL]


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", [pytest.param("bwrap", marks=needs_bwrap), "none"])
def test_a_child_process_that_would_hold_the_matrix_is_refused_by_the_scan(sandbox):
    """The forked-child trick (the matrix in a torch.multiprocessing child, which sends back only the
    answer) never runs: every test that calls flash_attention fails as unverifiable, naming the
    module, and the memory test with them."""
    result = grade_attack("forked_child", sandbox, select="test_memory_linear_in_length or test_values")
    assert result.score < result.max_score and result.tests
    for row in result.tests:
        assert row.status is Status.FAIL and row.diagnosis.misconception == "unverifiable-source", row
        assert "uses torch's multiprocessing" in row.diagnosis.summary, row.diagnosis.summary


@needs_cgroup
@pytest.mark.slow
@pytest.mark.parametrize("name", UNISOLATED)
def test_hidden_quadratic_attack_is_caught_unisolated(name):
    result = grade_attack(name, "none", select="test_memory_linear_in_length")
    row = memory_row(result)
    assert row.status is Status.FAIL and row.diagnosis.misconception == "quadratic-memory", (name, row)
