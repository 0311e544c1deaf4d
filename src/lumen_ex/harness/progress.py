"""Per-test progress of a running check, for views that show it live (``lumen-ex serve``).

A :class:`Progress` is a pytest plugin: after collection it reports how many tests there are, and
after each test how many have run and the last one's name. It only tells; the
verdict is still the result record's (src/lumen_ex/harness/plugin.py). ``listener`` is set per check
(None: nobody listens) and ``cancelled`` ends the run before its next test starts.
"""

from __future__ import annotations

from typing import Callable

import pytest

Listener = Callable[[dict], None]


class Progress:
    def __init__(self) -> None:
        self.listener: Listener | None = None
        self.cancelled = False
        self.total = 0
        self.done = 0
        self._names: dict[str, str] = {}

    def reset(self, listener: Listener | None) -> None:
        """Before a check: who listens to it (the run's counts start again)."""
        self.listener, self.cancelled, self.done = listener, False, 0

    def _tell(self, event: dict) -> None:
        listener = self.listener
        if listener is not None:
            listener(event)

    def pytest_collection_finish(self, session) -> None:
        self.total = len(session.items)
        self._names = {item.nodeid: _title(item) for item in session.items}
        self.done = 0
        self._tell({"done": 0, "total": self.total, "name": ""})

    def pytest_runtest_setup(self, item) -> None:
        if self.cancelled:
            pytest.exit("the check was cancelled")

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        self.done += 1
        self._tell({"done": self.done, "total": self.total, "name": self._names.get(nodeid, nodeid)})


def _title(item) -> str:
    doc = (getattr(getattr(item, "function", None), "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else item.name
