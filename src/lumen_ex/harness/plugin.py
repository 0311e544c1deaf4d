"""The pytest plugin that turns hidden-test outcomes into structured results.

It provides the fixtures hidden suites use (``submission``, ``device``, ``seed``, ``cuda``) and
records one :class:`TestResult` per test from the harness's own view of what happened: pytest's
report plus the exception object the test raised. Nothing the worker printed or returned as an
exit status plays any part in a verdict.
"""

from __future__ import annotations

import hashlib
import time
import traceback
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from lumen_ex.core.catalog import Exercise
from lumen_ex.core.results import CheckFailed, Diagnosis, Status, TestResult, take_notes, take_tolerance_share
from lumen_ex.harness.client import BUG_HINT, ImportFailed, LearnerError, SetupFailed, WorkerFailure
from lumen_ex.harness.float32_cause import float32_cause
from lumen_ex.harness.proxy import LearnerModule

if TYPE_CHECKING:
    from pluggy import Result

STATUS_OF_KIND = {"timeout": Status.TIMEOUT, "crash": Status.ERROR, "protocol": Status.FAIL,
                  "import": Status.ERROR, "grader": Status.ERROR}


class GradingPlugin:
    def __init__(self, learner: LearnerModule | None, *, seed: int, device: str, exercise: Exercise):
        self._learner = learner
        self._exercise = exercise
        self._suite = exercise.suite
        self._seed = seed
        self._device = device
        self.results: dict[str, TestResult] = {}
        self.order: list[str] = []
        self.collect_errors: list[str] = []

    def begin(self, learner: LearnerModule) -> None:
        """Record a new run, against ``learner`` (a prepared session's next submission,
        src/lumen_ex/harness/prepared_session.py); what collection found stays."""
        self._learner = learner
        self.results = {}
        self.order = []

    @property
    def learner(self) -> LearnerModule:
        """The learner's module of the run: given here or by :meth:`begin` before its tests run."""
        return cast(LearnerModule, self._learner)

    # -- fixtures -----------------------------------------------------------------------------

    @pytest.fixture
    def submission(self) -> LearnerModule:
        """The learner's module (the fixture keeps the name the hidden suites use)."""
        return self.learner

    @pytest.fixture
    def device(self) -> str:
        return self._device

    @pytest.fixture
    def seed(self, request: pytest.FixtureRequest) -> int:
        """A seed of this test's own: the same for the same run seed, whatever else is run, and
        wherever the pack lies (keyed by the exercise's suite id and the test's own id)."""
        key = f"{self._seed}:{self._suite}/{_short_id(request.node.nodeid)}"
        digest = hashlib.sha256(key.encode()).digest()
        return int.from_bytes(digest[:6], "big")

    @pytest.fixture
    def cuda(self) -> str:
        """The device for tests that need a GPU; skipped cleanly without one."""
        if not self.learner.cuda_available:
            pytest.skip("no CUDA device in the sandbox")
        return "cuda"

    # -- hooks --------------------------------------------------------------------------------

    def pytest_configure(self, config: pytest.Config) -> None:
        config.addinivalue_line("markers", "group(name): the scoring group of a test (see the catalogue)")

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        # A failed test's verdict and diagnosis come from its exception (pytest_runtest_makereport
        # below), never from pytest's formatted traceback, which no view shows. Formatting one
        # parses the source of every frame (0.05 s a failure, most of a buggy file's check), so
        # each test's report carries the exception's one line instead.
        for item in items:
            item.repr_failure = _brief_failure  # type: ignore[method-assign]  # this item's own, in place of pytest's

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(str(report.longrepr)[-2000:])

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.learner.outputs.clear()
        take_notes()   # a note left outside a test belongs to none
        take_tolerance_share()
        self._started = time.perf_counter()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, Result[pytest.TestReport], None]:
        outcome = yield
        report = outcome.get_result()
        if call.when == "teardown" and not report.failed:
            return
        record = self.results.get(item.nodeid)
        if record is None:
            record = TestResult(id=_short_id(item.nodeid), name=_name(item), group=_group(item),
                                status=Status.PASS)
            self.results[item.nodeid] = record
            self.order.append(item.nodeid)
        if report.skipped:
            record.status = Status.SKIPPED
            record.message = _skip_reason(report)
        elif report.failed:
            record.status, record.diagnosis = _classify(call.excinfo, self._exercise)
            with_source_line(record.diagnosis, self.learner)
            record.message = record.diagnosis.summary
        notes = take_notes()
        if notes and record.status is Status.PASS and not record.message:
            record.message = " ".join(notes)   # a passing test's remark (src/lumen_ex/core/results.py note)
        share = take_tolerance_share()
        if record.status is not Status.PASS:
            record.tolerance_used = None       # only a passing test says how near the line it stayed
        elif share is not None:
            record.tolerance_used = max(share, record.tolerance_used or 0.0)
        record.output = _cap("".join(o for o in self.learner.outputs if o))
        record.duration = time.perf_counter() - self._started

    def ordered(self) -> list[TestResult]:
        return [self.results[n] for n in self.order]


