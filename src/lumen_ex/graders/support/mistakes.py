"""Naming the mistake behind a wrong answer: known wrong answers (variants) matched against the
learner's values, dtype mistakes told apart, and exceptions of the learner's code recognised.

Used by the staged checks of src/lumen_ex/graders/support/expect.py, and re-exported by it for the
suites (``expect.Variant``, ``expect.exceptions_named`` ...).

Example (an exercise's mistakes.py: ``CATALOGUE``, every mistake id its suite can name)::

    CATALOGUE = {"no-scale": "no 1/sqrt(d_k) scale", **GENERIC_MISCONCEPTIONS}
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from lumen_ex.core.results import CheckFailed, Diagnosis
from lumen_ex.graders.support.remembered import Remembered, content_key, tensor_bytes
from lumen_ex.graders.support.tolerances import SAME_AS_REFERENCE, Tolerance, match_tolerance, separation
from lumen_ex.harness.client import ImportFailed, LearnerError
from lumen_ex.harness.plugin import _learner_error


@dataclass(frozen=True)
class Variant:
    """A known wrong answer: what the output would be with a particular mistake (in float64).

    Example (exercise 1's mistakes.py: a wrong (L_q, L_k) causal mask)::

        ones = torch.ones(L_q, L_k, dtype=torch.bool)
        Variant("causal-inverted", "your mask is inverted", ~ones.tril(L_k - L_q), fix="True means 'may attend'")"""

    name: str            # short id, e.g. "no-scale"
    sentence: str        # what the learner's output equals, e.g. "your output equals attention without ..."
    value: torch.Tensor
    fix: str = ""        # what to do about it, e.g. "divide the scores by math.sqrt(d_k)"
    # How far this wrong answer, computed in the learner's dtype, may lie from its float64 value by
    # rounding alone, element by element (a tensor that broadcasts to ``value``, or one number): added
    # to the comparison's tolerance when matching it. 0 for the well-conditioned answers the dtype's
    # tolerance already covers; exercise 11's attention over raw int8 codes (scores in the hundreds)
    # is the case that needs it (docs/tolerances.md, "Ill-conditioned wrong answers").
    slack: torch.Tensor | float = 0.0

    def explained(self) -> str:
        """The sentence and the fix, as one line."""
        return f"{self.sentence}: {self.fix}" if self.fix else self.sentence


# Mistakes named from what came back rather than from its values; every suite can report them.
GENERIC_MISCONCEPTIONS = {
    "outputs-swapped": "the returned tensors are in the wrong order",
    "axes-transposed": "a returned tensor has the right axes in the wrong order",
    "dtype-upcast": "the result has a wider dtype than the inputs (.float(), .double(), NumPy)",
    "dtype-downcast": "the result has a narrower dtype than the inputs (a fixed .float(), or new tensors made without dtype=)",
    "not-bool": "a mask is returned as numbers instead of bool",
    "no-gradient": "the result is cut off from autograd (.detach(), .item(), a NumPy round trip, torch.no_grad())",
    "gradient-mismatch": "the forward values are right but the gradients are not (an in-place edit under torch.no_grad())",
    # named by the harness, from the worker's call record and a scan of the learner's source
    "forbidden-api": "a library attention function called instead of implementing it",
    "unverifiable-source": "code the grader cannot check for forbidden APIs (a name computed at run time, eval, an import it cannot follow, a file too large to check)",
    # dtype and device mistakes told apart by the checks below (dtype_misconception, refine_float32,
    # COMMON_EXCEPTIONS)
    "float32-not-cast-back": "computed in float32 (.float(), dtype=torch.float32) and never cast back to the inputs' dtype",
    "new-tensor-dtype": "a new tensor (a mask, a bias, a buffer) made without the inputs' dtype promotes the result to float32",
    "new-tensor-device": "a new tensor (a mask, a bias, a buffer) made without the inputs' device: an exception on another device",
    "fill-overflows-dtype": "a fill value such as -1e9 that the inputs' dtype cannot hold (float16): an exception",
    "view-not-reshape": "view() on a transposed or non-contiguous tensor instead of reshape(): an exception",
}


def _fill_overflows(exc) -> bool:
    """masked_fill (or torch.full, or an assignment) with a value the dtype cannot hold."""
    return "without overflow" in exc.message and "value cannot be converted" in exc.message


def _other_device(exc) -> bool:
    """Two tensors on different devices met in one operation: one of them was made without the
    inputs' device (a mask or a bias from torch.zeros(...), torch.ones(...), torch.tensor(...))."""
    return bool(re.search(r"Expected all tensors to be on the same device|is not on the expected device|"
                          r"Expected .* to be on .* but got|on device meta is not on", exc.message))


def _view_after_transpose(exc) -> bool:
    """.view() on a tensor whose memory is not laid out for it (after a transpose, a permute or a
    non-contiguous input)."""
    return "view size is not compatible with input tensor's size and stride" in exc.message


# Exceptions that name a mistake in every exercise: (misconception, sentence, predicate).
COMMON_EXCEPTIONS = [
    ("view-not-reshape", "view() needs memory laid out for the new shape, which a transposed or non-contiguous "
     "tensor does not have: use reshape() (or .contiguous().view())", _view_after_transpose),
    ("fill-overflows-dtype", "your fill value does not fit the inputs' dtype (float16 holds at most 65504, so "
     "-1e9 overflows): fill with float('-inf'), or torch.finfo(scores.dtype).min", _fill_overflows),
    ("new-tensor-device", "a tensor your code creates is not on the inputs' device (torch.zeros(...), "
     "torch.ones(...), torch.tensor(...) and torch.arange(...) are on the CPU unless told otherwise): create it "
     "on an input's device (device=q.device, or x.device: whichever input you have), or use torch.zeros_like / "
     "torch.ones_like", _other_device),
]


def name_mistake(diag: Diagnosis, got64: torch.Tensor, expected64: torch.Tensor, *, dtype: torch.dtype,
                 tol: Tolerance, variants: Callable[[], list[Variant]] | None) -> None:
    """Set ``diag.misconception`` to the first variant the learner's values equal, with the evidence:
    the hint says to what precision they match, ``details`` keeps the numbers for the run summary."""
    if variants is None:
        diag.details["variants_compared"] = []
        return
    mtol = match_tolerance(dtype, tol)
    cands = remembered_candidates(expected64, variants, mtol)
    diag.details["variants_compared"] = [v.name for v in cands]   # the mistakes this input can show
    found = match_variant(got64, cands, mtol)
    if found is None:
        return
    variant, err = found
    diag.misconception = variant.name
    diag.hint = evidence(variant, err)
    diag.details.update({"variant_max_error": err, "variant_tolerance": mtol.atol,
                         "misconception_sentence": variant.explained()})


# The candidates of this process's failing checks, by the content of their inputs (remembered.py).
CANDIDATES = Remembered()


def remembered_candidates(expected64: torch.Tensor, variants: Callable[[], list[Variant]],
                          tol: Tolerance) -> list[Variant]:
    """``candidates(expected64, variants(), tol)``, computed once for each content of its inputs
    (src/lumen_ex/graders/support/remembered.py): the same test at the same seed fails the same way
    for many files, and only the comparison with each file's values differs."""
    found = content_key(variants, expected64, tol)
    key, hold = found if found is not None else (None, ())
    return list(CANDIDATES.get(key, lambda: candidates(expected64, variants(), tol), size=tensor_bytes, hold=hold))


def candidates(expected: torch.Tensor, variants: list[Variant], tol: Tolerance) -> list[Variant]:
    """The variants that give a different answer from the reference on this input."""
    return [v for v in variants if separation(v.value, expected, tol, v.slack) > SAME_AS_REFERENCE]


def match_variant(got64: torch.Tensor, candidates: list[Variant], tol: Tolerance) -> tuple[Variant, float] | None:
    """The first known mistake whose output equals the learner's within ``tol`` plus the variant's own
    ``slack`` (NaN and inf must sit at the same places), with the largest deviation between the two."""
    for cand in candidates:
        if separation(got64, cand.value, tol, cand.slack) <= 1.0:
            value = cand.value.to(torch.float64)
            finite = torch.isfinite(value)
            err = float((got64 - value)[finite].abs().max()) if bool(finite.any()) else 0.0
            return cand, err
    return None


def bound(err: float) -> str:
    """'to 1e-9': the smallest power of ten at or above ``err``; 'exactly' for 0."""
    if not err > 0:
        return "exactly"
    return f"to 1e{math.ceil(math.log10(err) - 1e-12)}"


def evidence(variant: Variant, err: float) -> str:
    """The variant's sentence with the evidence for it: how closely this test's values equal it,
    then the fix: "<sentence> to 1e-9 on this test's input: <fix>". A sentence that carries its own
    fix after a colon (no ``fix=``) is read as sentence and fix, so the evidence never lands after it."""
    sentence, fix = variant.sentence, variant.fix
    if not fix and ": " in sentence:
        sentence, fix = sentence.split(": ", 1)
    said = f"{sentence} {bound(err)} on this test's input"
    return f"{said}: {fix}" if fix else said


def dtype_misconception(got: torch.dtype, want: torch.dtype) -> str | None:
    """The id of a dtype mistake: a wider or narrower float than the inputs, or numbers for a bool.
    Which line made a float32 result is named from the graded file (float32_cause)."""
    if want == torch.bool:
        return "not-bool"
    if got.is_floating_point and want.is_floating_point:
        return "dtype-upcast" if torch.finfo(got).bits > torch.finfo(want).bits else "dtype-downcast"
    return None


def failing_line(exc) -> str:
    """The source line of the learner's innermost frame in a LearnerError's traceback ('' if none)."""
    for frame in reversed(getattr(exc, "where", None) or []):
        if isinstance(frame, dict) and isinstance(frame.get("code"), str):
            return frame["code"]
    return ""


@contextmanager
def exceptions_named(rules: Sequence[tuple[str, str, Callable]]):
    """Name the mistake behind an exception the learner's code raised, when it is recognisable:
    each rule is (misconception id, sentence, predicate(LearnerError) -> bool); the first that
    holds turns the exception into the same ``exception`` diagnosis, with the mistake named.

    Example (exercise 1's suite; ``[]`` names the generic exception mistakes alone)::

        rules = [("fixed-axes-transposed", "swap only the last two axes: k.transpose(-2, -1)", _transposes_fixed_axes)]
        with expect.exceptions_named(rules):            # _transposes_fixed_axes(exc: LearnerError) -> bool
            result = submission.call("scaled_dot_product_attention", (q, k, v), {"mask": case.mask}, device=device)"""
    try:
        yield
    except LearnerError as exc:
        if isinstance(exc, ImportFailed):
            raise
        for name, sentence, holds in [*rules, *COMMON_EXCEPTIONS]:
            if holds(exc):
                diag = _learner_error(exc)
                if diag.kind == "exception":
                    diag.misconception, diag.hint = name, sentence
                    raise CheckFailed(diag) from None
        raise

