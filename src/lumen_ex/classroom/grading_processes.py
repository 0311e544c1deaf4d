"""One warm grading process of ``lumen-ex grade`` (src/lumen_ex/classroom/grading_main.py), seen from the batch.

The batch (src/lumen_ex/classroom/scheduler.py) sends it jobs and reads its replies (ready, started,
the sandboxed workers' pids, the result document) as the JSON lines of
src/lumen_ex/classroom/messages.py. :meth:`GradingProcess.stop` ends it in every path: SIGTERM first
(its check in progress kills its workers or container on the way out), then SIGKILL of its whole
process group, then any sandboxed worker or cgroup it left (src/lumen_ex/sandbox/processes.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from lumen_ex.classroom.batch_types import Job
from lumen_ex.classroom.messages import JobRequest, LineReader, MessageTooLarge, Reply, parse_reply, write_message
from lumen_ex.core.trusted import TRUSTED_CWD, child_env, python_command
from lumen_ex.sandbox import cgroups as limits
from lumen_ex.sandbox import processes

STOP_GRACE_S = 15.0              # how long a grading process has to clean up after SIGTERM
EXIT_WAIT_S = 10.0               # how long it has to exit once its request pipe is closed


class GradingProcess:
    """One warm ``python -I -m lumen_ex.classroom.grading_main`` and the jobs it has been given.

    It runs isolated (src/lumen_ex/core/trusted.py): ``-I``, working folder ``/``, no PYTHON* variables, so
    that nothing in the folder ``lumen-ex grade`` was started from (often a student's) is imported."""

    def __init__(self, sandbox: str, log: Path, tag: str):
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as log_file:
            try:
                self.proc = subprocess.Popen(
                    python_command("lumen_ex.classroom.grading_main", str(req_r), str(rep_w), sandbox, tag),
                    pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                    close_fds=True, start_new_session=True, cwd=TRUSTED_CWD, env=child_env())
            finally:
                os.close(req_r)
                os.close(rep_w)
        self.request_fd, self.reply_fd = req_w, rep_r
        os.set_blocking(self.reply_fd, False)
        self.replies = LineReader(self.reply_fd)
        self.broken = ""                    # why its replies are no longer read (a message over the cap)
        self.log = log
        self.queue: list[Job] = []          # sent and not finished; queue[0] runs once started
        self.ready = False
        self.worker_pids: set[int] = set()
        self.closed = False
        self.spawned = time.monotonic()

    def send(self, job: Job, workspace: Path, device: str, note: str) -> None:
        write_message(self.request_fd, JobRequest(job.id, job.exercise.number, str(Path(workspace).absolute()),
                                                  job.seed, device, note))
        self.queue.append(job)

    def receive(self) -> tuple[list[Reply], bool]:
        """Replies that have arrived, and whether the process has closed its end (died) or sent a
        message over the cap (then :attr:`broken` says so, and nothing more is read from it)."""
        out: list[Reply] = []
        if self.broken:
            return out, True
        try:
            while not self.replies.eof:
                try:
                    lines = self.replies.read()
                except BlockingIOError:
                    break
                out += filter(None, map(parse_reply, lines))
        except MessageTooLarge as exc:
            self.broken = f"the grading process sent {exc}"
            return out, True
        return out, self.replies.eof

    def exit_description(self) -> str:
        code = processes.reap(self.proc, 5)
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log.read_bytes()[-4000:].decode(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def terminate(self) -> None:
        """Ask it to stop (its check in progress then kills its workers): SIGTERM to its process group,
        and SIGCONT, because a stopped process must run to clean up."""
        processes.terminate(self.proc)

    def stop(self, grace: float = STOP_GRACE_S, polite: bool = False) -> None:
        """SIGTERM (its check kills its workers), then SIGKILL, then any worker it left behind.

        ``polite``: it has no work left; closing its request pipe makes it exit by itself."""
        if self.closed:
            return
        self.closed = True
        try:
            os.close(self.request_fd)
        except OSError:
            pass
        if polite:
            processes.reap(self.proc, EXIT_WAIT_S)
        processes.stop(self.proc, grace)    # its own group: nothing else is in it
        for pid in self.worker_pids:
            kill_worker_group(pid)
        remove_cgroups(self.proc.pid)
        try:
            os.close(self.reply_fd)
        except OSError:
            pass


def remove_cgroups(pid: int) -> None:
    """Remove the (empty) worker cgroups a killed grading process had no chance to remove."""
    try:
        paths = limits.worker_cgroups(pid)
    except Exception:  # noqa: BLE001  no cgroups here
        return
    for path in paths:
        for _ in range(20):
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)    # its processes are still being reaped


def kill_worker_group(pid: int) -> None:
    """Kill a sandboxed worker's process group, if that pid is still one of our workers."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if b"worker.py" not in cmdline and b"zygote.py" not in cmdline:
        return
    processes.kill_group(pid)
