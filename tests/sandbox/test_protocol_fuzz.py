"""Fuzzing the harness's reply decoder: whatever a worker sends, only a protocol error escapes.

The learner's code shares the worker's process and can write anything onto its reply pipe
(tests/sandbox/test_protocol_attacks.py does so for real, in the sandbox). Here the same decode path,
``WorkerPool`` -> ``Worker._read_frame`` -> ``wire.FrameParser`` -> ``LearnerModule._decode``, is fed
generated replies through a stand-in worker whose reply pipe is a file of prepared bytes:

- arbitrary bytes, at start-up and in answer to a call;
- valid frames mutated field by field: shapes with huge, negative or stride-overflowing dims,
  byte counts that do not match, unknown dtypes, device tags such as ``cuda:99``, ``meta`` or
  ``disk``, value trees of any JSON, wrong types in gradients, work counts and errors;
- setup replies of any kind (lumen-ex's own failure or a protocol error, nothing else), load
  replies whose function table has the wrong types, deeply nested and oversized headers,
  NaN and huge integers in headers, truncated payloads.

Every outcome must be one the harness reports against the submission (a WorkerFailure, a
LearnerError, a CheckFailed or a result) or, before the learner's module exists in the worker,
lumen-ex's own SetupFailed, never any other exception; each example is bounded in
time by hypothesis's deadline and the whole file in memory by a check on the peak RSS.
"""

from __future__ import annotations

import json
import os
import resource
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lumen_ex.core.limits import Limits
from lumen_ex.core.results import CheckFailed
from lumen_ex.harness import wire_replies
from lumen_ex.harness.client import (
    START_HINT,
    LearnerError,
    SetupFailed,
    WorkerFailure,
    WorkerPool,
    WorkerProtocolError,
)
from lumen_ex.harness.proxy import LearnerModule
from lumen_ex.sandbox.base import WorkerSpec
from lumen_ex.sandbox.cgroups import Enforcement
from lumen_ex.sandbox.inside import wire, wire_decode