def graded_lines(learner: LearnerModule) -> list[str]:
    """The lines of the learner's file as this check graded it: the snapshot the harness read once
    (src/lumen_ex/core/snapshot.py, held by the worker pool), never the file on disk, which may have changed."""
    data = learner.graded_source
    return data.decode("utf-8", "replace").splitlines() if data is not None else []


def with_source_line(diag: Diagnosis, learner: LearnerModule) -> None:
    """Show the learner's own line under a diagnosis: for an exception, the line its traceback
    points to ("attention.py line 12 in f", details["where"]), read from the graded snapshot (the
    worker only says which line); for a float32 result, the line that made it
    (src/lumen_ex/harness/float32_cause.py)."""
    lines = graded_lines(learner)
    if not lines:
        return
    float32_cause(diag, lines, learner.module_file)
    where = diag.details.get("where")
    prefix = f"{learner.module_file} line "
    if diag.kind != "exception" or not isinstance(where, str) or not where.startswith(prefix):
        return
    number = where[len(prefix):].split(" ", 1)[0]
    if number.isdigit() and 1 <= int(number) <= len(lines):
        diag.details["code"] = lines[int(number) - 1].strip()[:200]


def _classify(excinfo: pytest.ExceptionInfo[BaseException] | None,
              exercise: Exercise | None = None) -> tuple[Status, Diagnosis]:
    exc = excinfo.value if excinfo is not None else None
    diag: Diagnosis | None
    if isinstance(exc, CheckFailed):
        diag = exc.diagnosis
    elif isinstance(exc, ImportFailed):
        diag = import_failure(exc)
    elif isinstance(exc, SetupFailed):
        diag = Diagnosis("grader", f"lumen-ex could not prepare the process your code runs in, before any of your "
                                   f"code ran: {exc}"[:500], hint=exc.hint)
    elif isinstance(exc, LearnerError):
        diag = _learner_error(exc)
    elif isinstance(exc, WorkerFailure):
        diag = Diagnosis(exc.kind, str(exc) or "the worker failed")
        if exc.kind == "timeout":
            diag.hint = "Look for a loop that never ends, or work that grows far faster than the input."
    elif isinstance(exc, AssertionError):
        diag = Diagnosis("property", (str(exc).strip().splitlines() or ["a check failed"])[0][:300])
    else:
        diag = author_fault(excinfo, exercise) if exercise is not None and excinfo is not None else None
        if diag is None:
            diag = Diagnosis("grader", f"the grader itself failed: {type(exc).__name__}: {exc}"[:500],
                             hint=BUG_HINT)
    return STATUS_OF_KIND.get(diag.kind, Status.FAIL), diag


def blame_hint(exercise: Exercise, where: str) -> str:
    """Whose fault a failure of the exercise's own code is (``where``: in its folder), and what to do:
    lumen-ex's for the built-in pack, else the pack's, named with its version."""
    if exercise.builtin:
        return f"This is a bug in lumen-ex's exercise {exercise.dir} ({where}), not in your code: please report it."
    return (f"This is a fault in the exercise pack {exercise.pack} ({exercise.dir}/{where}), not in your code: tell "
            "whoever gave you the exercise (their `lumen-ex dev check` shows it too).")


