"""The playground's checks: one at a time, in a thread of their own, warm.

:class:`CheckService` keeps a :class:`lumen_ex.learner.watch_session.WatchSession` for the exercise
open on the page (``watch=False``: its checks come from the page, not from saves), so the harness
stays imported and a sandboxed worker waits with torch imported: every check gets a fresh worker,
as in ``lumen-ex watch``, and after the first one a check costs the tests and little else. Opening
another exercise closes the previous exercise's session (one waiting worker at most).

A check's events (``progress``, then ``result``, ``cancelled`` or ``failed``) are kept on its
:class:`Check`; the page reads them as server-sent events (src/lumen_ex/playground/app.py). Progress
comes from a pytest plugin (src/lumen_ex/harness/progress.py) and only tells; the verdict is the
result record's. Cancelling stops the run before its next test, refuses new workers and kills the
ones of this check at once; a cancelled check's result is not shown and not recorded.
"""

from __future__ import annotations

import itertools
import queue
import secrets
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from lumen_ex.core.errors import LumenError
from lumen_ex.core.results import join_notes
from lumen_ex.core.untrusted import one_line
from lumen_ex.core.workspace import Workspace

if TYPE_CHECKING:   # imported where first needed at run time (it imports the harness)
    from lumen_ex.learner.watch_session import WatchSession

KEPT_CHECKS = 20     # finished checks whose events can still be read


@dataclass
class Check:
    id: str
    slug: str
    events: list[tuple[str, dict]] = field(default_factory=list)
    done: bool = False
    cancelled: bool = False
    notify: Callable[[], object] | None = None  # wakes the readers (set by the app, thread-safe)

    def publish(self, event: str, data: dict, *, last: bool = False) -> None:
        self.events.append((event, data))
        if last:
            self.done = True
        if self.notify is not None:
            self.notify()


class Busy(LumenError):
    """A check is running already."""


class CheckService:
    """Runs the page's checks in one thread, with a warm session for the open exercise."""

    def __init__(self, workspace: Workspace, *, sandbox: str = "auto", seed: int | None = None,
                 device: str = "auto"):
        from lumen_ex.harness.progress import Progress
        from lumen_ex.learner.prewarm import SharedLauncher

        self.workspace = workspace
        self.sandbox, self.seed, self.device = sandbox, seed, device
        # as watch mode chooses it; one for every exercise the page opens (its zygote imports torch once)
        self.shared = SharedLauncher(sandbox)
        launcher, self.warning = self.shared.launcher, self.shared.warning
        self.sandbox_info = {"name": launcher.name, "isolated": launcher.isolated,
                             "note": join_notes(launcher.note(), self.warning)}
        self.progress = Progress()
        self.session: WatchSession | None = None    # the session of the open exercise
        self.checks: dict[str, Check] = {}
        self.current: Check | None = None
        self.jobs: queue.Queue = queue.Queue()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False
        self.thread = threading.Thread(target=self._main, name="lumen-ex-serve-checks", daemon=True)
        self.thread.start()

    # -- requests (from the server's thread) ---------------------------------------------------------

    def warm(self, slug: str) -> None:
        """Make the exercise's session ready (a worker importing torch) before its first check."""
        self.jobs.put(("warm", slug))

    def start(self, slug: str) -> Check:
        with self._lock:
            if self.current is not None and not self.current.done:
                raise Busy("a check is running already", "Wait for it, or press Cancel")
            check = Check(f"{next(self._ids)}-{secrets.token_hex(4)}", slug)
            self.current = check
            self.checks[check.id] = check
            for old in list(self.checks)[:-KEPT_CHECKS]:
                del self.checks[old]
        self.jobs.put(("check", check))
        return check

    def cancel(self, check_id: str) -> bool:
        check = self.checks.get(check_id)
        if check is None or check.done:
            return False
        check.cancelled = True
        self.progress.cancelled = True
        session = self.session
        if session is not None and self.current is check:
            session.launcher.refuse = True          # no worker replaces the ones killed now
            for launched in session.launcher.launched():
                launched.stop_now()
        return True

    def close(self) -> None:
        self._closed = True
        self.jobs.put(("stop", None))
        self.thread.join(30)

    # -- the checks' thread ------------------------------------------------------------------------------

    def _main(self) -> None:
        while True:
            kind, item = self.jobs.get()
            if kind == "stop":
                break
            try:
                if kind == "warm":
                    if self._newer_warm_queued():
                        continue          # only the exercise opened last is made ready
                    self._session_for(item)
                elif kind == "check":
                    self._run(item)
            except BaseException as exc:  # noqa: BLE001  the thread serves the next request
                if kind == "check" and not item.done:
                    item.publish("failed", {"message": _message(exc)}, last=True)
        self._close_session()
        self.shared.close()

    def _newer_warm_queued(self) -> bool:
        """Is another ``warm`` waiting behind this one? (Many pages opened at once, or a flood of
        ``open`` requests, then start one session, not one each.)"""
        with self.jobs.mutex:
            return any(kind == "warm" for kind, _ in self.jobs.queue)

    def _session_for(self, slug: str):
        from lumen_ex.learner.watch_session import WatchSession

        if self.session is not None and self.session.ex.slug == slug:
            return self.session
        self._close_session()
        self.session = WatchSession(slug, workspace=self.workspace.root, sandbox=self.sandbox, seed=self.seed,
                                    device=self.device, record=False, watch=False, plugins=(self.progress,),
                                    shared=self.shared)
        return self.session

    def _close_session(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            session.close()

    def _run(self, check: Check) -> None:
        if check.cancelled:
            check.publish("cancelled", {}, last=True)
            return
        session = self._session_for(check.slug)
        self.progress.reset(lambda event: check.publish("progress", event))
        if check.cancelled:          # cancelled while the session was being made
            self.progress.cancelled = True
        result = None
        try:
            result = session.check_once()
        except BaseException:  # noqa: BLE001  a cancelled check may end in any exception
            if not check.cancelled:
                raise
        finally:
            self.progress.reset(None)
            session.launcher.refuse = False
        try:
            if check.cancelled:
                check.publish("cancelled", {}, last=True)
            else:
                self._publish(check, session, result)
        finally:
            session.prepare_next()   # the next worker is made ready while the learner reads

    def _publish(self, check: Check, session, result) -> None:
        from lumen_ex.feedback.web import web_view

        if result.status.value != "error":
            try:
                self.workspace.record_result(session.ex.slug, result)
            except OSError as exc:
                result.warnings.append(f"your progress was not saved ({exc.strerror or type(exc).__name__})")
        check.publish("result", {"view": web_view(result), "record": result.to_dict()}, last=True)


def _message(exc: BaseException) -> str:
    if isinstance(exc, LumenError):
        return one_line(str(exc))
    return one_line(f"the check could not run: {type(exc).__name__}: {exc}")
