"""The harness's end of the pipe: start workers, send requests, read validated replies.

Everything a worker sends is untrusted. Replies are read with a deadline while the learner's
output is drained at the same time (so 300 MB of prints can neither block the worker nor fill our
memory), every frame is validated by ``wire``, and request ids must match. Any failure (timeout,
death, garbage) kills the worker with everything it started; the next call gets a fresh one.

One piece: a worker's pipe (``Worker``) and the pool that replaces, loads and limits it
(``WorkerPool``) share one failure model, the ``WorkerFailure`` kinds and the deadlines they are
raised against; the pool works on the worker's launch, replies and output directly, so either half
alone would reach into the other's internals.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from lumen_ex.core.forbidden import ForbiddenAPI, as_apis
from lumen_ex.harness import wire_replies
from lumen_ex.harness.deadline import Deadline, StretchedDeadline
from lumen_ex.harness.memory import Baseline, MemoryProbe, MemoryUse, baseline
from lumen_ex.sandbox.base import Launched, Launcher, WorkerSpec
from lumen_ex.sandbox.inside import wire
from lumen_ex.sandbox.inside.held import MAX_HELD
from lumen_ex.sandbox.processes import reap

OUTPUT_CAP = 8 * 1024


class WorkerFailure(Exception):
    """The worker did not answer properly. ``kind`` is timeout, crash or protocol.

    Example, in ``except WorkerFailure as exc:``: ``if exc.kind != "protocol": raise fail("property", exc.kind)``."""

    kind = "crash"

    def __init__(self, message: str, output: str = ""):
        super().__init__(message)
        self.output = output


class WorkerTimeout(WorkerFailure):
    kind = "timeout"


class WorkerCrashed(WorkerFailure):
    kind = "crash"


class WorkerProtocolError(WorkerFailure):
    """The worker sent something that is not a valid reply: charged to the submission (the
    learner's code shares the worker's process and can write to its reply pipe)."""

    kind = "protocol"


_Failure = TypeVar("_Failure", bound=WorkerFailure)


def protocol_message(detail: str) -> str:
    """How a malformed reply is reported on the test it broke."""
    return f"your code's process sent a malformed reply: {detail}; the grader replaced it"


def decode_detail(exc: BaseException) -> str:
    """What went wrong while decoding a reply, in a few words: the wire's own message, or the
    type of whatever else a crafted reply made fail."""
    if isinstance(exc, wire.ProtocolError):
        return str(exc)[:300]
    return wire.clean_text(f"{type(exc).__name__} while decoding it: {exc}", 300)


class LearnerError(Exception):
    """The learner's code raised an exception (reported by the worker: a claim, not a verdict).

    Example, in ``except LearnerError as exc:``: ``if exc.type == "MemoryError": raise fail("property", exc.message)``."""

    def __init__(self, error: dict[str, Any], output: str = ""):
        """``error``: as checked by ``wire_replies.check_error`` (or built by the harness itself)."""
        self.type = str(error.get("type", "Exception"))[:100]
        self.message = str(error.get("message", ""))[:1000]
        where = error.get("where")
        self.where = where if isinstance(where, list) else []
        line = error.get("syntax_line")
        self.syntax_line = line if type(line) is int else None
        self.output = output
        super().__init__(f"{self.type}: {self.message}")

    def location(self) -> str:
        """'attention.py line 12 in scaled_dot_product_attention' for the innermost learner frame."""
        for frame in reversed(self.where):
            if isinstance(frame, dict):
                return f"{str(frame.get('file'))[:80]} line {frame.get('line')} in {str(frame.get('function'))[:80]}"
        return ""


class ImportFailed(LearnerError):
    """The learner's module raised while being imported: every test fails the same way."""


BUG_HINT = "This is a bug in lumen-ex, not in your code: please report it."
START_HINT = ("This is not your code (the machine may be busy, or the sandbox broken): check again; if it "
              "happens again, run `lumen-ex doctor` and report what it says.")


