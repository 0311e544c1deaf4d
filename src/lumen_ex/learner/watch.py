"""``lumen-ex watch``: re-check an exercise on every save, answering in a fraction of a second.

A cold ``lumen-ex check`` spends almost all its time importing torch twice (here and in the
worker) and setting pytest up. Watch mode pays that once: the harness stays imported in this
process, and before each save the next sandboxed worker (torch imported, waiting for its ``load``
request) and the next check's pytest session (configured, the suite collected) are made ready in
advance. Under bwrap each worker is forked from one warm zygote of the session
(src/lumen_ex/sandbox/zygote.py: a fork, not a torch import), so even saves in quick succession do
not wait for one. Every check still gets a fresh worker: one run cannot influence the next. A re-check thus
costs the learner's import, the hidden tests themselves and little else (see
bench/watch_latency.py).

This module is the public entry point; the work is split the way rustlings splits its watch mode:

- src/lumen_ex/learner/watch_session.py, the session: the loop itself (wait for a save, debounce,
  check, hand the result to a render callback, stop on Ctrl-C): :class:`WatchSession`, :func:`serve`;
- src/lumen_ex/learner/prewarm.py, the pre-warm: the worker launched in advance and kept ready
  between saves, and the next check's pytest session (src/lumen_ex/harness/prepared_session.py's
  ``PreparedSession``, which a grading process keeps too): :class:`Prewarm`;
- src/lumen_ex/learner/file_events.py, the file events: seeing a save through inotify, or by polling:
  :class:`Inotify`, :class:`Poller`.

The harness here is the ``lumen-ex`` process itself, which never imports from the current folder
or a ``PYTHONPATH`` (src/lumen_ex/core/trusted.py); the only processes it starts are the sandboxed workers,
``python -I`` in a fixed folder with a clean environment (src/lumen_ex/sandbox/base.py).
Under ``--sandbox docker`` the workers are forked in one container of the grader image kept for the
session (src/lumen_ex/sandbox/docker_slot.py), the harness staying here, as in ``lumen-ex grade``.
"""

from __future__ import annotations

from lumen_ex.learner.file_events import POLL_INTERVAL, Change, Inotify, Poller, file_digest
from lumen_ex.learner.prewarm import (
    RESPAWN_FAILURES,
    GuardedLauncher,
    Prewarm,
    WatchStopped,
    deferred_interrupts,
)
from lumen_ex.learner.watch_session import DEBOUNCE, MAX_SETTLE, WatchSession, serve, watch_launcher

__all__ = [
    "DEBOUNCE", "MAX_SETTLE", "POLL_INTERVAL", "RESPAWN_FAILURES",
    "Change", "GuardedLauncher", "Inotify", "Poller", "Prewarm",
    "WatchSession", "WatchStopped",
    "deferred_interrupts", "file_digest", "serve", "watch_launcher",
]
