"""Proving that a learner's call uses memory linear in its length L, for a hidden suite.

Exercises 5 (FlashAttention's forward) and 9 (its backward) grade the same property the same way; an
instructor's pack can too. A suite describes its proof once (:class:`LinearMemory`: the lengths and
its own hint) and makes its calls; this module turns what the calls and the harness report into the
verdict and its words:

1. ``check_counted(ops)``: the worker's work counter (``count_ops=True``) saw no intermediate of a
   quarter of an L x L matrix or more. The counter runs beside the learner's code, so it is a hint
   that can only fail, never a proof.
2. ``prove(readings_at)``: the proof, from the harness's side (src/lumen_ex/harness/memory.py). The
   suite's ``readings_at(L)`` makes two calls at length L, non-causal ("long") and causal, each with
   ``measure_memory=True`` through :meth:`LinearMemory.readings`. Each call may use half of one
   (L, L) float32 matrix beyond what its worker held at start. Over that budget at ``memory_L``, the
   same calls at ``confirm_L`` decide (a file close to the budget is never decided by noise). A
   reading that is only an upper bound never fails the learner (a grader error: nothing scored);
   no reading at all is a grader error too, never a silent pass.

The passing note names how memory was measured and the bound it met, never the measured numbers
nor the length that decided: those move by a few percent each run, and a result is a function of the
file and the seed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lumen_ex.core.results import CheckFailed, note
from lumen_ex.graders.support.expect import fail
from lumen_ex.harness.client import LearnerError, WorkerFailure
from lumen_ex.harness.memory import MemoryUse
from lumen_ex.harness.proxy import CallResult

MIB = 2**20
CALLS = ("long", "causal")          # the two calls measured at each length: non-causal, then causal
_OUT_OF_MEMORY = re.compile(r"allocate|out of memory", re.IGNORECASE)


@dataclass(frozen=True)
class LinearMemory:
    """One exercise's memory proof: where it looks and what it tells a learner whose memory is not linear.

    Example (exercise 5's suite)::

        PROOF = LinearMemory(counted_L=1024, memory_L=4096, confirm_L=8192, hint=QUADRATIC_HINT)
        PROOF.check_counted(check_rows(..., count_ops=True).ops)
        PROOF.prove(lambda L: PROOF.readings(L, {"long": lambda: ..., "causal": lambda: ...}))"""

    counted_L: int          # the length at which the work counter looks for an L x L intermediate
    memory_L: int           # the first length measured
    confirm_L: int          # the length that decides when memory_L is over the budget
    hint: str               # how to make memory linear, in the exercise's words
    misconception: str = "quadratic-memory"

    def failure(self, summary: str, **fields) -> CheckFailed:
        """A property failure with the exercise's hint and the quadratic-memory mistake named."""
        return fail("property", summary, hint=self.hint, misconception=self.misconception, **fields)

    @staticmethod
    def budget(L: int) -> int:
        """The memory a call at length L may use beyond its worker's start: half of one (L, L) float32 matrix."""
        return L * L * 4 // 2

    def check_counted(self, ops: Mapping[str, Any] | None) -> None:
        """Step 1: fail when the work counter (``CallResult.ops`` of a call at ``counted_L``) saw an
        intermediate of L * L / 4 elements or more."""
        ops = ops or {}
        L = self.counted_L
        largest, shape = int(ops.get("largest", 0)), list(ops.get("largest_shape") or [])
        if largest >= L * L // 4:
            raise self.failure(
                f"at L = {L} your code builds an intermediate of {largest} elements (shape {tuple(shape)}, from "
                f"{str(ops.get('largest_op', '?'))[:60]}): a quarter of an L x L matrix or more",
                expected=f"fewer than {L * L // 4} elements", got=largest, details={"L": L, "largest_shape": shape})

    def measured(self, call: Callable[[], CallResult], L: int, causal: bool) -> MemoryUse | None:
        """The harness's reading of one long call (made with ``measure_memory=True``; it checks its own
        values: a fast wrong answer proves nothing). A timeout, a death or an out-of-memory error of the
        learner's code there is this property's failure; a protocol error stays what it is."""
        where = f"at L = {L}" + (" (causal)" if causal else "")
        try:
            result = call()
        except WorkerFailure as exc:
            if exc.kind == "protocol":
                raise
            what = "did not finish in time" if exc.kind == "timeout" else \
                "made the worker die (killed for using too much memory?)"
            raise self.failure(f"{where} your call {what}", details={"L": L}) from None
        except LearnerError as exc:
            text = f"{exc.type}: {exc.message}"
            if exc.type == "MemoryError" or _OUT_OF_MEMORY.search(text):
                raise self.failure(f"{where} your call ran out of memory ({text[:160]})",
                                   details={"L": L}) from None
            raise
        return result.memory

    def readings(self, L: int, calls: Mapping[str, Callable[[], CallResult]]) -> dict[str, MemoryUse]:
        """The readings of the calls at length ``L`` (keys: CALLS). Fails closed, with a grader error and
        never a pass, when nothing could measure one of them."""
        used = {key: self.measured(calls[key], L, causal=key == "causal") for key in CALLS}
        if any(u is None or u.extra_bytes is None for u in used.values()):
            raise fail("grader", "the grader could not measure your code's memory here: the worker has no memory "
                       "cgroup and its processes could not be read from /proc", details={"readings": _dicts(used)},
                       hint="This is the grading machine's limit, not your code's: grade as root (a cgroup per "
                            "worker) or where /proc is readable. Nothing was scored for memory.")
        return {key: use for key, use in used.items() if use is not None}

    def prove(self, readings_at: Callable[[int], dict[str, MemoryUse]]) -> None:
        """Step 2: the calls at ``memory_L``, then at ``confirm_L`` when one is over the budget; a failure's
        details give the growth from the first length ("short"). Leaves the passing note."""
        L = self.memory_L
        used: dict[str, MemoryUse] = readings_at(L)
        over = self._over_budget(used, L)
        if over:
            L = self.confirm_L
            used = {**readings_at(L), "short": used["long"]}
            over = self._over_budget(used, L)
        readings = _dicts(used)
        for key in over:
            use, at = used[key], f"at L = {L}" + (" with causal=True" if key == "causal" else "")
            if not use.exact:
                raise fail("grader", f"{at} the grader could only bound your code's memory from above "
                           f"({use.extra_mib:.0f} MiB, {use.mechanism}), and the bound is over the budget",
                           details={"readings": readings},
                           hint="This is the grading machine's limit, not your code's: with a resettable peak (a "
                                "cgroup v1, or v2 on Linux 6.12 or later) it can tell. Nothing was scored for memory.")
            raise self.failure(
                f"{at} your call used {use.extra_mib:.0f} MiB beyond what your worker held at start (measured by the "
                f"grader, {use.mechanism}); one L x L float32 matrix is {L * L * 4 // MIB} MiB there",
                expected=f"at most {self.budget(L) // MIB} MiB", got=round(use.extra_mib, 1),
                details={"readings": readings,
                         "growth_from_half_length": round((used["long"].extra_bytes or 0)
                                                          / max(used["short"].extra_bytes or 0, 1), 2)})
        note(f"memory measured by the grader ({used['long'].mechanism}): within half of one L x L float32 matrix "
             f"({self.budget(self.memory_L) // MIB} MiB at L = {self.memory_L}, or {self.budget(self.confirm_L) // MIB} "
             f"MiB at L = {self.confirm_L} where L = {self.memory_L} is too close to tell)")

    def _over_budget(self, used: Mapping[str, MemoryUse], L: int) -> list[str]:
        """The calls at length ``L`` that used more than :meth:`budget`."""
        return [key for key in CALLS if (used[key].extra_bytes or 0) > self.budget(L)]


def _dicts(used: Mapping[str, MemoryUse | None]) -> dict[str, object]:
    return {key: (use.to_dict() if use is not None else None) for key, use in used.items()}