class SetupFailed(Exception):
    """The worker failed before the learner's module existed in it: it did not start (no hello in
    time, or it died first), or it could not do what the exercise asks of it before the import (the
    "setup" request: src/lumen_ex/sandbox/inside/worker.py). No learner code had run in that process,
    so this is never the learner's failure: every test is a grader error, with ``hint`` to say what
    to do."""

    def __init__(self, error: dict[str, Any], output: str = "", hint: str = BUG_HINT):
        self.type = str(error.get("type", "Exception"))[:100]
        self.message = str(error.get("message", ""))[:1000]
        self.output, self.hint = output, hint
        super().__init__(f"{self.type}: {self.message}")


class OutputBuffer:
    """Keeps the first ``cap`` bytes of the learner's output and counts the rest."""

    def __init__(self, cap: int = OUTPUT_CAP):
        self.cap = cap
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        self.data += chunk[: max(room, 0)]
        self.dropped += max(len(chunk) - max(room, 0), 0)

    def take(self) -> str:
        text = self.data.decode("utf-8", errors="replace")
        if self.dropped:
            text += f"\n[... {self.dropped} more bytes of output not shown]"
        self.data, self.dropped = bytearray(), 0
        return text


@dataclass
class Reply:
    header: dict[str, Any]        # a reply's JSON header, checked by wire as far as every reply goes
    tensors: list[torch.Tensor]
    output: str = ""
    elapsed: float = 0.0
    memory: MemoryUse | None = None     # measured by the harness, when asked for (harness/memory.py)


