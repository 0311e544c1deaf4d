"""A worker forked from a zygote, as the harness sees it (src/lumen_ex/sandbox/zygote.py): the
``Launched.proc`` of a forked worker, its exit status sent by its init, a process of ours it cannot
reach."""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import subprocess
import time


class ForkedProcess:
    """What ``Launched.proc`` is for a forked worker: the subprocess.Popen calls the harness makes
    (pid, poll, wait, returncode), answered from the worker's init.

    ``pid`` is the init's pid as this side sees it (the leader of the worker's process group: the
    harness kills the group, and with the init the kernel kills its whole pid namespace). The exit
    status is the worker's, sent by its init when the worker exits; an init killed before it could
    send one (the harness's SIGKILL, or the kernel's) reads as killed by SIGKILL."""

    def __init__(self, pid: int, channel: socket.socket):
        self.pid = pid
        self.returncode: int | None = None
        self._channel = channel
        self._buffer = b""
        channel.setblocking(False)

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                assert timeout is not None      # remaining is a number only when a timeout was given
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            select.select([self._channel], [], [], remaining)
        return code

    def _read(self) -> None:
        try:
            chunk = self._channel.recv(64)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        self._buffer += chunk
        if self._buffer.startswith(b"x") and len(self._buffer) >= 5:
            (status,) = struct.unpack(">i", self._buffer[1:5])
            try:
                self._finish(os.waitstatus_to_exitcode(status))
            except ValueError:
                self._finish(-signal.SIGKILL)
        elif not chunk:
            self._finish(-signal.SIGKILL)

    def _finish(self, code: int) -> None:
        self.returncode = code
        self._channel.close()