FUZZ = settings(max_examples=300, deadline=1500, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FUNCTIONS = ["f", "g"]
# What a hidden test may see from a call: the submission's failure or a value, nothing else.
ALLOWED = (WorkerFailure, LearnerError, CheckFailed)
RSS_BUDGET_MB = 400


def frame(header: dict, body: bytes = b"") -> bytes:
    """A frame exactly as given (no validation: ``header`` may be anything JSON can hold)."""
    head = json.dumps(header, allow_nan=True).encode()
    return struct.pack(">I", len(head)) + head + body


def raw_frame(head: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">I", len(head)) + head + body


HELLO = frame({"hello": True, "protocol": wire.PROTOCOL_VERSION, "pid": 1, "torch": torch.__version__,
               "cuda": False})
TABLE = {"f": {"callable": True, "params": [{"name": "x", "kind": "POSITIONAL_OR_KEYWORD", "default": None}]},
         "g": None}
# A fresh worker says hello and answers the harness's "setup" request (id 1) before the learner's
# module exists in it (src/lumen_ex/sandbox/inside/worker.py); the load is request 2, the first call 3.
SETUP_OK = frame({"id": 1, "ok": True, "elapsed": 0.0})
STARTED = HELLO + SETUP_OK
LOAD_OK = frame({"id": 2, "ok": True, "functions": TABLE, "elapsed": 0.01})
GOOD_CALL = frame({"id": 3, "ok": True, "elapsed": 0.0, "result": 1})


# -------------------------------------------------------------------------------------------------
# A stand-in worker: the reply pipe is a file of prepared bytes, the request pipe /dev/null


class _Proc:
    pid = 0     # no such process: the harness's memory baseline finds no process tree to read

    def wait(self, timeout=None):
        return 0

    def poll(self):
        return 0


class FakeLaunched:
    """Duck-types sandbox.base.Launched: what the worker 'sends' is ``replies``, then EOF."""

    def __init__(self, replies: bytes):
        with tempfile.TemporaryFile() as f:
            f.write(replies)
            f.flush()
            self.reply_fd = os.dup(f.fileno())
        os.lseek(self.reply_fd, 0, os.SEEK_SET)
        self.request_fd = os.open(os.devnull, os.O_WRONLY)
        self.output_fd = os.open(os.devnull, os.O_RDONLY)
        self.proc, self.limits, self.module_path = _Proc(), {}, "/module"
        self.enforcement = Enforcement(Limits(), cgroup=None)   # no cgroup: nothing for the memory baseline
        self._closed = False

    def alive(self) -> bool:
        return not self._closed

    def exit_description(self) -> str:
        return "exit code 0"

    def kill(self) -> None:
        if not self._closed:
            self._closed = True
            for fd in (self.reply_fd, self.request_fd, self.output_fd):
                os.close(fd)


class FakeLauncher:
    """Each launch answers with the next prepared stream (replacements just say hello), or is the
    worker ``make`` returns."""

    def __init__(self, *streams: bytes, make: Callable[[], FakeLaunched] | None = None):
        self.streams = list(streams)
        self.make = make
        self.launched: list[FakeLaunched] = []

    def launch(self, spec) -> FakeLaunched:
        if self.make is not None:
            launched = self.make()
        else:
            launched = FakeLaunched(self.streams.pop(0) if self.streams else STARTED + LOAD_OK + GOOD_CALL)
        self.launched.append(launched)
        return launched

    def close_all(self) -> None:
        for launched in self.launched:
            launched.kill()


def submission_for(*streams: bytes, launcher: FakeLauncher | None = None,
                   timeout: float = 5) -> tuple[LearnerModule, WorkerPool, FakeLauncher]:
    """The learner's module as a hidden test sees it, its workers answering with ``streams`` in turn
    (or started by ``launcher``), each start-up and call limited to ``timeout`` seconds."""
    launcher = FakeLauncher(*streams) if launcher is None else launcher
    spec = WorkerSpec(workspace=Path("/nonexistent"), module_dir=Path("/nonexistent"))
    pool = WorkerPool(launcher, spec, module="m", functions=FUNCTIONS, startup_timeout=timeout, call_timeout=timeout)
    return LearnerModule(pool, "cpu", "m.py"), pool, launcher


def outcome_of_call(stream: bytes, **call) -> object:
    """Call ``f`` against a worker that answers with ``stream``; return the result or the exception,
    failing the test for any exception a hidden test must never see."""
    sub, pool, launcher = submission_for(stream)
    try:
        return sub.call("f", (torch.ones(2, 3),), **call)
    except ALLOWED as exc:
        return exc
    finally:
        pool.close()
        launcher.close_all()


def assert_replaced_after(stream: bytes) -> None:
    """A malformed reply fails its call as a protocol error, and the next call gets a fresh worker."""
    sub, pool, launcher = submission_for(stream)
    try:
        with pytest.raises(ALLOWED):
            sub.call("f", (torch.ones(2),))
        if pool.load_failure is None:
            assert sub.call("f", (torch.ones(2),)).value == 1
            assert len(launcher.launched) == 2
    finally:
        pool.close()
        launcher.close_all()


# -------------------------------------------------------------------------------------------------
# Strategies

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                      st.text(max_size=20))
json_any = st.recursive(json_leaf, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                          st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                        max_leaves=20)
marker = st.sampled_from(["$tensor", "$tuple", "$list", "$float", "$device", "$object"])
tree = st.recursive(
    json_leaf | st.builds(lambda k, v: {k: v}, marker, json_leaf),
    lambda kids: st.one_of(
        st.builds(lambda k, v: {k: v}, st.sampled_from(["$tuple", "$list"]), st.lists(kids, max_size=4)),
        st.builds(lambda k, v: {k: v}, marker, kids), st.lists(kids, max_size=3)),
    max_leaves=20)
dim = st.one_of(st.integers(0, 4), st.sampled_from([2**31, 2**32 + 1, 2**39, 2**40, 2**62, 2**63 - 1, -1, -2**63]),
                st.integers(-2**64, 2**64))
shape = st.lists(dim, max_size=10) | json_any
dtype_name = st.sampled_from([*wire.DTYPES, "complex64", "float8_e4m3fn", "qint8", "object", ""]) | json_any
device_tag = st.sampled_from(["cpu", "cuda", "cuda:0", "cuda:99", "meta", "disk", "cpu:0", "CUDA", "", "cuda:-1",
                              "cuda:0 ", "\ud800"]) | json_any


