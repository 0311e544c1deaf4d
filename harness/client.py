"""The harness's end of the pipe: start workers, send requests, read validated replies.

Everything a worker sends is untrusted. Replies are read with a deadline while the learner's
output is drained at the same time (so 300 MB of prints can neither block the worker nor fill our
memory), every frame is validated by ``wire``, and request ids must match. Any failure (timeout,
death, garbage) kills the worker with everything it started; the next call gets a fresh one.
"""

from __future__ import annotations

import os
import select
import time
from dataclasses import dataclass, field

import torch

from lumen_ex.sandbox.base import Launched, Launcher, WorkerSpec

from . import wire

OUTPUT_CAP = 8 * 1024


class WorkerFailure(Exception):
    """The worker did not answer properly. ``kind`` is timeout, crash or protocol."""

    kind = "crash"

    def __init__(self, message: str, output: str = ""):
        super().__init__(message)
        self.output = output


class WorkerTimeout(WorkerFailure):
    kind = "timeout"


class WorkerCrashed(WorkerFailure):
    kind = "crash"


class WorkerProtocolError(WorkerFailure):
    kind = "protocol"


class LearnerError(Exception):
    """The learner's code raised an exception (reported by the worker: a claim, not a verdict)."""

    def __init__(self, error: dict, output: str = ""):
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
    header: dict
    tensors: list[torch.Tensor]
    output: str = ""
    elapsed: float = 0.0


@dataclass
class Hello:
    torch_version: str = ""
    cuda: bool = False
    startup_seconds: float = 0.0
    extra: dict = field(default_factory=dict)


class Worker:
    """One running sandboxed worker."""

    def __init__(self, launched: Launched):
        self.launched = launched
        self.parser = wire.FrameParser()
        self.output = OutputBuffer()
        self.next_id = 1
        self.hello: Hello | None = None
        self.started = time.monotonic()

    # -- low level ------------------------------------------------------------------------

    def _fail(self, exc_type, message: str) -> WorkerFailure:
        self._drain_output()
        self.kill()
        return exc_type(message, self.output.take())

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

    def _send(self, header: dict, tensors: list[torch.Tensor], deadline: float) -> None:
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

    def _wait(self, deadline: float, write: bool = False) -> None:
        """Wait until the request pipe is writable (or, when reading, the reply pipe readable),
        draining learner output meanwhile."""
        fds_r = [self.launched.output_fd] + ([] if write else [self.launched.reply_fd])
        fds_w = [self.launched.request_fd] if write else []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._fail(WorkerTimeout, "")
            readable, writable, _ = select.select(fds_r, fds_w, [], min(remaining, 0.5))
            if self.launched.output_fd in readable:
                self._drain_output()
            if writable or self.launched.reply_fd in readable:
                return
            if not self.launched.alive() and not readable:
                raise self._fail(WorkerCrashed, self._died_message())

    def _read_frame(self, deadline: float) -> tuple[dict, list[torch.Tensor]]:
        while True:
            try:
                frame = self.parser.next_frame()
            except wire.ProtocolError as exc:
                raise self._fail(WorkerProtocolError, f"the worker sent an invalid reply: {exc}") from None
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
        try:
            self.launched.proc.wait(timeout=2)
        except Exception:  # noqa: BLE001
            pass
        return f"the worker process died ({self.launched.exit_description()})"

    # -- protocol -------------------------------------------------------------------------

    def wait_hello(self, deadline: float) -> Hello:
        if self.hello is None:
            try:
                header, _ = self._read_frame(deadline)
            except WorkerTimeout as exc:
                raise WorkerTimeout("the sandbox did not start in time (torch import too slow?)", exc.output) from None
            if header.get("hello") is not True:
                raise self._fail(WorkerProtocolError, "the worker did not start with a hello frame")
            self.hello = Hello(str(header.get("torch", ""))[:40], header.get("cuda") is True,
                               time.monotonic() - self.started)
            self.output.take()
        return self.hello

    def request(self, header: dict, tensors: list[torch.Tensor], timeout: float) -> Reply:
        """Send one request and return its validated reply, or raise a WorkerFailure."""
        deadline = time.monotonic() + timeout
        rid = self.next_id
        self.next_id += 1
        self._send(dict(header, id=rid), tensors, deadline)
        try:
            reply, out = self._read_frame(deadline)
        except WorkerTimeout as exc:
            raise WorkerTimeout(f"the call did not return within {timeout:g} s", exc.output) from None
        if reply.get("id") != rid:
            raise self._fail(WorkerProtocolError, "the worker answered out of turn (reply id mismatch)")
        self._drain_output()
        elapsed = reply.get("elapsed")
        return Reply(reply, out, self.output.take(), elapsed if isinstance(elapsed, float) else 0.0)

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
                 first: Launched | None = None,
                 forbidden: list[str] = (), startup_timeout: float = 60.0, call_timeout: float = 10.0,
                 run_deadline: float | None = None):
        self.launcher, self.spec = launcher, spec
        self.module, self.functions, self.forbidden = module, list(functions), list(forbidden)
        self.startup_timeout, self.call_timeout = startup_timeout, call_timeout
        self.run_deadline = run_deadline
        self.worker: Worker | None = None
        self.loaded = False
        self.signatures: dict | None = None
        self.load_failure: Exception | None = None
        self.restarts = 0
        self.import_output = ""
        self.enforced: dict[str, str] = {}   # which mechanism held each limit (for the record)
        self.spawn(first)

    def spawn(self, launched: Launched | Worker | None = None) -> None:
        if self.worker is None:
            if isinstance(launched, Worker):   # handed in warm, perhaps with its hello read (watch mode)
                self.worker = launched
            else:
                self.worker = Worker(launched or self.launcher.launch(self.spec))
            self.enforced = dict(self.worker.launched.limits)
            self.loaded = False

    def discard(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None
            self.restarts += 1

    def close(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None

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
            raise self.load_failure
        self.spawn()
        worker = self.worker
        try:
            hello_deadline = time.monotonic() + self._timeout(self.startup_timeout)
            worker.wait_hello(hello_deadline)
            if not self.loaded:
                reply = worker.request(
                    {"op": "load", "module": self.module, "path": worker.launched.module_path,
                     "functions": self.functions, "forbidden": self.forbidden},
                    [], self._timeout(self.call_timeout))
                if not reply.header.get("ok"):
                    self.load_failure = ImportFailed(_error_of(reply.header), reply.output)
                    raise self.load_failure
                self.signatures = reply.header.get("functions") if isinstance(reply.header.get("functions"), dict) else {}
                self.import_output = reply.output   # shown with the first test that runs
                self.loaded = True
        except WorkerFailure as exc:
            self.discard()
            if self.loaded:
                raise
            # The import itself hung or crashed: it would do so again for every test.
            self.load_failure = type(exc)(f"importing your module: {exc}", exc.output)
            raise self.load_failure from None
        return worker

    def call(self, header: dict, tensors: list[torch.Tensor], timeout: float | None = None) -> Reply:
        worker = self.ready()
        try:
            return worker.request(header, tensors, self._timeout(timeout or self.call_timeout))
        except WorkerFailure:
            self.discard()
            self.spawn()   # pre-warm the replacement while the harness records this failure
            raise


def _error_of(header: dict) -> dict:
    error = header.get("error")
    return error if isinstance(error, dict) else {"type": "Error", "message": "unknown error"}
