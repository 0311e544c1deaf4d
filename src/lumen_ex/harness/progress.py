"""Per-test progress of a running check, for views that show it live (``lumen-ex serve``).

A :class:`Progress` is a pytest plugin: after collection it reports how many tests there are, and
after each test how many have run, the last one's name, how many have failed and the title of the
first that did (``first_failed``: a learner sees what fails first while the rest runs). Titles
are the hidden suite's own (its docstrings), never the learner's text. It only tells; the
verdict is still the result record's (src/lumen_ex/harness/plugin.py). ``listener`` is set per check
(None: nobody listens) and ``cancelled`` ends the run before its next test starts. The result's
first failure may be another test than ``first_failed``: the record orders failures by how much
they explain (src/lumen_ex/core/results.py), which is known only at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:   # for annotations only: `lumen-ex watch` makes this plugin before it imports pytest
    import pytest

# What a listener is told (JSON for the playground's page): done, total, name, failed, first_failed.
Event = dict[str, Any]
Listener = Callable[[Event], None]


class Progress:
    def __init__(self) -> None:
        self.listener: Listener | None = None
        self.cancelled = False
        self.total = 0
        self.done = 0
        self._names: dict[str, str] = {}
        self._failed: set[str] = set()
        self.first_failed = ""

    def reset(self, listener: Listener | None) -> None:
        """Before a check: who listens to it (the run's counts start again)."""
        self.listener, self.cancelled, self.done = listener, False, 0
        self._failed, self.first_failed = set(), ""

    def _event(self, name: str) -> Event:
        return {"done": self.done, "total": self.total, "name": name, "failed": len(self._failed),
                "first_failed": self.first_failed}

    def _tell(self, event: Event) -> None:
        listener = self.listener
        if listener is not None:
            listener(event)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)
        self._names = {item.nodeid: _title(item) for item in session.items}
        self.done = 0
        self._failed, self.first_failed = set(), ""
        self._tell(self._event(""))

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.cancelled:
            import pytest  # here: `lumen-ex watch` makes this plugin before it imports pytest

            pytest.exit("the check was cancelled")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and report.nodeid not in self._failed:
            self._failed.add(report.nodeid)
            self.first_failed = self.first_failed or self._names.get(report.nodeid, report.nodeid)

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        self.done += 1
        self._tell(self._event(self._names.get(nodeid, nodeid)))


def _title(item: pytest.Item) -> str:
    doc: str = (getattr(getattr(item, "function", None), "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else item.name