def _body_for(spec) -> int:
    """The byte count a spec would need, if it makes sense, else a small number."""
    try:
        n = 1
        for d in spec["shape"]:
            n *= int(d)
        n *= wire.ITEMSIZE[spec["dtype"]]
        return n if 0 <= n <= 4096 else 16
    except Exception:  # noqa: BLE001
        return 16


@st.composite
def tensor_spec(draw):
    spec = {"dtype": draw(dtype_name), "shape": draw(shape)}
    exact = _body_for(spec)
    spec["nbytes"] = draw(st.one_of(st.just(exact), st.integers(-2, 2**64), json_any))
    return spec


MUTABLE = ("spec", "ref", "id", "ok", "result", "elapsed", "grads", "ops", "args_after", "forbidden",
           "error", "cut")


@st.composite
def call_reply(draw):
    """A valid reply to request 2 (with gradients, work counts and echoed arguments), with one or
    two of its fields replaced by anything: each example reaches a different stage of decoding."""
    n = draw(st.integers(1, 3))
    specs = [{"dtype": "float32", "shape": [2, 3], "nbytes": 24} for _ in range(n)]
    refs = [{"$tensor": i, "device": "cpu", "pytype": "torch.Tensor", "requires_grad": False} for i in range(n)]
    header = {"id": 3, "ok": True, "elapsed": 0.01, "result": {"$tuple": refs},
              "grads": {"grads": {"$tuple": [{"$tensor": 0}]}},
              "ops": {"total_elements": 6, "ops": 1, "largest": 6, "largest_op": "mm", "largest_shape": [2, 3],
                      "matmul_flops": 36},
              "args_after": {"$tuple": [{"$tensor": 0}]}, "tensors": specs}
    cut = None
    for field in draw(st.sets(st.sampled_from(MUTABLE), min_size=1, max_size=2)):
        if field == "spec":
            specs[draw(st.integers(0, n - 1))] = draw(tensor_spec())
        elif field == "ref":
            ref = refs[draw(st.integers(0, n - 1))]
            ref[draw(st.sampled_from(["device", "pytype", "requires_grad", "grad_fn", "contiguous", "$tensor"]))] = \
                draw(device_tag | json_leaf)
        elif field == "cut":
            cut = draw(st.integers(0, 24 * n + 8))
        elif field == "error":
            header["ok"] = False
            header["error"] = draw(json_any | st.builds(dict, type=json_leaf, message=json_leaf, where=json_any,
                                                        syntax_line=json_leaf))
        else:
            header[field] = draw(tree if field in ("result", "args_after") else json_any)
    body = b"".join(b"\0" * _body_for(s) for s in specs) + b"\0" * 8
    return frame(header, body[:cut if cut is not None else len(body) - 8])


param = st.fixed_dictionaries({"name": json_leaf, "kind": st.sampled_from(["POSITIONAL_OR_KEYWORD", "BOGUS", 3]),
                               "default": json_leaf})
function_entry = st.one_of(st.none(), json_any,
                           st.fixed_dictionaries({"callable": json_leaf, "params": st.one_of(
                               st.none(), json_any, st.lists(param | json_any, max_size=4))}))
function_table = st.one_of(json_any, st.dictionaries(st.sampled_from(FUNCTIONS + ["h"]), function_entry, max_size=3))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture(scope="module", autouse=True)
def memory_bound():
    before = peak_rss_mb()
    yield
    assert peak_rss_mb() - before < RSS_BUDGET_MB, "decoding hostile replies grew the harness's memory"


# -------------------------------------------------------------------------------------------------
# Properties


@FUZZ
@given(st.binary(max_size=2048))
@example(b"\xff\xff\xff\xff")
@example(struct.pack(">I", 10) + b"\xc3\x28garbage!")
def test_any_bytes_in_answer_to_a_call(data):
    assert isinstance(outcome_of_call(STARTED + LOAD_OK + data), ALLOWED)


