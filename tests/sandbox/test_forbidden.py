"""Forbidden APIs and the per-step cost, proven from the trusted side.

The worker shares its process with the learner's code, so what it reports (its record of forbidden
calls, its work counter) is a hint that may only add a diagnosis. The proofs are the harness's own:

- forbidden APIs: the source scan (src/lumen_ex/harness/source_scan.py), unit-tested here on every alias and
  dynamic form; what it cannot follow is refused ("cannot be verified"), files over its bounds are
  refused ("too large to check"), never skipped, and its cost is linear in the file;
- the per-step cost of exercise 2: the step's time measured by the grader at T and 8T
  (src/lumen_ex/exercises/02-kv-cache/suite/test_kv_cache.py).

Then real attacks graded end to end under bwrap and docker: each must FAIL with a clear message.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest
from conftest import CORPORA, requires_bwrap, workspace_with
from docker_support import docker_param, slot_launcher

from lumen_ex.core import catalog
from lumen_ex.core.forbidden import ForbiddenAPI
from lumen_ex.core.results import RunResult, Status
from lumen_ex.harness import source_scan
from lumen_ex.harness.check import run_check
from lumen_ex.harness.source_scan import SourceScan, scan_file

FORBIDDEN = catalog.load().find(1).forbidden   # exercise 1's data, pack.toml's tables included
SDPA = "torch.nn.functional.scaled_dot_product_attention"
BACKENDS = [docker_param("docker"), pytest.param("bwrap", marks=requires_bwrap, id="bwrap")]


def scan(source: str, fn: str = "f") -> tuple[list[str], list[str]]:
    """(forbidden APIs reached from fn, reasons the scan cannot verify it)."""
    result = SourceScan(source, FORBIDDEN)
    return result.reached_from(fn), [f.why for f in result.unverifiable(fn)]


# -------------------------------------------------------------------------------------------------
# Aliases: every way of naming a forbidden API is found


FOUND = {
    "module-alias": "import torch.nn.functional as F\ndef f(q):\n    return F.scaled_dot_product_attention(q, q, q)\n",
    "from-import-module": "from torch.nn import functional\ndef f(q):\n    return functional.scaled_dot_product_attention(q, q, q)\n",
    "from-import-name": "from torch.nn.functional import scaled_dot_product_attention as s\ndef f(q):\n    return s(q, q, q)\n",
    "assigned-alias": "import torch.nn.functional as F\nfused = F.scaled_dot_product_attention\ndef f(q):\n    return fused(q, q, q)\n",
    "assigned-in-function": "import torch\ndef f(q):\n    g = torch.nn.functional\n    h = g.scaled_dot_product_attention\n    return h(q, q, q)\n",
    "getattr-literal": "import torch.nn.functional as F\ndef f(q):\n    return getattr(F, 'scaled_dot_product_attention')(q, q, q)\n",
    "getattr-chain": "import torch\ndef f(q):\n    return getattr(getattr(getattr(torch, 'nn'), 'functional'), 'scaled_dot_product_attention')(q, q, q)\n",
    "dunder-import-literal": "def f(q):\n    return __import__('torch').nn.functional.scaled_dot_product_attention(q, q, q)\n",
    "importlib-literal": "import importlib\ndef f(q):\n    return importlib.import_module('torch.nn.functional').scaled_dot_product_attention(q, q, q)\n",
    "aten-kernel": "import torch\ndef f(q):\n    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q)[0]\n",
    "private-c-alias": "import torch\n_k = torch._C._nn.scaled_dot_product_attention\ndef f(q):\n    return _k(q, q, q)\n",
    "through-a-list": "import torch\ndef f(q):\n    return [torch][0].nn.functional.scaled_dot_product_attention(q, q, q)\n",
    "through-a-parameter": "import torch\ndef g(m, q):\n    return m.scaled_dot_product_attention(q, q, q)\ndef f(q):\n    return g(torch.nn.functional, q)\n",
    "helper-chain": "import torch.nn.functional as F\ndef a(q):\n    return F.scaled_dot_product_attention(q, q, q)\ndef b(q):\n    return a(q)\ndef f(q):\n    return b(q)\n",
    "import-time-monkeypatch": "import torch\nimport torch.nn.functional as F\ntorch.softmax = lambda s, dim: F.scaled_dot_product_attention(s, s, s)\ndef f(q):\n    return torch.softmax(q, -1)\n",
    "class-body": "import torch.nn as nn\nclass A:\n    m = nn.MultiheadAttention(4, 1)\ndef f(q):\n    return q\n",
    "transformer-layer": "import torch.nn as nn\ndef f(q):\n    return nn.TransformerEncoderLayer(4, 1)(q)\n",
    "mha-forward": "import torch.nn.functional as F\ndef f(q):\n    return F.multi_head_attention_forward\n",
    "import-inside-function": "def f(q):\n    from torch.nn.functional import scaled_dot_product_attention\n    return scaled_dot_product_attention(q, q, q)\n",
    "decorator": "import torch.nn.functional as F\ndef deco(fn):\n    return F.scaled_dot_product_attention\n@deco\ndef g(q):\n    return q\ndef f(q):\n    return q\n",
}


@pytest.mark.parametrize("name", sorted(FOUND))
def test_every_alias_of_a_forbidden_api_is_found(name):
    forbidden, _ = scan(FOUND[name])
    assert forbidden, f"{name}: the scan missed the forbidden API"


# -------------------------------------------------------------------------------------------------
# Dynamic forms: refused, not skipped


REFUSED = {
    "getattr-computed": "import torch\ndef f(q):\n    return getattr(torch.nn.functional, 'scaled_dot_product_' + 'attention')(q, q, q)\n",
    "getattr-nested-computed": "import torch\ndef f(q, name):\n    return getattr(getattr(torch, 'nn'), name)\n",
    "dunder-import-computed": "def f(q, m='tor' + 'ch'):\n    return __import__(m)\n",
    "importlib-computed": "import importlib\ndef f(q, m='torch'):\n    return importlib.import_module(m)\n",
    "from-importlib": "from importlib import import_module\ndef f(q, m='torch'):\n    return import_module(m)\n",
    "sys-modules": "import sys\ndef f(q):\n    return sys.modules['torch.nn.functional']\n",
    "sys-modules-getattr": "import sys\ndef f(q):\n    return getattr(sys, 'modules')\n",
    "eval": "def f(q):\n    return eval('q')\n",
    "exec": "def f(q):\n    exec('x = 1')\n    return q\n",
    "compile": "def f(q):\n    return compile('q', 'x', 'eval')\n",
    "vars": "import torch.nn.functional as F\ndef f(q):\n    return vars(F)['scaled_dot_product_' + 'attention']\n",
    "dunder-dict": "import torch.nn.functional as F\ndef f(q):\n    return F.__dict__['x']\n",
    "globals": "def f(q):\n    return globals()['q']\n",
    "builtins": "def f(q):\n    return __builtins__\n",
    "subclasses": "def f(q):\n    return ().__class__.__base__.__subclasses__()\n",
    "getattr-as-value": "import functools, torch\ndef f(q):\n    return functools.reduce(getattr, ['nn', 'functional'], torch)\n",
    "own-extra-file": "import helper\ndef f(q):\n    return helper.g(q)\n",
    "relative-import": "from . import helper\ndef f(q):\n    return q\n",
    "gc": "import gc\ndef f(q):\n    return q\n",
    "pickle": "import pickle\ndef f(q):\n    return q\n",
    "ctypes": "def f(q):\n    import ctypes\n    return q\n",
    "star-import": "from torch.nn.functional import *\ndef f(q):\n    return q\n",
    "torch-private": "import torch\ndef f(q):\n    return torch._C._nn.gelu(q)\n",
    "torch-jit": "import torch\ndef f(q):\n    return torch.jit.CompilationUnit('def g(x): return x')\n",
    "torch-load": "import torch\ndef f(q):\n    return torch.load('x')\n",
    "operator-attrgetter": "import operator, torch\ndef f(q):\n    return operator.attrgetter('nn')(torch)\n",
    "module-as-value": "import torch.nn.functional as F\ndef g(m):\n    return m\ndef f(q):\n    return g(F)\n",
    "module-chain-as-value": "import torch\ndef g(m):\n    return m\ndef f(q):\n    return g(torch.nn.functional)\n",
    "at-import-time": "import torch\nx = getattr(torch, 'n' + 'n')\ndef f(q):\n    return q\n",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_the_scan_cannot_follow_is_refused(name):
    forbidden, refused = scan(REFUSED[name])
    assert forbidden or refused, f"{name}: the scan accepted code it cannot follow"
    assert all(isinstance(r, str) and r for r in refused)


CLEAN = {
    "plain": "import math\nimport torch\ndef f(q):\n    s = q @ q.transpose(-2, -1) / math.sqrt(q.size(-1))\n    return torch.softmax(s, dim=-1)\n",
    "getattr-allowed": "import torch.nn.functional as F\ndef f(q):\n    return getattr(F, 'softmax')(q, -1)\n",
    "own-method-unused-helper-main-guard":
        "import torch.nn.functional as F\nclass A:\n    def scaled_dot_product_attention(self, q):\n        return q\n"
        "def f(q):\n    return A().scaled_dot_product_attention(q)\n"
        "def unused(q):\n    return F.scaled_dot_product_attention(q, q, q)\n"
        "if __name__ == '__main__':\n    print(F.scaled_dot_product_attention(1, 2, 3))\n    import os\n",
    "unused-dynamic-helper": "def unused(q):\n    return eval('q')\ndef f(q):\n    return q\n",
    "dtype-and-device": "import torch\ndef f(q, device=None):\n    return torch.zeros(3, dtype=torch.float32, device=device).to(q.dtype)\n",
    "module-class": "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "    def forward(self, x):\n        return x\ndef f(q):\n    return M()(q)\n",
}


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_honest_code_is_accepted(name):
    assert scan(CLEAN[name]) == ([], [])


def test_the_graded_function_may_be_named_like_the_library_one():
    source = ("import torch\ndef scaled_dot_product_attention(q, k, v, mask=None):\n    w = torch.softmax(q @ k.mT, -1)\n"
              "    return w @ v, w\ndef causal_mask(L_q, L_k=None, device=None):\n    return torch.ones(L_q, L_q).bool()\n")
    assert scan(source, "scaled_dot_product_attention") == ([], [])


def test_a_name_only_read_is_told_apart_from_a_call():
    """``q.grad`` shares torch.autograd.grad's name without calling it: the scan refuses it all the
    same (exercise 8), and says where it is only read, so the feedback does not claim a call."""
    forbidden = catalog.load().find(8).forbidden
    api = "torch.autograd.grad"
    read = SourceScan("def f(q):\n    return q.grad is None\n", forbidden)
    assert read.reached_from("f") == [api]
    found = read.read_only("f", api)
    assert found is not None and (found.line, found.why) == (2, "reads .grad")
    for called in ("import torch\ndef f(q):\n    return torch.autograd.grad(q, q)\n",
                   "from torch.autograd import grad\ndef f(q):\n    return q.grad is None and grad(q, q)\n",
                   "def f(q):\n    return q.grad.zero_()\n", "def f(q):\n    return q.grad()\n"):
        scanned = SourceScan(called, forbidden)
        assert scanned.reached_from("f") == [api], called
        assert scanned.read_only("f", api) is None, called


def test_the_file_is_decoded_as_python_decodes_it():
    """A coding cookie changes what the interpreter reads: the scan reads the same."""
    hidden = "# coding: utf-7\nimport torch\n# +AAo-from torch.nn.functional import scaled_dot_product_attention as f\n"
    data = hidden.encode("ascii")
    namespace: dict = {}
    exec(compile(data, "x.py", "exec"), namespace)          # what the worker would import
    assert "f" in namespace
    assert SourceScan(data, FORBIDDEN).reached_from("f") == [SDPA]


# -------------------------------------------------------------------------------------------------
# Bounds: linear time, capped size, nodes and time; a breach is a clear refusal


def wide_tuple(names: int) -> str:
    return "import torch\n" + ", ".join(f"a{i}" for i in range(names)) + f" = range({names})\n" \
        "def f(q):\n    return q + a0\n"


def test_a_wide_tuple_assignment_scans_in_linear_time():
    source = wide_tuple(6000)                               # ~45 KB: 265 s before the fix
    assert 40_000 < len(source) < source_scan.MAX_SOURCE_BYTES
    started = time.monotonic()
    assert scan(source) == ([], [])
    assert time.monotonic() - started < 2.0


def refusal(tmp_path: Path, data: bytes | None) -> str:
    path = tmp_path / "attention.py"
    if data is not None:
        path.write_bytes(data)
    result = scan_file(path, FORBIDDEN)
    reasons = [f.why for f in result.unverifiable("f")]
    assert reasons and not result.reached_from("f")
    return reasons[0]


def test_a_file_over_the_size_cap_is_refused(tmp_path):
    assert "too large to check" in refusal(tmp_path, wide_tuple(40_000).encode())   # ~330 KB
    assert "too large to check" in refusal(tmp_path, b"#" * (1 << 20) + b"\nx = 1\n")  # over 1 MiB


def test_a_file_with_too_many_nodes_is_refused(tmp_path):
    data = ("x = [" + "0," * 110_000 + "]\ndef f(q):\n    return q\n").encode()
    assert len(data) < source_scan.MAX_SOURCE_BYTES
    assert "too large to check" in refusal(tmp_path, data)


def test_the_scan_has_a_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(source_scan, "SCAN_SECONDS", 0.0)
    monkeypatch.setattr(source_scan, "_CHECK_EVERY", 1)
    assert "too large to check" in refusal(tmp_path, wide_tuple(100).encode())


def test_unparsable_and_unreadable_files_are_refused(tmp_path):
    assert "cannot parse" in refusal(tmp_path, b"def f(:\n")
    assert "cannot parse" in refusal(tmp_path, b"x = " + b"(" * 300 + b")" * 300 + b"\n")
    assert "cannot parse" in refusal(tmp_path, b"x = 1\x00\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    result = scan_file(fifo, FORBIDDEN)
    assert time.monotonic() - started < 1 and "only regular files are read" in result.unverifiable("f")[0].why
    assert "cannot read" in scan_file(tmp_path / "missing.py", FORBIDDEN).unverifiable("f")[0].why


# -------------------------------------------------------------------------------------------------
# Real attacks, graded end to end under both backends: each FAILS, with a clear message

HONEST_ATTENTION = (CORPORA["attention"] / "correct" / "einsum_arange.py").read_text()
ERASE = '''
def _erase_evidence():
    shim = sys.modules.get("__main__")
    for name in ("FORBIDDEN_CALLS",):
        record = getattr(shim, name, None)
        if isinstance(record, list):
            record.clear()
'''
BY_HAND = '''
def _weights(q, k, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)
'''
ATTACKS = {
    # The built-in SDPA through getattr with a name built at run time, then the worker's record erased.
    "getattr_erased_record": "import math, sys\nimport torch\n" + ERASE + BY_HAND + '''
def scaled_dot_product_attention(q, k, v, mask=None):
    fused = getattr(torch.nn.functional, "scaled_dot_product_" + "attention")
    out = fused(q, k, v, attn_mask=mask)
    _erase_evidence()
    return out, _weights(q, k, mask)
''',
    # Through __import__ with a computed name: no `import torch.nn.functional` anywhere.
    "dunder_import": "import math, sys\nimport torch\n" + ERASE + BY_HAND + '''
def scaled_dot_product_attention(q, k, v, mask=None):
    functional = __import__("torch.nn." + "functional", fromlist=["x"])
    out = functional.__dict__["scaled_dot_product_" + "attention"](q, k, v, attn_mask=mask)
    _erase_evidence()
    return out, _weights(q, k, mask)
''',
    # Through importlib, the module and the function both named at run time.
    "importlib": "import importlib, math, sys\nimport torch\n" + ERASE + BY_HAND + '''
def scaled_dot_product_attention(q, k, v, mask=None):
    functional = importlib.import_module(".".join(["torch", "nn", "functional"]))
    out = vars(functional)["scaled_dot_product_" + "attention"](q, k, v, attn_mask=mask)
    _erase_evidence()
    return out, _weights(q, k, mask)
''',
    # A correct solution behind a ~300 KiB wide tuple assignment (265 s of scanning before the fix).
    "wide_tuple": HONEST_ATTENTION + "\n" + ", ".join(f"a{i}" for i in range(40_000)) + " = range(40000)\n",
    # A correct solution padded past 1 MiB (the old scan skipped such files).
    "over_one_mib": HONEST_ATTENTION + "\n" + ("# padding " + "x" * 100 + "\n") * 10_000,
}
# Exercise 2: recomputes over every prefix (O(T^2) per step) and patches the worker's work counter so
# that it reports a small, constant amount of work.
PATCHED_COUNTER = '''import math
import sys

import torch

_shim = sys.modules.get("lumen_inside.work_counter")   # the worker's inside/work_counter.py
if hasattr(_shim, "WorkCounter"):
    _shim.WorkCounter.record = lambda self, op, t: None
    _shim.WorkCounter.summary = lambda self: {"total_elements": 1000, "ops": 10, "largest": 10,
                                              "largest_op": "mm", "largest_shape": [10]}


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    k_cache = torch.cat([k_cache, (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)], dim=2)
    v_cache = torch.cat([v_cache, (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)], dim=2)
    group = n_heads // n_kv_heads
    k = k_cache.repeat_interleave(group, dim=1)
    v = v_cache.repeat_interleave(group, dim=1)
    for t in range(T + 1):                       # every prefix again: O(T^2) work per step
        w = torch.softmax(q @ k[:, :, : t + 1].transpose(-2, -1) / math.sqrt(d_head), dim=-1)
        out = w @ v[:, :, : t + 1]
    return out.reshape(B, -1) @ w_o, k_cache, v_cache
'''
LEDGER: list[tuple[str, str, str]] = []


def graded(tmp_path: Path, exercise: int, source: str, backend: str, select: str | None = None) -> RunResult:
    root = workspace_with(tmp_path, exercise, source)
    return run_check(exercise, workspace=root, sandbox=backend, seed=1234, device="cpu", record=False,
                     select=select)


def first_failure(result: RunResult):
    return next(t for t in result.tests if t.status is not Status.PASS and t.status is not Status.SKIPPED)


def assert_fails_clearly(result: RunResult, name: str, backend: str, *, says: str | tuple, kind: str | tuple) -> None:
    """FAIL (not pass, not error), below full marks, nothing blamed on the grader, a clear message."""
    LEDGER.append((name, backend, result.status.value))
    assert result.status is Status.FAIL, (name, backend, result.status, [(t.id, t.status, t.message) for t in result.tests])
    assert result.score < result.max_score
    assert not [t for t in result.tests if t.status in (Status.ERROR, Status.TIMEOUT)], \
        [(t.id, t.status.value, t.message) for t in result.tests if t.status in (Status.ERROR, Status.TIMEOUT)]
    first = first_failure(result)
    assert first.diagnosis.kind in ((kind,) if isinstance(kind, str) else kind), (first.diagnosis.kind, first.message)
    assert any(text in first.message for text in ((says,) if isinstance(says, str) else says)), first.message


# The scan refuses these ("cannot be verified"); the worker's own layer refuses the call first when
# the test runs it ("implement it yourself": src/lumen_ex/sandbox/inside/forbid.py).
SCAN_OR_WORKER = ("cannot be verified", "implement it yourself; calling F.scaled_dot_product_attention")
EXPECTED = {
    "getattr_erased_record": (SCAN_OR_WORKER, "forbidden"),
    "dunder_import": (SCAN_OR_WORKER, "forbidden"),
    "importlib": (SCAN_OR_WORKER, "forbidden"),
    # refused by the scan, or before it by the size check on the submitted file (kind "file")
    "wide_tuple": ("too large to check", ("forbidden", "file")),
    "over_one_mib": ("too large to check", ("forbidden", "file")),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(ATTACKS))
@pytest.mark.slow
def test_attack_on_the_forbidden_check_fails(tmp_path, backend, name):
    started = time.monotonic()
    result = graded(tmp_path, 1, ATTACKS[name], backend,
                    select="test_values or test_causal_mask or test_returns_output_and_weights")
    says, kind = EXPECTED[name]
    assert_fails_clearly(result, name, backend, says=says, kind=kind)
    assert time.monotonic() - started < 90          # a bound, not a grader timeout


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.slow
def test_patched_work_counter_fails(tmp_path, backend):
    """The counter patch needs sys.modules: the source scan refuses it before any cost is measured."""
    result = graded(tmp_path, 2, PATCHED_COUNTER, backend, select="test_cost or test_values")
    assert_fails_clearly(result, "patched_counter", backend, says="cannot be verified", kind="forbidden")


@requires_bwrap
@pytest.mark.slow
def test_patched_work_counter_is_caught_by_the_graders_clock(tmp_path, monkeypatch):
    """Even with the scan made blind to the patch (its refusals switched off in the harness of this
    process), the cost test fails: the worker's counter is patched, the grader's clock is not."""
    monkeypatch.setattr(source_scan.SourceScan, "unverifiable", lambda self, fn: [])
    started = time.monotonic()
    result = graded(tmp_path, 2, PATCHED_COUNTER, "bwrap", select="test_cost")
    LEDGER.append(("patched_counter_scan_blind", "bwrap", result.status.value))
    assert result.status is Status.FAIL, [(t.id, t.status, t.message) for t in result.tests]
    cost = next(t for t in result.tests if "cost" in t.id)
    assert cost.status is Status.FAIL and cost.diagnosis.misconception == "quadratic-cost", cost.message
    assert "timed by the grader" in cost.message
    assert time.monotonic() - started < 60


# The worker's side of setup under each backend whose harness is this process: a fresh bwrap worker,
# and a worker forked in a docker grading slot (a cold docker check runs its harness in the container).
SETUP_BACKENDS = [pytest.param("bwrap", marks=requires_bwrap, id="bwrap"), docker_param("docker-slot")]


@contextlib.contextmanager
def setup_launcher(kind: str):
    """bwrap's launcher, or a docker grading slot (closed afterwards)."""
    from lumen_ex.sandbox.bwrap import BwrapLauncher

    launcher = BwrapLauncher() if kind == "bwrap" else slot_launcher()
    try:
        yield launcher
    finally:
        launcher.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", SETUP_BACKENDS)
