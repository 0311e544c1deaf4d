"""Checks that hidden tests make on what the learner's code returned, in a fixed order.

Each check raises :class:`CheckFailed` carrying a structured :class:`Diagnosis`. A returned tensor is
checked shape first (with axis names), then dtype, then device, then NaN/inf, then values; the
first failing check is the one reported, because it explains the ones after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from lumen_ex.harness.proxy import meta
from lumen_ex.harness.wire import Opaque
from lumen_ex.results import CheckFailed, Diagnosis

from .shapes import axis_index, name_shape


@dataclass(frozen=True)
class Tolerance:
    """|got - expected| <= atol + rtol * |expected|, element by element (see docs/tolerances.md)."""

    atol: float
    rtol: float


# Measured errors against a float64 reference are about 3e-7 in float32, 6e-4 in float16 and 5e-3 in
# bfloat16 (shared/docs/misconceptions.md 3.1); conceptual mistakes give errors of order 1.
TOLERANCES = {
    torch.float64: Tolerance(1e-7, 1e-7),
    torch.float32: Tolerance(1e-5, 1e-5),
    torch.float16: Tolerance(1e-2, 1e-2),
    torch.bfloat16: Tolerance(2e-2, 2e-2),
}


@dataclass(frozen=True)
class Variant:
    """A known wrong answer: what the output would be with a particular mistake (in float64)."""

    name: str            # short id, e.g. "no-scale"
    sentence: str        # one sentence a learner understands
    value: torch.Tensor


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


def signature(submission, fn: str, params: Sequence[str], defaults: dict[str, str] = {}) -> None:
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


def gradients(result, expected: Sequence[torch.Tensor], names: Sequence[str], tol: float = 1e-6) -> None:
    """The gradients the worker took match the reference's (inputs in float64)."""
    if result.grad_error or result.grads is None:
        raise fail("property", "no gradient flows back to the inputs: " + (result.grad_error or "none returned"),
                   hint="Something breaks the autograd graph: .detach(), .item(), .numpy() / torch.tensor(...) "
                        "round trips, or writing into a new tensor with torch.no_grad().")
    for name, got, want in zip(names, result.grads, expected):
        if got is None:
            raise fail("property", f"no gradient reaches {name}: the output does not depend on it through autograd",
                       hint=f"Check every use of {name}: a .detach() or a NumPy round trip cuts it off.")
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            raise fail("property", f"the gradient for {name} has the wrong shape",
                       expected=list(want.shape), got=list(getattr(got, "shape", [])))
        err = float((got.to(torch.float64) - want).abs().max())
        if not err <= tol + tol * float(want.abs().max()):
            raise fail("property", f"the gradient with respect to {name} differs from the reference's by up to {err:.3g}",
                       details={"max_abs_error": err},
                       hint="Forward values can match while gradients do not, e.g. after an in-place edit.")


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
    for it in items:
        shape(it.got, it.value.shape, what=it.what, axes=it.axes, sizes=sizes)
    for it in items:
        if it.got.dtype != dtype:
            raise fail("dtype", f"{it.what} has dtype {_dt(it.got.dtype)}; the inputs were {_dt(dtype)}",
                       expected=_dt(dtype), got=_dt(it.got.dtype), hint=_dtype_hint(it.got.dtype, dtype))
    for it in items:
        where = meta(it.got).device
        if where.split(":")[0] != device.split(":")[0]:
            raise fail("device", f"{it.what} is on {where}; the inputs were on {device}",
                       expected=device, got=where,
                       hint="Create new tensors with device=q.device (or torch.zeros_like and friends).")
    for it in items:
        values(it.got, it.value, what=it.what, axes=it.axes, tol=it.tol or TOLERANCES[dtype],
               variants=it.variants)


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
    exp_names = tuple(axes)
    got_names = name_shape(got_shape, sizes)
    summary = (f"{what}: expected ({', '.join(exp_names)}) = {_tuple(expected_shape)}, "
               f"got ({', '.join(got_names)}) = {_tuple(got_shape)}")
    raise fail("shape", summary, expected=list(expected_shape), got=list(got_shape),
               details={"expected_axes": list(exp_names), "got_axes": list(got_names)},
               hint=_shape_hint(exp_names, got_names))


def values(got: torch.Tensor, expected: torch.Tensor, *, what: str, axes: Sequence[str],
           tol: Tolerance, variants: Callable[[], list[Variant]] | None = None) -> None:
    g = got.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    bad_nonfinite = ~torch.isfinite(g) & torch.isfinite(e)
    if bool(bad_nonfinite.any()):
        idx = tuple(int(i) for i in bad_nonfinite.nonzero()[0])
        kind = "NaN" if bool(torch.isnan(g[idx])) else "inf"
        count = int(bad_nonfinite.sum())
        raise fail("nonfinite", f"{what} has {count} non-finite value(s): {kind} at {_where(idx, axes)}",
                   expected="finite values", got=f"{count} NaN/inf",
                   details={"index": list(idx), "count": count},
                   hint="NaN usually comes from a softmax over a row that is all -inf, or from an "
                        "overflow in float16; check the mask and where you apply it.")
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
    summary = (f"{what}: {n_wrong} of {total} values differ; largest error {float(err.max()):.3g} "
               f"at {_where(idx, axes)} (expected {float(e[idx]):.4g}, got {float(g[idx]):.4g})")
    diag = Diagnosis("values", summary, expected=float(e[idx]), got=float(g[idx]), details=details)
    if variants is not None:
        match = match_variant(g, variants(), tol)
        if match is not None:
            diag.misconception = match.name
            diag.hint = match.sentence
    raise CheckFailed(diag)


def match_variant(got64: torch.Tensor, candidates: list[Variant], tol: Tolerance) -> Variant | None:
    """The first known mistake whose output equals the learner's (within the dtype's tolerance)."""
    for cand in candidates:
        value = cand.value.to(torch.float64)
        if value.shape == got64.shape and bool(torch.isfinite(value).all()):
            if bool(((got64 - value).abs() <= tol.atol + tol.rtol * value.abs()).all()):
                return cand
    return None


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
        return ("A tensor made with torch.tensor(...) or torch.ones(...) without dtype= is float32; "
                "build new tensors with dtype=q.dtype, or avoid them.")
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
