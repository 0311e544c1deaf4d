"""Running ``lumen-ex serve`` for real in a test: the command as a learner starts it, in a process
of its own, on a free port; requests sent as raw HTTP (so a test can set any Host or Origin)."""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import LUMEN_EX, interruptible
from proc_support import descendants, running_with

START_TIMEOUT = 60.0


@dataclass
class Served:
    proc: subprocess.Popen
    url: str          # the printed link, with its token in the fragment
    port: int
    token: str
    printed: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body=None, *, host: str | None = None, origin: str | None = "same",
                token: str | None = "header", content_type: str | None = "application/json",
                headers: dict | None = None, timeout: float = 30.0):
        """Send one request; (status, headers as a lower-cased dict, body bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Host": host if host is not None else f"127.0.0.1:{self.port}"}
        if token == "header":
            h["Authorization"] = f"token {self.token}"
        elif token is not None:
            h["Authorization"] = f"token {token}"
        if origin == "same":
            h["Origin"] = self.base
        elif origin is not None:
            h["Origin"] = origin
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            if content_type:
                h["Content-Type"] = content_type
            h["Content-Length"] = str(len(data))
        h.update(headers or {})
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in h.items():
            conn.putheader(k, v)
        conn.endheaders(data)
        response = conn.getresponse()
        out = (response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        conn.close()
        return out

    def json(self, method: str, path: str, body=None, **kwargs):
        status, _, data = self.request(method, path, body, **kwargs)
        return status, json.loads(data) if data else None

    def events(self, check_id: str, timeout: float = 120.0) -> list[tuple[str, dict]]:
        """Every server-sent event of a check, to its last."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        conn.request("GET", f"/api/checks/{check_id}/events", headers={"Authorization": f"token {self.token}"})
        response = conn.getresponse()
        assert response.status == 200, response.read()
        out, name = [], None
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                out.append((name, json.loads(line[6:])))
        conn.close()
        return out

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def serve(workspace: Path, *args: str, env: dict | None = None) -> Served:
    """Start ``lumen-ex serve --no-browser --port 0`` on ``workspace``; return once it prints its URL."""
    proc = subprocess.Popen([LUMEN_EX, "serve", "--no-browser", "--port", "0", "--workspace", str(workspace), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=interruptible,
                            env={**os.environ, **(env or {})})
    printed: list[str] = []
    pending = b""
    deadline = time.monotonic() + START_TIMEOUT
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            chunk = os.read(fd, 65536)     # not readline(): its buffer would hide lines from select()
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode()
                printed.append(line)
                m = re.search(r"(http://[^ ]+/#token=([A-Za-z0-9_-]+))", line)
                if m:
                    url = m.group(1)
                    port = int(re.search(r":(\d+)/", url).group(1))
                    return Served(proc, url, port, m.group(2), printed)
        elif proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("lumen-ex serve did not print its URL:\n" + "\n".join(printed))


def processes_naming(text: str) -> list[str]:
    """The running processes whose command line mentions ``text`` (a workspace's path: every worker the
    server starts names it), to show that stopping the server left none behind."""
    return [str(proc) for proc in running_with(text)]


def workers_of(pid: int) -> list[str]:
    """The sandboxed workers (worker.py processes) among the descendants of ``pid``."""
    return [str(proc) for proc in descendants(pid).values() if proc.running and b"worker.py" in proc.cmdline]