# The most of an exercise author's traceback a diagnosis keeps (its innermost frames).
AUTHOR_FRAMES = 8


def author_fault(excinfo: pytest.ExceptionInfo[BaseException], exercise: Exercise) -> Diagnosis | None:
    """A test that failed in the exercise's own code (its suite, reference or mistakes, not the
    learner's): the fault of whoever wrote the exercise, blamed on its pack with the file and line,
    the whole message, and the author's frames (None when no frame of the traceback is the
    exercise's: then it is lumen-ex's)."""
    root = Path(exercise.root).resolve()
    frames = []
    for entry in excinfo.traceback:
        given = Path(str(entry.path))
        path = given.resolve() if given.is_absolute() else None
        if path is not None and path.is_relative_to(root):
            frames.append((path.relative_to(root).as_posix(), entry.lineno + 1, entry.name))
    if not frames:
        return None
    exc = excinfo.value
    rel, line, _ = frames[-1]
    message = f"{type(exc).__name__}: {exc}"
    last = excinfo.traceback[-1] if len(excinfo.traceback) else None
    if last is not None and not Path(str(last.path)).resolve().is_relative_to(root):   # raised in what it called
        message += f" (raised in {Path(str(last.path)).name} line {last.lineno + 1})"
    stack = [f"{f} line {n}, in {name}" for f, n, name in frames[-AUTHOR_FRAMES:]]
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return Diagnosis("grader", f"the exercise's own code failed at {rel} line {line}: {message}"[:2000],
                     hint=blame_hint(exercise, f"{rel} line {line}"),
                     details={"pack": exercise.pack, "exercise": exercise.dir, "file": rel, "line": line,
                              "error": text[:2000], "frames": stack})


def _learner_error(exc: LearnerError) -> Diagnosis:
    where = exc.location()
    if exc.syntax_line is not None or exc.type in ("SyntaxError", "IndentationError", "TabError"):
        return Diagnosis("import", f"your file does not parse: {exc.type}: {exc.message}",
                         details={"line": exc.syntax_line})
    if exc.type == "NotImplementedError" and "meta tensor" not in exc.message:   # not torch refusing meta data
        return Diagnosis("exception", "not implemented yet (the stub still raises NotImplementedError)",
                         details={"where": where},
                         hint="Replace the `raise NotImplementedError` with your implementation.")
    return Diagnosis("exception", f"your code raised {exc.type}: {exc.message}".strip()[:400],
                     details={"where": where} if where else {})


def import_failure(exc: ImportFailed) -> Diagnosis:
    """How a module that cannot even be imported is reported on every test."""
    diag = _learner_error(exc)
    if diag.kind != "import":
        diag = Diagnosis("import", f"importing your file raised {exc.type}: {exc.message}"[:400],
                         details=diag.details)
    return diag


def _brief_failure(excinfo: pytest.ExceptionInfo[BaseException], *args: object, **kwargs: object) -> str:
    """What stands in a report for pytest's formatted traceback: the exception's last line."""
    return excinfo.exconly()[:2000]


def _cap(text: str, limit: int = 8192) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... output truncated: {len(text) - limit} more characters]"


def _short_id(nodeid: str) -> str:
    return nodeid.rsplit("/", 1)[-1]


def _name(item: pytest.Item) -> str:
    doc: str = getattr(getattr(item, "function", None), "__doc__", None) or ""   # a suite's tests are functions
    first = doc.strip().splitlines()[0] if doc.strip() else item.name
    params = getattr(getattr(item, "callspec", None), "id", None)
    return f"{first} [{params}]" if params else first


def _group(item: pytest.Item) -> str:
    marker = item.get_closest_marker("group")
    group: str = marker.args[0] if marker and marker.args else "default"   # @pytest.mark.group("name")
    return group


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return "skipped"