def test_a_failure_of_the_workers_own_setup_is_lumen_exs_not_the_learners(tmp_path, monkeypatch, kind):
    """The worker makes the exercise's forbidden APIs unusable before the learner's module exists in
    it (its "setup" request: src/lumen_ex/sandbox/inside/worker.py). A failure there is lumen-ex's on
    every test (a grader error that says so), never the learner's import error, and a correct file is
    not failed for it. Made to fail for real in the sandbox: this process's harness tells the worker
    a forbidden API its layer cannot read."""
    monkeypatch.setattr(ForbiddenAPI, "to_wire", lambda self: {"api": self.name, "names": 5})
    with setup_launcher(kind) as launcher:
        result = run_check(1, workspace=workspace_with(tmp_path, 1, HONEST_ATTENTION), launcher=launcher, seed=1234,
                           device="cpu", record=False, select="test_values or test_causal_mask")
    assert result.sandbox.backend == ("bwrap" if kind == "bwrap" else "docker"), result.sandbox
    ran = [t for t in result.tests if t.status is not Status.SKIPPED]
    assert result.status is Status.ERROR and ran, [(t.id, t.status, t.message) for t in result.tests]
    for t in ran:
        assert t.status is Status.ERROR and t.diagnosis.kind == "grader", (t.id, t.status, t.message)
        assert "before any of your code ran" in t.message and "TypeError" in t.message, t.message
        assert "bug in lumen-ex, not in your code" in t.diagnosis.hint, t.diagnosis.hint


