"""Checks that hidden tests make on what the learner's code returned, in a fixed order.

Each check raises :class:`CheckFailed` carrying a structured :class:`Diagnosis`. A returned tensor is
checked shape first (with axis names), then dtype, then device, then NaN/inf, then values; the
first failing check is the one reported, because it explains the ones after it.
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from lumen_ex.core.results import CheckFailed, Diagnosis, note
from lumen_ex.graders.support import pictures
from lumen_ex.graders.support.shapes import axis_index, name_shape
from lumen_ex.harness.float32_cause import float32_cause  # noqa: F401 (re-exported)
from lumen_ex.harness.proxy import meta
from lumen_ex.sandbox.inside.wire import Opaque


@dataclass(frozen=True)
class Tolerance:
    """|got - expected| <= atol + rtol * |expected|, element by element (see docs/tolerances.md)."""

    atol: float
    rtol: float


# Measured errors against a float64 reference are about 3e-7 in float32, 6e-4 in float16 and 5e-3 in
# bfloat16 (docs/tolerances.md); conceptual mistakes give errors of order 1. float64 results are held
# to the float32 tolerance: code that computes inside in float32 and casts back (softmax(x.float()),
# dtype=torch.float32) is no attention mistake, and stays below it at every seed with a margin of
# ~50x, while the closest known mistake is ~1e4 tolerances away (bench/float32_margin.py).
TOLERANCES = {
    torch.float64: Tolerance(1e-5, 1e-5),
    torch.float32: Tolerance(1e-5, 1e-5),
    torch.float16: Tolerance(1e-2, 1e-2),
    torch.bfloat16: Tolerance(2e-2, 2e-2),
}


# What float64 arithmetic end to end gives (errors ~1e-15 here); float32 rounding anywhere inside
# leaves errors above ~1e-8 on every hidden input, far beyond this bound. A float64 result within
# the tolerance above but not within this one passes with FLOAT32_ROUNDING_NOTE.
FLOAT64_ARITHMETIC = Tolerance(1e-10, 1e-10)
FLOAT32_ROUNDING_NOTE = ("your float64 result carries float32 rounding: fine here; keep float64 end to end "
                         "when you need it")


@dataclass(frozen=True)
class Variant:
    """A known wrong answer: what the output would be with a particular mistake (in float64)."""

    name: str            # short id, e.g. "no-scale"
    sentence: str        # what the learner's output equals, e.g. "your output equals attention without ..."
    value: torch.Tensor
    fix: str = ""        # what to do about it, e.g. "divide the scores by math.sqrt(d_k)"

    def explained(self) -> str:
        """The sentence and the fix, as one line."""
        return f"{self.sentence}: {self.fix}" if self.fix else self.sentence


# Naming a mistake needs evidence: the learner's output must equal the variant. A float64 output
# differs from a float64 variant by rounding only (~1e-15), so 1e-9 is the bar there; in lower
# precision the comparison's own tolerance (the dtype's, or the test's) is the best evidence there is.
MATCH_TOLERANCE_FLOAT64 = Tolerance(1e-9, 1e-9)
# A variant within this many match tolerances of the reference gives the reference's answer on this
# input (e.g. "cache ignored" when the cache is empty): it is no candidate for this comparison.
SAME_AS_REFERENCE = 2.0

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

# Naming why a result came back float32 reads the graded file: the harness does it for every test
# (src/lumen_ex/harness/float32_cause.py); re-exported here for the suites.


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
     "with device=q.device, or use torch.zeros_like / torch.ones_like", _other_device),
]


def match_tolerance(dtype: torch.dtype, tol: Tolerance) -> Tolerance:
    """The tolerance for naming a variant: 1e-9 in float64, else the comparison's own."""
    return MATCH_TOLERANCE_FLOAT64 if dtype == torch.float64 else tol


def fail(kind: str, summary: str, **fields) -> CheckFailed:
    return CheckFailed(Diagnosis(kind, summary, **fields))


# -------------------------------------------------------------------------------------------------
# What came back


