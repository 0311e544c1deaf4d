"""The messages between ``lumen-ex grade`` and its grading processes, and their one framing.

Both pipes carry JSON lines: one JSON object, then ``\\n``. The scheduler
(src/lumen_ex/classroom/grading_processes.py) sends a grading process
(src/lumen_ex/classroom/grading_main.py) :class:`JobRequest` lines; the grading process answers:

    {"ready": true}                      Ready: jobs may start
    {"start": ID}                        Started: job ID is being graded from now on (its time limit starts)
    {"pid": PID}                         WorkerPid: a sandboxed worker was started (its process group is PID)
    {"done": ID, "result": {...}}        JobDone: the result document (RunResult.to_dict())

The end of the request pipe (the scheduler closed it) reads as :data:`QUIT`. Both processes are
trusted (learner code runs in neither and cannot reach either pipe), but a line is still read
within a cap (:class:`LineReader`): a longer one is :class:`MessageTooLarge`, never unbounded memory.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from lumen_ex.core.results import RunResult

MAX_MESSAGE_BYTES = 64 << 20        # one line; a container's result document is capped at 8 MiB


class MessageTooLarge(ValueError):
    """A line longer than the reader's cap: the other side is broken, and nothing after it is read."""


# -- scheduler -> grading process ---------------------------------------------------------------


@dataclass(frozen=True)
class JobRequest:
    """Grade exercise ``exercise`` in the throwaway workspace ``workspace`` (an absolute path)."""

    id: int
    exercise: int
    workspace: str
    seed: int
    device: str
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "exercise": self.exercise, "workspace": self.workspace, "seed": self.seed,
                "device": self.device, "note": self.note}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobRequest:
        return cls(data["id"], data["exercise"], data["workspace"], data["seed"], data["device"],
                   data.get("note") or "")


@dataclass(frozen=True)
class Quit:
    """No more jobs: the request pipe was closed (or ``{"quit": true}`` was sent)."""

    def to_dict(self) -> dict[str, Any]:
        return {"quit": True}


QUIT = Quit()
Request = JobRequest | Quit


def parse_request(line: bytes) -> Request:
    """One request line; ValueError (or KeyError) when it is not one: the scheduler sends no other."""
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError(f"a request must be a JSON object, not {type(data).__name__}")
    return QUIT if data.get("quit") else JobRequest.from_dict(data)


# -- grading process -> scheduler ---------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    def to_dict(self) -> dict[str, Any]:
        return {"ready": True}


@dataclass(frozen=True)
class Started:
    id: Any

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.id}


@dataclass(frozen=True)
class WorkerPid:
    pid: int

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid}


_NO_DOCUMENT: Any = object()


@dataclass(frozen=True)
class JobDone:
    id: Any
    document: Any = _NO_DOCUMENT      # RunResult.to_dict(), as sent

    def to_dict(self) -> dict[str, Any]:
        return {"done": self.id, "result": self.document}

    def run_result(self) -> RunResult:
        """The document as a RunResult; KeyError, TypeError or ValueError when it is not one."""
        if self.document is _NO_DOCUMENT:
            raise KeyError("result")
        return RunResult.from_dict(self.document)


Reply = Ready | Started | WorkerPid | JobDone


def parse_reply(line: bytes) -> Reply | None:
    """One reply line, or None for a line that is none of them (it is ignored)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if data.get("ready"):
        return Ready()
    if "pid" in data and isinstance(data["pid"], int):
        return WorkerPid(data["pid"])
    if "start" in data:
        return Started(data["start"])
    if "done" in data:
        return JobDone(data["done"], data.get("result", _NO_DOCUMENT))
    return None


# -- the framing ----------------------------------------------------------------------------------


def write_message(fd: int, message: Request | Reply) -> None:
    """Write ``message`` to the pipe ``fd`` as one JSON line, all of it (a blocking pipe)."""
    view = memoryview((json.dumps(message.to_dict(), separators=(",", ":")) + "\n").encode())
    while view:
        view = view[os.write(fd, view):]


class LineReader:
    """The complete lines read from the pipe ``fd``, each at most ``limit`` bytes.

    A trailing piece without its ``\\n`` is kept for the next read (and dropped at the end of input)."""

    def __init__(self, fd: int, limit: int = MAX_MESSAGE_BYTES, chunk: int = 1 << 20):
        self.fd, self.limit, self.chunk = fd, limit, chunk
        self.eof = False
        self._partial: list[bytes] = []     # the line being read, in pieces
        self._size = 0

    def read(self) -> list[bytes]:
        """One ``os.read``: the lines it completed. At the end of input ``eof`` is set and [] returned;
        on a non-blocking pipe with nothing to read, BlockingIOError is raised (as os.read raises it)."""
        data = os.read(self.fd, self.chunk)
        if not data:
            self.eof = True
            return []
        return self.feed(data)

    def feed(self, data: bytes) -> list[bytes]:
        parts = data.split(b"\n")
        self._partial.append(parts[0])
        self._size += len(parts[0])
        lines: list[bytes] = []
        if len(parts) > 1:
            lines = [b"".join(self._partial), *parts[1:-1]]
            self._partial, self._size = [parts[-1]], len(parts[-1])
        if self._size > self.limit or any(len(line) > self.limit for line in lines):
            size = f"{self.limit >> 20} MiB" if self.limit >= 1 << 20 else f"{self.limit} bytes"
            raise MessageTooLarge(f"a message of more than {size} on the pipe")
        return lines
