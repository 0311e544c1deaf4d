"""Checks that hidden tests make on what the learner's code returned, in a fixed order.

Each check raises :class:`CheckFailed` carrying a structured :class:`Diagnosis`. A returned tensor is
checked shape first (with axis names), then dtype, then device, then NaN/inf, then values; the
first failing check is the one reported, because it explains the ones after it.

The suites use every name through this module (``expect.X``): the tolerances and the distance in
tolerances are in src/lumen_ex/graders/support/tolerances.py, the naming of mistakes (variants, dtype
mistakes, recognised exceptions) in src/lumen_ex/graders/support/mistakes.py, both re-exported here.

Example (exercise 2's suite: an exception of the learner's code that a rule recognises is named)::

    with expect.exceptions_named(NAMED_EXCEPTIONS):
        result = submission.call("decode_step", tuple(case.args(dtype)), device=device)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from lumen_ex.core.results import CheckFailed, Diagnosis, note, tolerance_share
from lumen_ex.feedback.pictures import heatmap as pictures
from lumen_ex.graders.support.mistakes import (  # noqa: F401 (re-exported for the suites)
    COMMON_EXCEPTIONS,
    GENERIC_MISCONCEPTIONS,
    Variant,
    _fill_overflows,
    _other_device,
    _view_after_transpose,
    bound,
    candidates,
    dtype_misconception,
    evidence,
    exceptions_named,
    failing_line,
    match_variant,
    name_mistake,
)
from lumen_ex.graders.support.shapes import axis_index, name_shape
from lumen_ex.graders.support.tolerances import (  # noqa: F401 (re-exported for the suites)
    FLOAT32_ROUNDING_NOTE,
    FLOAT64_ARITHMETIC,
    GRADIENT_TOLERANCE,
    MATCH_TOLERANCE_FLOAT64,
    SAME_AS_REFERENCE,
    TOLERANCES,
    Tolerance,
    match_tolerance,
    separation,
)
from lumen_ex.harness.float32_cause import float32_cause  # noqa: F401 (re-exported)
from lumen_ex.harness.proxy import meta
from lumen_ex.sandbox.inside.wire import Opaque

# Naming why a result came back float32 reads the graded file: the harness does it for every test
# (src/lumen_ex/harness/float32_cause.py); float32_cause is re-exported here for the suites.


def fail(kind: str, summary: str, **fields) -> CheckFailed:
    """A failure of the suite's own, to raise; ``fields``: expected, got, details, hint, misconception.

    Example (exercise 1's suite)::

        raise fail("side-effect", "your function modified its input q in place", misconception="inputs-modified",
                   hint="Use out-of-place operations (masked_fill, not masked_fill_; x = x / s, not x /= s).")"""
    return CheckFailed(Diagnosis(kind, summary, **fields))


# -------------------------------------------------------------------------------------------------
# What came back


def returns(value, names: Sequence[str], fn: str) -> tuple:
    """The call returned a tuple of ``len(names)`` tensors: return them.

    Example::

        out, weights = expect.returns(result.value, ("output", "weights"), "scaled_dot_product_attention")"""
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
    """``value`` is a tensor: return it (else a "type" failure that calls it ``what``).

    Example (exercise 4: rope returns one tensor)::

        out = expect.is_tensor(result.value, "output")"""
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
    """``fn`` is defined and takes ``params`` in this order, with these default values (as repr).

    Example::

        expect.signature(submission, "causal_mask", ["L_q", "L_k", "device"], defaults={"L_k": "None", "device": "None"})"""
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


def gradients(result, expected: Sequence[torch.Tensor], names: Sequence[str],
              tol: float = GRADIENT_TOLERANCE) -> None:
    """The gradients the worker took match the reference's (inputs in float64).

    Example (exercise 1: the call took ``grad_wrt=(0, 1, 2), grad_seeds=(g_out, g_w)``)::

        expected = torch.autograd.grad((out * g_out).sum() + (w * g_w).sum(), (q, k, v))   # the reference's
        expect.gradients(result, expected, names=("q", "k", "v"))"""
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
    """One returned tensor and its float64 reference, with the names of its axes.

    Example (exercise 1; ``variants`` and ``tol`` are optional)::

        Expected(out, exp_out, "output", case.axes("L_q", "d_v"),
                 lambda: output_variants(case.q, case.k, case.v, case.mask, which=0, dtype=dtype), tol=LARGE_TOL)"""

    got: torch.Tensor                                 # what the learner returned: tensors() checks it is one first
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

    Example::

        expect.tensors([Expected(out, exp_out, "output", case.axes("L_q", "d_v"))], sizes=case.sizes, dtype=dtype, device=device)"""
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
                       hint="Create new tensors on an input's device (device=q.device, x.device) or with torch.zeros_like.")
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
    """``got`` has ``expected_shape``, else a "shape" failure that names the axes of both.

    Example (before the suite's own arithmetic on a returned tensor)::

        expect.shape(weights, case.mask.shape, what="weights", axes=case.axes("L_q", "L_k"), sizes=case.sizes)"""
    expected_shape = tuple(expected_shape)
    got_shape = tuple(got.shape)
    if got_shape == expected_shape:
        return
    raise _shape_failure(got_shape, expected_shape, what=what, axes=axes, sizes=sizes)


def shapes(items: Sequence[Expected], *, sizes: dict[str, int]) -> None:
    """Every item has its expected shape. Returned tensors whose shapes are the expected ones in
    another order (``return weights, output``) are named as such, before any single shape.

    Example (exercise 5, whose outputs differ in dtype, runs the stages of tensors() itself)::

        expect.shapes(items, sizes=case.sizes)        # items: an Expected for each returned tensor"""
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
    if not bool(wrong.any()):     # passed: how much of the tolerance it used (core/results.py tolerance_share)
        tolerance_share(float((err / allowed).nan_to_num(0.0).max()) if err.numel() else 0.0)
        return
    flat = int(torch.argmax(torch.where(wrong, err, torch.zeros_like(err))))
    idx = pictures.unravel(flat, g.shape)
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


def distinct_digits(expected: float, got: float, least: int = 4) -> tuple[str, str]:
    """``expected`` and ``got`` as text with the fewest significant digits (at least ``least``) at
    which they read differently: never "expected -0.3, got -0.3" for -0.30001 and -0.30004."""
    for digits in range(least, 18):
        a, b = f"{expected:.{digits}g}", f"{got:.{digits}g}"
        if a != b:
            return a, b
    return repr(expected), repr(got)


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