@FUZZ
@given(st.binary(max_size=1024))
def test_any_bytes_at_start_up(data):
    """Before its hello a worker has run no learner code: one that ends before a whole hello did not
    start (SetupFailed, lumen-ex's); a malformed hello is a protocol error, as every malformed reply is."""
    try:
        outcome = outcome_of_call(data)
    except SetupFailed as exc:
        outcome = exc
    assert isinstance(outcome, (*ALLOWED, SetupFailed))


@FUZZ
@given(call_reply())
@pytest.mark.slow
def test_mutated_call_replies(stream):
    outcome_of_call(STARTED + LOAD_OK + stream, grad_wrt=(0,), count_ops=True, echo_args=True)


@FUZZ
@given(call_reply())
@pytest.mark.slow
def test_mutated_call_replies_plain_call(stream):
    outcome_of_call(STARTED + LOAD_OK + stream)


@FUZZ
@given(function_table, st.sampled_from([True, False, 1, None]), json_any)
@pytest.mark.slow
def test_mutated_load_replies(table, ok, error):
    stream = STARTED + frame({"id": 2, "ok": ok, "functions": table, "error": error, "elapsed": 0.0})
    sub, pool, launcher = submission_for(stream)
    try:
        for fn in FUNCTIONS:   # the fields a hidden test reads (src/lumen_ex/graders/support/expect.py signature)
            sig = sub.signature(fn)
            assert sig is None or (type(sig["callable"]) is bool and (
                sig["params"] is None or all(type(p["name"]) is str and p["kind"] in wire_replies.PARAM_KINDS
                                             for p in sig["params"])))
    except ALLOWED:
        pass
    finally:
        pool.close()
        launcher.close_all()


@FUZZ
@given(json_any, st.sampled_from([True, False, None, 1]), st.sampled_from([1, 2, "1", None]))
@pytest.mark.slow
def test_mutated_hello(extra, hello, protocol):
    header = {"hello": hello, "protocol": protocol, "torch": extra, "cuda": extra}
    assert isinstance(outcome_of_call(frame(header) + SETUP_OK + LOAD_OK), ALLOWED)


@FUZZ
@given(st.sampled_from([True, False, 1, None, "yes"]), json_any)
@pytest.mark.slow
def test_mutated_setup_replies(ok, error):
    """The reply to "setup" comes before any learner code exists in the worker: whatever it holds,
    the call's outcome is lumen-ex's own setup failure (a well-formed error: SetupFailed, a grader
    error) or a protocol error, never any other exception; a well-formed ok goes on to the load."""
    stream = HELLO + frame({"id": 1, "ok": ok, "error": error, "elapsed": 0.0}) + LOAD_OK + GOOD_CALL
    sub, pool, launcher = submission_for(stream)
    try:
        outcome = sub.call("f", (torch.ones(2, 3),))
        assert ok is True and outcome.value == 1, (ok, outcome)
    except (WorkerProtocolError, SetupFailed) as exc:
        assert ok is not True or isinstance(exc, WorkerProtocolError), exc
    finally:
        pool.close()
        launcher.close_all()


def test_a_failed_setup_fails_every_test_as_lumen_exs_with_one_worker():
    """A well-formed setup error is kept, as an import failure is: every test gets the same
    SetupFailed (the plugin makes it a grader error), and no other worker is started for it."""
    error = {"type": "TypeError", "message": "'int' object is not iterable", "where": []}
    sub, pool, launcher = submission_for(HELLO + frame({"id": 1, "ok": False, "error": error, "elapsed": 0.0}))
    try:
        for _ in range(2):
            with pytest.raises(SetupFailed, match="TypeError: 'int' object is not iterable"):
                sub.call("f", (torch.ones(2),))
        assert len(launcher.launched) == 1
    finally:
        pool.close()
        launcher.close_all()


class SilentLaunched(FakeLaunched):
    """A worker that says ``first`` (nothing, or its hello) and then nothing more: its reply pipe
    stays open."""

    def __init__(self, first: bytes = b""):
        super().__init__(b"")
        os.close(self.reply_fd)
        self.reply_fd, self._writer = os.pipe()
        os.write(self._writer, first)

    def kill(self) -> None:
        if not self._closed:
            os.close(self._writer)
        super().kill()