def returns(value, names: Sequence[str], fn: str) -> tuple:
    """The call returned a tuple of ``len(names)`` tensors: return them."""
    n = len(names)
    listing = f"({', '.join(names)})"
    if isinstance(value, torch.Tensor):
        raise fail("arity", f"{fn} returned a single tensor; it should return a tuple {listing}",
                   expected=f"{n} values", got="1 tensor",
                   hint=f"End with `return {', '.join(names)}`.")
    if not isinstance(value, (tuple, list)):
        raise fail("type", f"{fn} returned {_describe(value)}; it should return a tuple {listing}",
                   expected=f"tuple of {n} tensors", got=_describe(value))
    if len(value) != n:
        raise fail("arity", f"{fn} returned {len(value)} values; it should return {n}: {listing}",
                   expected=n, got=len(value))
    for name, item in zip(names, value):
        if not isinstance(item, torch.Tensor):
            raise fail("type", f"{fn} returned {_describe(item)} as {name}; expected a tensor",
                       expected="torch.Tensor", got=_describe(item))
    return tuple(value)


def is_tensor(value, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise fail("type", f"{what} is {_describe(value)}; expected a tensor",
                   expected="torch.Tensor", got=_describe(value))
    return value


def _describe(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, Opaque):
        return f"a {value.type_name}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def signature(submission, fn: str, params: Sequence[str], defaults: dict[str, str] = {}) -> None:  # noqa: B006 (read only)
    """``fn`` is defined and takes ``params`` in this order, with these default values (as repr)."""
    sig = submission.signature(fn)
    if sig is None:
        raise fail("missing", f"{fn} is not defined in {submission.module_file}",
                   expected=f"def {fn}(...)", got="nothing by that name",
                   hint=f"Keep the function name {fn} exactly as the stub has it.")
    wanted = ", ".join(f"{p}={defaults[p]}" if p in defaults else p for p in params)
    got_params = sig.get("params") or []
    yours = ", ".join(f"{p['name']}={p['default']}" if p.get("default") else str(p.get("name"))
                      for p in got_params if isinstance(p, dict))
    positional = [p for p in got_params if isinstance(p, dict)
                  and p.get("kind") in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")]
    names = [p.get("name") for p in positional]
    ok = names[: len(params)] == list(params) and all(
        p.get("default") is not None for p in positional[len(params):])
    ok = ok and all(positional[i].get("default") == defaults[name]
                    for i, name in enumerate(params) if name in defaults)
    if not ok:
        raise fail("signature", f"{fn}({yours}) does not match the exercise: {fn}({wanted})",
                   expected=f"{fn}({wanted})", got=f"{fn}({yours})",
                   hint="Keep the parameter names, order and defaults of the stub: the tests call them by name.")


# Gradients (inputs in float64) are compared at |got - expected| <= tol + tol * max |expected|: float32
# arithmetic inside the learner's function stays ~50x below 1e-5 (bench/float32_margin.py), and a
# gradient broken by an in-place edit is off by order 1.
GRADIENT_TOLERANCE = 1e-5


def gradients(result, expected: Sequence[torch.Tensor], names: Sequence[str],
              tol: float = GRADIENT_TOLERANCE) -> None:
    """The gradients the worker took match the reference's (inputs in float64)."""
    if result.grad_error or result.grads is None:
        raise fail("property", "no gradient flows back to the inputs: " + (result.grad_error or "none returned"),
                   hint="Something breaks the autograd graph: .detach(), .item(), .numpy() / torch.tensor(...) "
                        "round trips, or writing into a new tensor with torch.no_grad().",
                   misconception="no-gradient")
    for name, got, want in zip(names, result.grads, expected):
        if got is None:
            raise fail("property", f"no gradient reaches {name}: the output does not depend on it through autograd",
                       hint=f"Check every use of {name}: a .detach() or a NumPy round trip cuts it off.",
                       misconception="no-gradient")
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            raise fail("property", f"the gradient for {name} has the wrong shape",
                       expected=list(want.shape), got=list(getattr(got, "shape", [])))
        err = float((got.to(torch.float64) - want).abs().max())
        if not err <= tol + tol * float(want.abs().max()):
            raise fail("property", f"the gradient with respect to {name} differs from the reference's by up to {err:.3g}",
                       details={"max_abs_error": err},
                       hint="Forward values can match while gradients do not, e.g. after an in-place edit.",
                       misconception="gradient-mismatch")


# -------------------------------------------------------------------------------------------------
# One tensor against the float64 reference


@dataclass
class Expected:
    """One returned tensor and its float64 reference, with the names of its axes."""

    got: object
    value: torch.Tensor
    what: str                                         # "output", "weights", "k_cache" ...
    axes: Sequence[str]
    variants: Callable[[], list[Variant]] | None = None
    tol: Tolerance | None = None


def tensors(items: Sequence[Expected], *, sizes: dict[str, int], dtype: torch.dtype, device: str) -> None:
    """Check every returned tensor stage by stage: all shapes first, then all dtypes, then all
    devices, then NaN/inf and values. The first failure is raised: it explains the later ones.

    ``value`` is the float64 CPU reference; ``sizes`` gives every axis size (all distinct in hidden
    inputs, so a swapped axis can be named); ``variants`` computes known wrong answers, to name the
    mistake when values differ.
    """
    for it in items:
        it.got = is_tensor(it.got, it.what)
        pytype = meta(it.got).pytype
        if pytype not in ("torch.Tensor", "torch.nn.parameter.Parameter"):
            raise fail("type", f"{it.what} is a {pytype}, not a plain torch.Tensor",
                       expected="torch.Tensor", got=pytype,
                       hint="Return ordinary tensors; subclasses are not accepted.")
    shapes(items, sizes=sizes)
    for it in items:
        if it.got.dtype != dtype:
            wanted = "it should be bool" if dtype == torch.bool else f"the inputs were {_dt(dtype)}"
            raise fail("dtype", f"{it.what} has dtype {_dt(it.got.dtype)}; {wanted}",
                       expected=_dt(dtype), got=_dt(it.got.dtype), hint=_dtype_hint(it.got.dtype, dtype),
                       misconception=dtype_misconception(it.got.dtype, dtype))
    for it in items:
        where = meta(it.got).device
        if where.split(":")[0] != device.split(":")[0]:
            raise fail("device", f"{it.what} is on {where}; the inputs were on {device}",
                       expected=device, got=where,
                       hint="Create new tensors with device=q.device (or torch.zeros_like and friends).")
    if device == "meta":     # a meta tensor has a shape, a dtype and a device, and no values to compare
        return
    for it in items:
        try:
            values(it.got, it.value, what=it.what, axes=it.axes, tol=it.tol or TOLERANCES[dtype],
                   variants=it.variants)
        except CheckFailed as exc:   # wrong weights or mask: show them as a heatmap (pictures.py)
            pictures.illustrate(exc.diagnosis, it, items, lambda x: x.tol or TOLERANCES[dtype])
            raise
    if dtype == torch.float64:
        float32_rounding_note(items)


def float32_rounding_note(items: Sequence[Expected]) -> None:
    """Values that passed in float64, but only as closely as float32 arithmetic gets: say so on
    the test's result (see FLOAT64_ARITHMETIC)."""
    if any(separation(it.got, it.value, FLOAT64_ARITHMETIC) > 1.0 for it in items):
        note(FLOAT32_ROUNDING_NOTE)


def tensor(got, expected: torch.Tensor, *, what: str, axes: Sequence[str], sizes: dict[str, int],
           dtype: torch.dtype, device: str, tol: Tolerance | None = None,
           variants: Callable[[], list[Variant]] | None = None) -> None:
    """The staged checks of :func:`tensors` for a single tensor."""
    tensors([Expected(got, expected, what, axes, variants, tol)], sizes=sizes, dtype=dtype, device=device)


def shape(got: torch.Tensor, expected_shape, *, what: str, axes: Sequence[str], sizes: dict[str, int]) -> None:
    expected_shape = tuple(expected_shape)
    got_shape = tuple(got.shape)
    if got_shape == expected_shape:
        return
    raise _shape_failure(got_shape, expected_shape, what=what, axes=axes, sizes=sizes)


def shapes(items: Sequence[Expected], *, sizes: dict[str, int]) -> None:
    """Every item has its expected shape. Returned tensors whose shapes are the expected ones in
    another order (``return weights, output``) are named as such, before any single shape."""
    got = [tuple(it.got.shape) for it in items]
    want = [tuple(it.value.shape) for it in items]
    if len(items) > 1 and got != want and sorted(got) == sorted(want):
        i = next(i for i in range(len(items)) if got[i] != want[i])
        j = next(j for j in range(len(items)) if want[j] == got[i] and got[j] != want[j])
        names = [it.what for it in items]
        failure = _shape_failure(got[i], want[i], what=items[i].what, axes=items[i].axes, sizes=sizes)
        diag = failure.diagnosis
        diag.misconception = "outputs-swapped"
        diag.hint = (f"your {items[i].what} has the shape of {items[j].what}: the values come back in the wrong "
                     f"order; return them as ({', '.join(names)})")
        diag.details["swapped_with"] = items[j].what
        raise failure
    for it in items:
        shape(it.got, it.value.shape, what=it.what, axes=it.axes, sizes=sizes)


def _shape_failure(got_shape: tuple, expected_shape: tuple, *, what: str, axes: Sequence[str],
                   sizes: dict[str, int]) -> CheckFailed:
    exp_names = tuple(axes)
    got_names = name_shape(got_shape, sizes)
    summary = (f"{what}: expected ({', '.join(exp_names)}) = {_tuple(expected_shape)}, "
               f"got ({', '.join(got_names)}) = {_tuple(got_shape)}")
    transposed = len(got_shape) == len(expected_shape) and sorted(got_shape) == sorted(expected_shape)
    return fail("shape", summary, expected=list(expected_shape), got=list(got_shape),
                details={"expected_axes": list(exp_names), "got_axes": list(got_names)},
                hint=_shape_hint(exp_names, got_names),
                misconception="axes-transposed" if transposed else None)


def values(got: torch.Tensor, expected: torch.Tensor, *, what: str, axes: Sequence[str],
           tol: Tolerance, variants: Callable[[], list[Variant]] | None = None) -> None:
    g = got.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    bad_nonfinite = ~torch.isfinite(g) & torch.isfinite(e)
    if bool(bad_nonfinite.any()):
        idx = tuple(int(i) for i in bad_nonfinite.nonzero()[0])
        kind = "NaN" if bool(torch.isnan(g[idx])) else "inf"
        count = int(bad_nonfinite.sum())
        diag = Diagnosis("nonfinite", f"{what} has {count} non-finite value(s): {kind} at {_where(idx, axes)}",
                         expected="finite values", got=f"{count} NaN/inf",
                         details={"index": list(idx), "count": count},
                         hint="NaN usually comes from a softmax over a row that is all -inf, or from an "
                              "overflow (exp of a large score); check the mask and where you apply it.")
        name_mistake(diag, g, e, dtype=got.dtype, tol=tol, variants=variants)
        raise CheckFailed(diag)
    err = (g - e).abs()
    allowed = tol.atol + tol.rtol * e.abs()
    wrong = err > allowed
    if not bool(wrong.any()):
        return
    flat = int(torch.argmax(torch.where(wrong, err, torch.zeros_like(err))))
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), g.shape))
    n_wrong, total = int(wrong.sum()), wrong.numel()
    details = {"max_abs_error": float(err.max()), "index": list(idx), "mismatched": n_wrong,
               "total": total, "atol": tol.atol, "rtol": tol.rtol,
               "expected_value": float(e[idx]), "got_value": float(g[idx])}
    details.update(_localise(wrong, axes))
    shown_e, shown_g = distinct_digits(float(e[idx]), float(g[idx]))
    summary = (f"{what}: {n_wrong} of {total} values differ; largest error {float(err.max()):.3g} "
               f"at {_where(idx, axes)} (expected {shown_e}, got {shown_g})")
    diag = Diagnosis("values", summary, expected=float(e[idx]), got=float(g[idx]), details=details)
    name_mistake(diag, g, e, dtype=got.dtype, tol=tol, variants=variants)
    raise CheckFailed(diag)


