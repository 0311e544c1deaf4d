"""The one result record that every output format is a view of.

A check produces a :class:`RunResult` holding one :class:`TestResult` per hidden test. Failures
carry a :class:`Diagnosis` (what kind of check failed, expected vs got, where, and the likely
misconception), never just a string, so the terminal, JSON and LMS renderers all say the same
thing. The JSON form is versioned: see docs/result-schema.md and docs/result.schema.json.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from lumen_ex.core.explaining import most_explanatory, ranked_mistake, summarise_misconceptions

SCHEMA_VERSION = "1"


class Status(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"


# Diagnosis kinds, in the order a test checks them: an earlier kind explains a later one.
DIAGNOSIS_KINDS = (
    "file",          # the learner's file could not be read at all (src/lumen_ex/core/snapshot.py)
    "import",        # the learner's file could not be imported
    "missing",       # a graded function is not defined
    "signature",     # it is defined with the wrong parameters
    "exception",     # the learner's code raised
    "forbidden",     # it called an API the exercise forbids
    "arity",         # it returned the wrong number of values
    "type",          # it returned something that is not a tensor
    "shape",
    "dtype",
    "device",
    "nonfinite",     # NaN or inf where the expected values are finite
    "values",
    "side-effect",   # it changed its caller's tensors (an input, a cache) where the contract says not to
    "property",      # weights sum to 1, no future leakage, gradients, cost ...
    "timeout",       # a call ran past its time limit
    "crash",         # the worker process died (exit code or signal)
    "protocol",      # the worker sent something that is not a valid reply
    "grader",        # the grader itself failed: never the learner's fault
)


@dataclass
class Diagnosis:
    """Why a test failed, as data: the renderers decide how to show it."""

    kind: str
    summary: str                          # one line a learner can act on
    expected: Any = None                  # JSON-able: a shape, a dtype, a number ...
    got: Any = None
    details: dict[str, Any] = field(default_factory=dict)
    misconception: str | None = None      # the named mistake that explains the error, if known
    hint: str | None = None               # what to try next

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, {}, [])}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diagnosis:
        fields: dict[str, Any] = {k: data.get(k) for k in ("kind", "summary", "expected", "got", "misconception", "hint")}
        return cls(**fields, details=data.get("details") or {})


@dataclass
class TestResult:
    id: str
    name: str
    group: str
    status: Status
    score: float = 0.0
    max_score: float = 0.0
    message: str = ""
    diagnosis: Diagnosis | None = None
    output: str = ""
    duration: float = 0.0
    # The largest share of its tolerance any value comparison of this passing test used (an error of
    # 0 is 0.0, an error at the tolerance 1.0), None where it compared no values: how near the line
    # between pass and fail the submission stayed (``lumen-ex dev check`` gives the nearest files more seeds).
    tolerance_used: float | None = None

    def to_dict(self) -> dict[str, Any]:
        extra = {} if self.tolerance_used is None else {"tolerance_used": round(self.tolerance_used, 4)}
        return {
            "id": self.id,
            "name": self.name,
            "group": self.group,
            "status": self.status.value,
            "score": round(self.score, 4),
            "max_score": round(self.max_score, 4),
            "message": self.message,
            "diagnosis": self.diagnosis.to_dict() if self.diagnosis else None,
            "output": self.output,
            "duration": round(self.duration, 4),
            **extra,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TestResult:
        diag = data.get("diagnosis")
        return cls(id=data["id"], name=data["name"], group=data["group"], status=Status(data["status"]),
                   score=data["score"], max_score=data["max_score"], message=data["message"],
                   diagnosis=Diagnosis.from_dict(diag) if diag else None,
                   output=data.get("output", ""), duration=data.get("duration", 0.0),
                   tolerance_used=data.get("tolerance_used"))


@dataclass
class SandboxInfo:
    backend: str                          # "bwrap" | "docker" | "none"
    isolated: bool
    limits: dict[str, str] = field(default_factory=dict)   # what enforced each limit
    note: str = ""


@dataclass
class RunResult:
    exercise: dict[str, Any]              # {"number", "slug", "title"}
    status: Status                        # pass | fail | error (error: the grader could not run)
    sandbox: SandboxInfo
    device: str
    seed: int
    score: float = 0.0
    max_score: float = 0.0
    duration: float = 0.0
    message: str = ""
    tests: list[TestResult] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    source: dict[str, Any] | None = None  # {"file", "sha256", "bytes"}: the bytes graded (src/lumen_ex/core/snapshot.py)
    # About this machine, not the grade (a progress file that could not be saved): shown once by the
    # CLI, not part of the record.
    warnings: list[str] = field(default_factory=list, compare=False)

    @property
    def misconceptions(self) -> list[dict[str, Any]]:
        """The run-level summary of named mistakes (core/explaining.py), from the tests."""
        return summarise_misconceptions(self.tests)

    @property
    def first_failure(self) -> TestResult | None:
        """The failure shown first: the one that explains the most (core/explaining.py)."""
        explaining = {e["id"] for e in self.misconceptions}
        return most_explanatory(self.tests, lambda t: (t.status.value, t.diagnosis.kind if t.diagnosis else None,
                                                        ranked_mistake(t.diagnosis, explaining)))

    def exit_code(self) -> int:
        """0 all passed, 1 a test failed, 3 the grader itself could not run."""
        return {Status.PASS: 0, Status.FAIL: 1}.get(self.status, 3)

    def to_dict(self) -> dict[str, Any]:
        summary = self.misconceptions
        return {
            "schema_version": SCHEMA_VERSION,
            "exercise": self.exercise,
            "status": self.status.value,
            "score": round(self.score, 4),
            "max_score": round(self.max_score, 4),
            "duration": round(self.duration, 3),
            "message": self.message,
            "sandbox": asdict(self.sandbox),
            "device": self.device,
            "seed": self.seed,
            "versions": self.versions,
            **({"source": self.source} if self.source else {}),
            "tests": [t.to_dict() for t in self.tests],
            **({"misconceptions": summary} if summary else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        return cls(exercise=data["exercise"], status=Status(data["status"]),
                   sandbox=SandboxInfo(**data["sandbox"]), device=data["device"], seed=data["seed"],
                   score=data["score"], max_score=data["max_score"], duration=data["duration"],
                   message=data.get("message", ""), tests=[TestResult.from_dict(t) for t in data["tests"]],
                   versions=data.get("versions", {}), source=data.get("source"))


# Notes a hidden test leaves on its own result, for a test that passes with something worth saying
# (src/lumen_ex/graders/support/expect.py: a float64 result with float32 rounding). The harness collects them
# per test (src/lumen_ex/harness/plugin.py) and shows them as the passing test's message. Only the trusted grading
# process calls these: the learner's code runs in the worker and cannot reach them.
_NOTES: list[str] = []
_SHARES: list[float] = []       # tolerance_share: what the running test's passing comparisons used


def note(text: str) -> None:
    """Attach ``text`` to the result of the hidden test now running (once, however often it is said).

    Example (exercise 5's memory test, which passed)::

        note(f"memory measured by the grader ({use.mechanism}): within half of one L x L float32 matrix")"""
    if text not in _NOTES:
        _NOTES.append(text)


def take_notes() -> list[str]:
    """The notes left since the last call, and forget them."""
    taken = list(_NOTES)
    _NOTES.clear()
    return taken


def tolerance_share(share: float) -> None:
    """Record that a value comparison of the hidden test now running passed using ``share`` of its
    tolerance (src/lumen_ex/graders/support/expect.py ``values``); the test's result keeps the largest."""
    if share == share:        # never NaN
        _SHARES.append(min(max(share, 0.0), 1.0))


def take_tolerance_share() -> float | None:
    """The largest share recorded since the last call (None when none was), and forget them."""
    taken = max(_SHARES, default=None)
    _SHARES.clear()
    return taken


class CheckFailed(AssertionError):
    """Raised by hidden-test helpers: the submission failed a check, explained by ``diagnosis``.

    Example (exercise 4's suite, x (..., d): it names the mistake behind a wrong shape, then re-raises)::

        try:
            expect.shape(out, case.x.shape, what="output", axes=case.axes(), sizes=case.sizes)
        except CheckFailed as exc:
            if exc.diagnosis.kind == "shape" and exc.diagnosis.got == [*case.x.shape[:-1], d // 2, 2]:
                exc.diagnosis.misconception = "pairs-not-flattened"
            raise"""

    def __init__(self, diagnosis: Diagnosis):
        super().__init__(diagnosis.summary)
        self.diagnosis = diagnosis


def points(x: float) -> str:
    """A score as people write it: 10 -> '10', 4.833333 -> '4.83'."""
    return f"{x:.2f}".rstrip("0").rstrip(".") if x % 1 else f"{int(x)}"


def base_versions() -> dict[str, str]:
    """The versions every result names, known without importing torch: lumen-ex and Python."""
    import platform

    from lumen_ex import __version__

    return {"lumen_ex": __version__, "python": platform.python_version()}


def catalog_versions() -> dict[str, str]:
    """:func:`base_versions` and the version of the catalogue in use (src/lumen_ex/core/catalog.py):
    what a record made without the hidden suite's run names (one that ran it names torch too)."""
    from lumen_ex.core import catalog  # lazy: loading it reads the packs

    return {**base_versions(), "catalog": catalog.load().version}


def join_notes(*notes: str) -> str:
    """Notes about a run's sandbox (the launcher's own, a warning, why a backend was not used), in
    order, the empty ones left out: the one way a record's ``sandbox.note`` is put together."""
    return " ".join(note for note in notes if note)


def one_line(message: str, fallback: str, limit: int = 500) -> str:
    """The first line of ``message`` (at most ``limit`` characters), or ``fallback`` when it is empty."""
    lines = message.strip().splitlines()
    return lines[0][:limit] if lines else fallback


def not_graded(exercise: dict[str, Any], row: TestResult, *, status: Status, sandbox: SandboxInfo, device: str,
               seed: int, max_score: float = 0.0, duration: float = 0.0,
               versions: dict[str, str] | None = None) -> RunResult:
    """The one shape of a record for a check that graded nothing: one row that says why (the file
    cannot be read, the submission is missing, the grader failed), no test run, score 0. The row
    carries the exercise's whole maximum when the learner is charged (``max_score``), so the
    scores of every view still add up; it carries none when the grader is to blame."""
    return RunResult(exercise=exercise, status=status, sandbox=sandbox, device=device, seed=seed, score=0.0,
                     max_score=max_score, duration=duration, message=row.message, tests=[row],
                     versions=base_versions() if versions is None else versions)


def grader_error(exercise: dict[str, Any], message: str, *, sandbox: SandboxInfo, device: str, seed: int,
                 duration: float = 0.0) -> RunResult:
    """The record of a check the grader could not finish: status ``error``, one test ("the grader
    ran") that says why. Nothing about the learner's code is claimed. It is the only maker of such
    records (the host's, a grading process's, the docker backend's, the grader image's), and names
    the catalogue's version like every other record (:func:`catalog_versions`), unless the
    catalogue itself cannot be loaded: it may be what failed."""
    test = TestResult("grader", "the grader ran", "grader", Status.ERROR, message=message,
                      diagnosis=Diagnosis("grader", message))
    try:
        versions = catalog_versions()
    except Exception:  # noqa: BLE001  the catalogue may be what failed: the record names what it can
        versions = base_versions()
    return not_graded(exercise, test, status=Status.ERROR, sandbox=sandbox, device=device, seed=seed,
                      duration=duration, versions=versions)
