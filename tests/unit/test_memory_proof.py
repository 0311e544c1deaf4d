"""The linear-memory proof's verdicts (src/lumen_ex/graders/support/memory_proof.py), from made-up
readings: which readings pass, which fail the learner, and which are the grader's to own. The real
measurements of exercises 5 and 9 are graded on their corpora (tests/e2e/test_corpus.py) and the
harness's measurement itself in tests/sandbox/test_memory_probe.py."""

from __future__ import annotations

import pytest

from lumen_ex.core.results import CheckFailed, take_notes
from lumen_ex.graders.support.memory_proof import MIB, LinearMemory
from lumen_ex.harness.client import LearnerError, WorkerCrashed, WorkerProtocolError, WorkerTimeout
from lumen_ex.harness.memory import MemoryUse
from lumen_ex.harness.proxy import CallResult

PROOF = LinearMemory(counted_L=1024, memory_L=4096, confirm_L=8192, hint="one block at a time")
EXACT = "cgroup v1 peak"


def use(mib: float, exact: bool = True) -> MemoryUse:
    return MemoryUse(extra_bytes=int(mib * MIB), exact=exact, mechanism=EXACT if exact else "/proc VmHWM")


def readings_by_length(table: dict[int, tuple[float, float]], exact: bool = True):
    """A suite's readings_at, from {L: (non-causal MiB, causal MiB)}; it records the lengths asked."""
    asked: list[int] = []

    def readings_at(L: int) -> dict[str, MemoryUse]:
        asked.append(L)
        long, causal = table[L]
        return {"long": use(long, exact), "causal": use(causal, exact)}

    return readings_at, asked


def failure(call) -> CheckFailed:
    with pytest.raises(CheckFailed) as caught:
        call()
    return caught.value


def test_the_budget_is_half_of_one_float32_matrix():
    assert PROOF.budget(4096) == 32 * MIB and PROOF.budget(8192) == 128 * MIB


def test_the_work_counter_fails_an_intermediate_of_a_quarter_matrix_or_more():
    PROOF.check_counted({"largest": 1024 * 1024 // 4 - 1})
    PROOF.check_counted(None)                       # no count: the counter is a hint, never a pass's proof
    got = failure(lambda: PROOF.check_counted({"largest": 1024 * 1024, "largest_shape": [1, 1, 1024, 1024],
                                                "largest_op": "aten::matmul"}))
    d = got.diagnosis
    assert (d.kind, d.misconception, d.hint, d.got) == ("property", "quadratic-memory", "one block at a time", 1024 * 1024)
    assert "at L = 1024" in d.summary and "(1, 1, 1024, 1024)" in d.summary and "aten::matmul" in d.summary


def test_under_the_budget_passes_at_the_first_length_and_notes_how_it_was_measured():
    take_notes()
    readings_at, asked = readings_by_length({4096: (4, 5)})
    PROOF.prove(readings_at)
    assert asked == [4096]
    assert take_notes() == [f"memory measured by the grader ({EXACT}): within half of one L x L float32 matrix "
                            "(32 MiB at L = 4096, or 128 MiB at L = 8192 where L = 4096 is too close to tell)"]


def test_over_at_the_first_length_is_decided_at_the_second():
    readings_at, asked = readings_by_length({4096: (4, 40), 8192: (9, 60)})
    PROOF.prove(readings_at)                        # 60 MiB is within 128 MiB: linear after all
    assert asked == [4096, 8192]
    readings_at, asked = readings_by_length({4096: (40, 5), 8192: (160, 10)})
    d = failure(lambda: PROOF.prove(readings_at)).diagnosis
    assert asked == [4096, 8192]
    assert d.kind == "property" and d.misconception == "quadratic-memory"
    assert d.summary.startswith("at L = 8192 your call used 160 MiB") and d.expected == "at most 128 MiB"
    assert d.details["growth_from_half_length"] == 4.0          # 160 MiB at 8192 against 40 at 4096


def test_an_upper_bound_over_the_budget_is_the_graders_error_never_the_learners():
    readings_at, _ = readings_by_length({4096: (40, 40), 8192: (160, 160)}, exact=False)
    d = failure(lambda: PROOF.prove(readings_at)).diagnosis
    assert d.kind == "grader" and "could only bound" in d.summary and "Nothing was scored" in (d.hint or "")


def test_readings_fail_closed_and_blame_whoever_can_fix_it():
    fine = lambda: CallResult(None, memory=use(3))                       # noqa: E731
    unmeasured = lambda: CallResult(None, memory=None)                   # noqa: E731
    assert PROOF.readings(4096, {"long": fine, "causal": fine}) == {"long": use(3), "causal": use(3)}
    d = failure(lambda: PROOF.readings(4096, {"long": fine, "causal": unmeasured})).diagnosis
    assert d.kind == "grader" and "could not measure" in d.summary

    def raising(exc: Exception):
        def call():
            raise exc
        return call

    timeout = failure(lambda: PROOF.readings(4096, {"long": fine, "causal": raising(WorkerTimeout("slow"))})).diagnosis
    assert (timeout.kind, timeout.summary, timeout.details) == \
        ("property", "at L = 4096 (causal) your call did not finish in time", {"L": 4096})
    died = failure(lambda: PROOF.readings(8192, {"long": raising(WorkerCrashed("oom")), "causal": fine})).diagnosis
    assert died.summary.startswith("at L = 8192 your call made the worker die")
    oom = LearnerError({"type": "RuntimeError", "message": "DefaultCPUAllocator: can't allocate memory"})
    assert "ran out of memory" in failure(lambda: PROOF.readings(4096, {"long": raising(oom), "causal": fine})
                                          ).diagnosis.summary
    with pytest.raises(WorkerProtocolError):       # a malformed reply stays the protocol error it is
        PROOF.readings(4096, {"long": raising(WorkerProtocolError("bad")), "causal": fine})
    other = LearnerError({"type": "ValueError", "message": "bad shape"})
    with pytest.raises(LearnerError):              # the learner's own error is shown as it is
        PROOF.readings(4096, {"long": raising(other), "causal": fine})