# -------------------------------------------------------------------------------------------------
# Naming the mistake behind wrong values


def name_mistake(diag: Diagnosis, got64: torch.Tensor, expected64: torch.Tensor, *, dtype: torch.dtype,
                 tol: Tolerance, variants: Callable[[], list[Variant]] | None) -> None:
    """Set ``diag.misconception`` to the first variant the learner's values equal, with the evidence:
    the hint says to what precision they match, ``details`` keeps the numbers for the run summary."""
    if variants is None:
        diag.details["variants_compared"] = []
        return
    mtol = match_tolerance(dtype, tol)
    cands = candidates(expected64, variants(), mtol)
    diag.details["variants_compared"] = [v.name for v in cands]   # the mistakes this input can show
    found = match_variant(got64, cands, mtol)
    if found is None:
        return
    variant, err = found
    diag.misconception = variant.name
    diag.hint = evidence(variant, err)
    diag.details.update({"variant_max_error": err, "variant_tolerance": mtol.atol,
                         "misconception_sentence": variant.explained()})


def candidates(expected: torch.Tensor, variants: list[Variant], tol: Tolerance) -> list[Variant]:
    """The variants that give a different answer from the reference on this input."""
    return [v for v in variants if separation(v.value, expected, tol) > SAME_AS_REFERENCE]