START_CASES = {   # how the worker's start ends: the stand-in, what SetupFailed says
    "silent before its hello": (lambda: SilentLaunched(), "did not start"),
    "dead before its hello": (lambda: FakeLaunched(b""), "did not start"),
    "silent after its hello": (lambda: SilentLaunched(HELLO), "did not get ready"),
    "dead after its hello": (lambda: FakeLaunched(HELLO), "did not get ready"),
}


@pytest.mark.parametrize("start", list(START_CASES))
def test_a_worker_that_never_got_ready_is_a_setup_failure_not_the_learners(start):
    """No hello in time, none at all, or no answer to "setup" (silent, or its pipe closed): no
    learner code ever ran in that worker, so every test gets the same SetupFailed (a grader error,
    with the hint that it is not their code), never a timeout or a crash charged to the submission,
    and no other worker is started for it."""
    make, says = START_CASES[start]
    sub, pool, launcher = submission_for(launcher=FakeLauncher(make=make), timeout=0.3)
    try:
        for _ in range(2):
            with pytest.raises(SetupFailed, match=f"the sandboxed process {says}") as caught:
                sub.call("f", (torch.ones(2),))
            assert caught.value.hint == START_HINT
        assert len(launcher.launched) == 1
    finally:
        pool.close()
        launcher.close_all()


@FUZZ
@given(st.binary(max_size=600), st.lists(st.integers(1, 64), max_size=20))
def test_parser_raises_only_protocol_errors_and_stays_broken(data, cuts):
    parser = wire.FrameParser()
    pieces, start = [], 0
    for c in cuts:
        pieces.append(data[start:start + c])
        start += c
    pieces.append(data[start:])
    try:
        for piece in pieces:
            parser.feed(piece)
            while parser.next_frame() is not None:
                pass
    except wire.ProtocolError:
        assert parser.broken
        with pytest.raises(wire.ProtocolError):
            parser.next_frame()


@FUZZ
@given(tree, st.integers(0, 3))
@pytest.mark.slow
def test_unpack_raises_only_protocol_errors(value, n):
    tensors = [torch.zeros(2) for _ in range(n)]
    try:
        wire.unpack(value, tensors, devices=frozenset({"cpu"}))
    except wire.ProtocolError:
        pass


@FUZZ
@given(tensor_spec())
def test_specs_accepted_are_buildable(spec):
    """A spec the parser accepts always builds, within the size cap, without touching torch's limits."""
    try:
        dtype, dims, nbytes = wire_decode._check_spec(spec)
    except wire.ProtocolError:
        return
    assert nbytes <= wire.MAX_TENSOR_BYTES
    t = wire.build_tensor(dtype, dims, b"\0" * nbytes)
    assert t.shape == dims and t.dtype == dtype


# -------------------------------------------------------------------------------------------------
# Named crafted replies (tests/sandbox/test_protocol_attacks.py sends several for real), each one a
# protocol error that replaces the worker


def _reply(**fields) -> dict:
    return {"id": 3, "ok": True, "elapsed": 0.0, **fields}