@requires_bwrap
@pytest.mark.slow
def test_the_learners_own_import_error_is_still_theirs(tmp_path):
    """The sibling of the test above: once setup is done, an exception at the learner's import is
    theirs (an import failure that fails every test), not lumen-ex's."""
    source = HONEST_ATTENTION + "\nraise ValueError('my own mistake at import')\n"
    result = graded(tmp_path, 1, source, "bwrap", select="test_values or test_causal_mask")
    ran = [t for t in result.tests if t.status is not Status.SKIPPED]
    assert ran and result.status is not Status.PASS
    for t in ran:
        assert t.diagnosis.kind == "import", (t.id, t.status, t.diagnosis.kind, t.message)
        assert "my own mistake at import" in t.message, t.message


@pytest.mark.slow
@pytest.mark.parametrize("kind", SETUP_BACKENDS)
def test_the_worker_imports_no_learner_code_before_its_setup(tmp_path, kind):
    """The worker's own guard, for real in the sandbox: a "load" that comes before "setup" (a harness
    that forgot it) is refused, so no learner code ever runs with the forbidden APIs still usable;
    and a "setup" after the load is refused too."""
    from lumen_ex.harness.client import Worker
    from lumen_ex.sandbox.base import WorkerSpec

    root = workspace_with(tmp_path, 1, HONEST_ATTENTION)
    ex = catalog.load().find(1)
    folder = root / ex.dir
    spec = WorkerSpec(workspace=root, module_dir=folder, device="cpu", limits=ex.limits)
    load = {"op": "load", "module": ex.module, "functions": list(ex.functions)}
    for order in (["load"], ["setup", "load", "setup"]):
        with setup_launcher(kind) as launcher:
            worker = Worker(launcher.launch(spec))
            try:
                worker.wait_hello(time.monotonic() + 60)
                replies = []
                for op in order:
                    header = {"op": "setup", "forbidden": [], "autograd": True} if op == "setup" else \
                        dict(load, path=worker.launched.module_path)
                    replies.append(worker.request(header, [], 60).header)
            finally:
                worker.kill()
        if order == ["load"]:
            assert replies[0]["ok"] is False and "load before setup" in replies[0]["error"]["message"], replies
        else:
            assert [r["ok"] for r in replies] == [True, True, False], replies
            assert "setup after the learner's module was loaded" in replies[2]["error"]["message"], replies