def match_variant(got64: torch.Tensor, candidates: list[Variant], tol: Tolerance) -> tuple[Variant, float] | None:
    """The first known mistake whose output equals the learner's within ``tol`` (NaN and inf must sit
    at the same places), with the largest deviation between the two."""
    for cand in candidates:
        if separation(got64, cand.value, tol) <= 1.0:
            value = cand.value.to(torch.float64)
            finite = torch.isfinite(value)
            err = float((got64 - value)[finite].abs().max()) if bool(finite.any()) else 0.0
            return cand, err
    return None


def separation(a: torch.Tensor, b: torch.Tensor, tol: Tolerance) -> float:
    """How far ``a`` is from ``b`` in tolerances: the largest |a - b| / (atol + rtol |b|). Infinite when
    the shapes differ or the NaN/inf entries do not sit at the same places with the same values (two
    NaN are equal here: the same wrong answer gives NaN at the same places)."""
    if tuple(a.shape) != tuple(b.shape):
        return math.inf
    a, b = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(fa, fb):
        return math.inf
    if not bool(fa.all()):
        na, nb = a[~fa], b[~fb]
        if not torch.equal(torch.isnan(na), torch.isnan(nb)) or not torch.equal(na[~torch.isnan(na)], nb[~torch.isnan(nb)]):
            return math.inf
    if not bool(fa.any()):
        return 0.0
    diff = (a - b)[fa].abs()
    allowed = tol.atol + tol.rtol * b[fa].abs()
    ratio = torch.where(allowed > 0, diff / allowed.clamp_min(1e-300), torch.where(diff > 0, math.inf, 0.0))
    return float(ratio.max())