NAMED = {
    "stride overflow": frame(_reply(result={"$tensor": 0},
                                    tensors=[{"dtype": "float32", "shape": [0, 2**39, 2**39, 2**39], "nbytes": 0}])),
    "forged device tag cuda:99": frame(_reply(result={"$tensor": 0, "device": "cuda:99"},
                                              tensors=[{"dtype": "float32", "shape": [2], "nbytes": 8}]), b"\0" * 8),
    "device tag meta": frame(_reply(result={"$tensor": 0, "device": "meta"},
                                    tensors=[{"dtype": "float32", "shape": [2], "nbytes": 8}]), b"\0" * 8),
    "device object disk": frame(_reply(result={"$device": "disk"})),
    "cuda tensor on a cpu run": frame(_reply(result={"$tensor": 0, "device": "cuda:0"},
                                             tensors=[{"dtype": "float32", "shape": [2], "nbytes": 8}]), b"\0" * 8),
    "huge int": raw_frame(b'{"id": 3, "ok": true, "result": ' + b"9" * 4000 + b"}"),
    "NaN in header": raw_frame(b'{"id": 3, "ok": true, "elapsed": NaN, "result": 1}'),
    "Infinity by exponent": raw_frame(b'{"id": 3, "ok": true, "result": 1e999}'),
    "deeply nested": raw_frame(b'{"id": 3, "ok": true, "result": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
    "deep tree": frame(_reply(result=json.loads('{"$tuple": [' * 30 + "1" + "]}" * 30))),
    "oversized header": struct.pack(">I", wire.MAX_HEADER_BYTES + 1) + b"{" * 64,
    "zero-length header": struct.pack(">I", 0),
    "not utf-8": raw_frame(b'{"id": 3, "\xff": 1}'),
    "a list, not an object": raw_frame(b"[1, 2]"),
    "unknown dtype": frame(_reply(result={"$tensor": 0},
                                  tensors=[{"dtype": "complex64", "shape": [1], "nbytes": 8}]), b"\0" * 8),
    "bool bytes not 0/1": frame(_reply(result={"$tensor": 0}, tensors=[{"dtype": "bool", "shape": [2], "nbytes": 2}]),
                                b"\x07\x01"),
    "tensor reference out of range": frame(_reply(result={"$tensor": 5})),
    "wrong error types": frame({"id": 3, "ok": False, "error": {"type": 3, "message": ["x"], "where": 7}}),
    "lone surrogate error": frame({"id": 3, "ok": False, "error": "\ud800"}),
    "gradients of the wrong type": frame(_reply(result=1, grads={"grads": 7})),
    "ok as a string": frame({"id": 3, "ok": "yes", "result": 1}),
}


@pytest.mark.parametrize("name", list(NAMED))
def test_named_malformed_replies_are_protocol_errors(name):
    outcome = outcome_of_call(STARTED + LOAD_OK + NAMED[name])
    assert isinstance(outcome, WorkerProtocolError), f"{name}: {outcome!r}"
    assert str(outcome).startswith("your code's process sent a malformed reply: "), str(outcome)
    assert str(outcome).endswith("; the grader replaced it")
    assert_replaced_after(STARTED + LOAD_OK + NAMED[name])


@pytest.mark.parametrize("table", [5, [], {"f": 5, "g": None}, {"f": {"callable": "yes"}, "g": None},
                                   {"f": {"callable": True, "params": 5}, "g": None},
                                   {"f": {"callable": True, "params": [{"name": 1, "kind": "X"}]}, "g": None},
                                   {"f": None}, {"f": None, "g": None, "extra": None}])
def test_bad_function_tables_fail_every_test_as_protocol_errors(table):
    sub, pool, launcher = submission_for(STARTED + frame({"id": 2, "ok": True, "functions": table}))
    try:
        for _ in range(2):   # remembered: the import would send it again
            with pytest.raises(WorkerProtocolError, match="importing your module: your code's process sent a malformed"):
                sub.signature("f")
        assert len(launcher.launched) == 1
    finally:
        pool.close()
        launcher.close_all()


def test_a_cuda_run_accepts_cuda_tags():
    stream = STARTED + LOAD_OK + frame(_reply(result={"$tensor": 0, "device": "cuda:0"},
                                            tensors=[{"dtype": "float32", "shape": [2], "nbytes": 8}]), b"\0" * 8)
    sub, pool, launcher = submission_for(stream)
    try:
        result = sub.call("f", (torch.ones(2),), device="cuda")
        assert result.value.lumen_meta.device == "cuda:0" and result.value.device.type == "cpu"
    finally:
        pool.close()
        launcher.close_all()


def test_a_truncated_frame_then_silence_is_a_protocol_error():
    """Part of a frame, then nothing: the call's time limit ends it as a protocol error (not a bare
    timeout), and the half-read frame goes with the worker."""
    r, w = os.pipe()
    os.write(w, STARTED + LOAD_OK + frame(_reply(result=1))[:12])
    sub, pool, launcher = submission_for(b"")
    launched = launcher.launched[0]
    os.close(launched.reply_fd)
    launched.reply_fd = r
    launched.alive = lambda: True
    try:
        with pytest.raises(WorkerProtocolError, match="a truncated frame"):
            sub.call("f", (torch.ones(2),), timeout=0.5)
        assert sub.call("f", (torch.ones(2),)).value == 1
    finally:
        os.close(w)
        pool.close()
        launcher.close_all()