@dataclass
class Hello:
    torch_version: str = ""
    cuda: bool = False
    startup_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class Worker:
    """One running sandboxed worker."""

    def __init__(self, launched: Launched):
        self.launched = launched
        self.parser = wire.FrameParser()
        self.output = OutputBuffer()
        self.next_id = 1
        self.holds: set[str] = set()       # the keys of the Held values this worker was sent (held.py)
        self.hello: Hello | None = None
        self.started = time.monotonic()
        self.memory_base: Baseline | None = None   # what it held at hello, before the learner's module (harness/memory.py)

    # -- low level ------------------------------------------------------------------------

    def _fail(self, exc_type: type[_Failure], message: str) -> _Failure:
        self._drain_output()
        self.kill()
        return exc_type(message, self.output.take())

    def protocol_failure(self, exc: BaseException) -> WorkerProtocolError:
        """Kill this worker for a reply that failed to decode (``exc``: whatever was raised)."""
        return self._fail(WorkerProtocolError, protocol_message(decode_detail(exc)))

    def _drain_output(self) -> None:
        while True:
            try:
                chunk = os.read(self.launched.output_fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                return
            if not chunk:
                return
            self.output.add(chunk)

    def _send(self, header: dict[str, Any], tensors: list[torch.Tensor], deadline: Deadline) -> None:
        data = memoryview(wire.encode_frame(header, tensors))
        while data:
            self._wait(deadline, write=True)
            try:
                n = os.write(self.launched.request_fd, data)
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                raise self._fail(WorkerCrashed, self._died_message()) from None
            data = data[n:]

    def _wait(self, deadline: Deadline, write: bool = False) -> None:
        """Wait until the request pipe is writable (or, when reading, the reply pipe readable),
        draining learner output meanwhile."""
        fds_r = [self.launched.output_fd] + ([] if write else [self.launched.reply_fd])
        fds_w = [self.launched.request_fd] if write else []
        while True:
            deadline.tick()
            remaining = deadline.left()
            if remaining <= 0 and deadline.stretch():
                continue
            if remaining <= 0:
                if not write and self.parser.partial:   # part of a frame, then silence
                    raise self._fail(WorkerProtocolError, protocol_message(
                        f"a truncated frame ({self.parser.buffered} bytes of it), then nothing until the time limit"))
                raise self._fail(WorkerTimeout, "")
            readable, writable, _ = select.select(fds_r, fds_w, [], min(remaining, 0.5))
            if self.launched.output_fd in readable:
                self._drain_output()
            if writable or self.launched.reply_fd in readable:
                return
            if not self.launched.alive() and not readable:
                raise self._fail(WorkerCrashed, self._died_message())

    def _read_frame(self, deadline: Deadline) -> tuple[dict[str, Any], list[torch.Tensor]]:
        while True:
            try:
                frame = self.parser.next_frame()
            except Exception as exc:  # noqa: BLE001  any failure to decode is the sender's
                raise self.protocol_failure(exc) from None
            if frame is not None:
                return frame
            self._wait(deadline)
            try:
                chunk = os.read(self.launched.reply_fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise self._fail(WorkerCrashed, self._died_message())
            self.parser.feed(chunk)

    def _died_message(self) -> str:
        reap(self.launched.proc, 2.0)   # a moment for its exit status, without waiting on a hung one
        return f"the worker process died ({self.launched.exit_description()})"

    # -- protocol -------------------------------------------------------------------------

    def wait_hello(self, deadline: float) -> Hello:
        if self.hello is None:
            try:
                header, _ = self._read_frame(Deadline(deadline))
            except WorkerTimeout as exc:
                raise WorkerTimeout("the sandbox did not start in time (torch import too slow?)", exc.output) from None
            try:
                hello = wire_replies.check_hello(header)
            except Exception as exc:  # noqa: BLE001
                raise self.protocol_failure(exc) from None
            self.hello = Hello(hello["torch"], hello["cuda"], time.monotonic() - self.started)
            self.memory_base = baseline(self.launched)
            self.output.take()
        return self.hello

    def request(self, header: dict[str, Any], tensors: list[torch.Tensor], timeout: float,
                latest: float | None = None) -> Reply:
        """Send one request and return its validated reply, or raise a WorkerFailure. ``timeout``
        leaves out the time a busy machine kept the worker waiting for a CPU (harness/deadline.py),
        up to ``latest`` on the monotonic clock when given."""
        deadline = StretchedDeadline(self.launched.proc.pid, timeout, latest)
        rid = self.next_id
        self.next_id += 1
        self._send(dict(header, id=rid), tensors, deadline)
        try:
            reply, out = self._read_frame(deadline)
        except WorkerTimeout as exc:
            callee = str(header.get("fn") or "")[:80] if header.get("op") == "call" else ""
            raise WorkerTimeout(f"{callee or 'the call'} did not return within {timeout:g} s{deadline.note()}",
                                exc.output) from None
        if type(reply.get("id")) is not int or reply["id"] != rid:
            raise self._fail(WorkerProtocolError, protocol_message("an answer out of turn (reply id mismatch)"))
        try:
            elapsed = wire_replies.check_elapsed(reply)
        except Exception as exc:  # noqa: BLE001
            raise self.protocol_failure(exc) from None
        self._drain_output()
        return Reply(reply, out, self.output.take(), elapsed)

    def kill(self) -> None:
        self.launched.kill()

    def alive(self) -> bool:
        return self.launched.alive()


class WorkerPool:
    """Keeps a worker for one submission ready, restarting it after any failure.

    The first worker may be launched before this module (and torch) is even imported, and handed
    in as ``first``, so that its torch import overlaps with the harness's own start-up. A module that fails to import fails the same way for every test, so
    that failure is remembered rather than paid for again.
    """

    def __init__(self, launcher: Launcher, spec: WorkerSpec, *, module: str, functions: list[str],
                 first: Launched | Worker | None = None, forbidden: Iterable[ForbiddenAPI | str] = (),
                 autograd: bool = True, kernel: str | None = None, startup_timeout: float = 60.0,
                 call_timeout: float = 10.0, run_deadline: float | None = None, source: bytes | None = None,
                 replacements: Launcher | None = None):
        self.launcher, self.spec = launcher, spec
        # Where a worker that failed (died, hung, broke the protocol) is replaced from, when not
        # ``launcher``: a cold check's own zygote (src/lumen_ex/sandbox/select.py replacing).
        self.replacements = replacements
        self.failed = False
        # The learner's file as read once when the check began (src/lumen_ex/core/snapshot.py): every worker
        # imports these bytes, never the file on disk, which may have been saved again since.
        self.source = source
        # ForbiddenAPI data (src/lumen_ex/core/forbidden.py): the scan reads it, the worker disables it;
        # and autograd = False (exercise.toml): the worker runs the learner's code with autograd off
        self.module, self.functions, self.forbidden = module, list(functions), list(as_apis(forbidden))
        self.autograd = autograd
        self.kernel = kernel        # "triton": the worker sets Triton up before the import (exercise.toml kernel)
        self.compiling = False      # the next worker imports the kernels to compile them, not to run them
        self.startup_timeout, self.call_timeout = startup_timeout, call_timeout
        self.run_deadline = run_deadline
        self.worker: Worker | None = None
        self.loaded = False
        self.signatures: dict[str, dict[str, Any] | None] | None = None   # wire_replies.check_functions
        self.load_failure: Exception | None = None
        self.hung: dict[str, str] = {}   # learner function -> why it is not called again (see call)
        self.restarts = 0
        self.import_output = ""
        self.enforced: dict[str, str] = {}   # which mechanism held each limit (for the record)
        self.spawn(first)

    def spawn(self, launched: Launched | Worker | None = None) -> None:
        if self.worker is None:
            if isinstance(launched, Worker):   # handed in warm, perhaps with its hello read (watch mode)
                self.worker = launched
            else:
                launcher = self.replacements if self.failed and self.replacements is not None else self.launcher
                self.worker = Worker(launched or launcher.launch(self.spec))
            self.enforced = dict(self.worker.launched.limits)
            self.loaded = False

    def _drop_failed(self) -> None:
        """Kill a worker that died, hung or broke the protocol; the next :meth:`spawn` replaces it
        from ``replacements`` when there is one (a fork instead of a torch import)."""
        self.failed = True
        self.discard()

    def discard(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None
            self.restarts += 1

    def protocol_failure(self, exc: BaseException, output: str = "") -> WorkerProtocolError:
        """A reply that came back whole but failed to decode (``exc``: whatever was raised): the
        worker is replaced (another starts now) and the error returned, to be raised."""
        self._drop_failed()
        self.spawn()
        return WorkerProtocolError(protocol_message(decode_detail(exc)), output)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None

    def _hold(self, worker: Worker, item: wire.Held, limit: float) -> None:
        """Send ``item``'s value to ``worker`` once (src/lumen_ex/sandbox/inside/held.py); a worker
        that does not say it kept it has broken the protocol. A suite that asks one worker to keep
        more than a worker may (``MAX_HELD``: a new Held made for every call, say) is told so here,
        before anything is sent: the exercise's fault, named at its line, never the learner's."""
        if len(worker.holds) >= MAX_HELD:
            raise ValueError(f"one worker keeps at most {MAX_HELD} Held values: make each Held once (at module "
                             "level, or cached) and pass the same one to every call, not a new one per call")
        tensors: list[torch.Tensor] = []
        value = wire.pack(item.value, tensors, dicts=True)[0]
        reply = worker.request({"op": "hold", "key": item.key, "value": value}, tensors, limit, self.run_deadline)
        if reply.header.get("ok") is not True:
            raise worker._fail(WorkerProtocolError, protocol_message("the worker did not keep a value it was sent"))
        worker.holds.add(item.key)

    def _timeout(self, limit: float) -> float:
        if self.run_deadline is None:
            return limit
        remaining = self.run_deadline - time.monotonic()
        if remaining <= 0:
            raise WorkerTimeout("the run time limit was reached before this test")
        return min(limit, remaining)

    def ready(self) -> Worker:
        """A worker with the learner's module imported (or the import failure, raised)."""
        if self.load_failure is not None:
            raise self.load_failure.with_traceback(None)   # one exception, raised afresh: its traceback would grow with every test
        self.spawn()
        worker = self.worker
        assert worker is not None     # spawn() leaves one
        try:
            hello_deadline = time.monotonic() + self._timeout(self.startup_timeout)
            try:
                worker.wait_hello(hello_deadline)
            except (WorkerTimeout, WorkerCrashed) as exc:   # not started: no learner code has run in it
                raise self._not_ready("did not start", exc) from None
            if not self.loaded:
                self._setup(worker)
                load: dict[str, Any] = {"op": "load", "module": self.module, "path": worker.launched.module_path,
                                        "functions": self.functions, "kernel": bool(self.kernel)}
                sent = []
                if self.source is not None:
                    load["source"] = "tensor"           # the bytes travel as the frame's one tensor
                    sent = [torch.frombuffer(bytearray(self.source), dtype=torch.uint8) if self.source
                            else torch.empty(0, dtype=torch.uint8)]
                reply = worker.request(load, sent, self._timeout(self.call_timeout), self.run_deadline)
                try:
                    ok = wire_replies.check_ok(reply.header)
                    checked = (wire_replies.check_functions(reply.header.get("functions"), self.functions) if ok
                               else wire_replies.check_error(reply.header.get("error")))
                except Exception as exc:  # noqa: BLE001  a malformed load reply is the submission's
                    raise worker.protocol_failure(exc) from None
                if not ok:
                    self.load_failure = ImportFailed(checked, reply.output)
                    raise self.load_failure.with_traceback(None)   # one exception, raised afresh: its traceback would grow with every test
                self.signatures = checked
                self.import_output = reply.output   # shown with the first test that runs
                self.loaded = True
        except WorkerFailure as exc:
            self._drop_failed()
            if self.loaded:
                raise
            # The import itself hung or crashed: it would do so again for every test.
            self.load_failure = type(exc)(f"importing your module: {exc}", exc.output)
            raise self.load_failure.with_traceback(None) from None
        return worker

    def _not_ready(self, what: str, exc: WorkerFailure) -> SetupFailed:
        """A worker that hung or died before the learner's module existed in it (``what`` it did not
        do): it is replaced, and the failure, never the learner's, is kept for every test."""
        self._drop_failed()
        self.load_failure = SetupFailed({"type": f"the sandboxed process {what}", "message": str(exc)}, exc.output,
                                        START_HINT)
        return self.load_failure.with_traceback(None)

    def _setup(self, worker: Worker) -> None:
        """Ask a fresh worker to do what the exercise asks before the learner's module is imported (its
        forbidden APIs, autograd, Triton's mode). Its reply comes before any learner code exists in the
        worker, so an error in it, or no reply at all, is never the learner's (:class:`SetupFailed`),
        kept for every test as an import failure is; a malformed reply is still a protocol failure, as
        every reply is."""
        setup: dict[str, Any] = {"op": "setup", "autograd": self.autograd,
                                 "forbidden": [api.to_wire() for api in self.forbidden]}
        if self.kernel:       # Triton's interpreter unless the kernels run on a GPU
            setup["kernel"] = {"language": self.kernel, "interpret": self.spec.device != "cuda" and not self.compiling}
        limit = self._timeout(self.call_timeout)    # past the run's deadline: the learner's earlier tests spent it
        try:
            reply = worker.request(setup, [], limit, self.run_deadline)
        except (WorkerTimeout, WorkerCrashed) as exc:   # no answer: it did not get as far as the learner's import
            raise self._not_ready("did not get ready", exc) from None
        try:
            ok = wire_replies.check_ok(reply.header)
            error = {} if ok else wire_replies.check_error(reply.header.get("error"))
        except Exception as exc:  # noqa: BLE001  a malformed reply is the submission's, as every reply is
            raise worker.protocol_failure(exc) from None
        if not ok:
            self.load_failure = SetupFailed(error, reply.output)
            raise self.load_failure.with_traceback(None)

    def call(self, header: dict[str, Any], tensors: list[torch.Tensor], timeout: float | None = None, *,
             measure_memory: bool = False, helds: Iterable[wire.Held] = ()) -> Reply:
        """One call of a learner function. A function that once did not return within its time
        limit is not called again in this check: the tests that need it are marked at once, so an
        infinite loop costs one call's time limit, and the other functions' tests still run.
        ``helds``: the Held values the request names, sent first to a worker that lacks them."""
        fn = str(header.get("fn", ""))
        if fn in self.hung:
            raise WorkerTimeout(f"not run: {fn} did not return in an earlier test ({self.hung[fn]})")
        worker = self.ready()
        limit = self._timeout(timeout or self.call_timeout)
        probe = None
        try:
            for item in helds:
                if item.key not in worker.holds:
                    self._hold(worker, item, limit)
            probe = MemoryProbe(worker.launched, worker.memory_base) if measure_memory else None
            reply = worker.request(header, tensors, limit, self.run_deadline)
            if probe is not None:
                reply.memory, probe = probe.finish(), None
            return reply
        except WorkerFailure as exc:
            if probe is not None:
                probe.cancel()
            if isinstance(exc, WorkerTimeout) and fn:
                self.hung[fn] = f"it ran for over {limit:g} s"
            self._drop_failed()
            self.spawn()   # pre-warm the replacement while the harness records this failure
            raise