def bound(err: float) -> str:
    """'to 1e-9': the smallest power of ten at or above ``err``; 'exactly' for 0."""
    if not err > 0:
        return "exactly"
    return f"to 1e{math.ceil(math.log10(err) - 1e-12)}"


def evidence(variant: Variant, err: float) -> str:
    """The variant's sentence with the evidence for it: how closely this test's values equal it."""
    said = f"{variant.sentence} {bound(err)} on this test's input"
    return f"{said}: {variant.fix}" if variant.fix else said


def distinct_digits(expected: float, got: float, least: int = 4) -> tuple[str, str]:
    """``expected`` and ``got`` as text with the fewest significant digits (at least ``least``) at
    which they read differently: never "expected -0.3, got -0.3" for -0.30001 and -0.30004."""
    for digits in range(least, 18):
        a, b = f"{expected:.{digits}g}", f"{got:.{digits}g}"
        if a != b:
            return a, b
    return repr(expected), repr(got)


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
    holds turns the exception into the same ``exception`` diagnosis, with the mistake named."""
    from lumen_ex.harness.client import ImportFailed, LearnerError
    from lumen_ex.harness.plugin import _learner_error

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


def _localise(wrong: torch.Tensor, axes: Sequence[str]) -> dict:
    """Which heads / batch items / query rows hold the wrong values."""
    out = {}
    for axis_name in ("H", "B", "L_q"):
        dim = axis_index(axes, axis_name)
        if dim is None:
            continue
        others = [d for d in range(wrong.dim()) if d != dim]
        per = wrong.any(dim=others) if others else wrong
        out[{"H": "heads", "B": "batch_items", "L_q": "rows"}[axis_name]] = [int(i) for i in per.nonzero().flatten()]
    return out


def _where(idx: tuple[int, ...], axes: Sequence[str]) -> str:
    if len(axes) == len(idx):
        return "[" + ", ".join(f"{a}={i}" for a, i in zip(axes, idx)) + "]"
    return str(list(idx))


def _tuple(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype_hint(got: torch.dtype, want: torch.dtype) -> str:
    if got == torch.float32 and want != torch.float32:
        return ("Something in your code is float32: a .float() or dtype=torch.float32 never cast back, or a "
                "new tensor made without dtype= (torch.tensor, torch.zeros, torch.ones are float32) that "
                "promotes the result. Keep the inputs' dtype: .to(q.dtype), or dtype=q.dtype.")
    if got == torch.float64:
        return "Something upcast to float64 (a .double(), or numpy): keep the inputs' dtype throughout."
    return "Keep the inputs' dtype throughout: do not .float() or .double() the result."


def _shape_hint(expected: Sequence[str], got: Sequence[str]) -> str | None:
    if len(expected) != len(got):
        return ("The number of dimensions differs: check for a missing or extra unsqueeze/squeeze, "
                "or a transpose with k.T on a batched tensor (use k.transpose(-2, -1)).")
    swapped = [a for a, b in zip(expected, got) if a != b]
    if sorted(expected) == sorted(got) and swapped:
        return f"Axes {', '.join(swapped)} are in the wrong order: check your transposes."
    return None
