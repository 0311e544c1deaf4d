"""Pictures for diagnoses: the attention-weights (or mask) heatmap a learner looks at instead of reading.

:func:`heatmap` turns a learner's (..., L_q, L_k) tensor and its float64 reference into a compact,
JSON-able payload for ``Diagnosis.details["heatmap"]``: ONE (L_q, L_k) slice (the batch/head slice
holding the largest error), values rounded to 3 significant digits, at most 16 x 16 cells (cropped
around the worst cell when larger, and saying so), which cells differ under the check's tolerance,
and the same picture as a PNG (src/lumen_ex/feedback/pictures/png.py), base64-embedded. docs/result-schema.md documents
the payload; src/lumen_ex/cli/pictures.py draws it in the terminal. Exercise 4 (RoPE) draws the same
picture of the rotation angle of each (token, pair) instead (``rows="tokens", cols="pairs",
kind="angles"``, with the differing pairs given as ``wrong``).

Hooks: expect.tensors() calls :func:`illustrate` when a values/NaN check fails (the failing tensor
if it is weights or a bool mask, else a sibling weights tensor that is wrong too: a mask bug makes
the output wrong first, and the weights show why); property tests call :func:`attach` directly.

Example (exercise 1's suite: a property failure of its own, with the weights drawn beside the expected)::

    failure = fail("property", f"a masked key still gets weight {worst:.3g}", misconception="masked-key-weight")
    raise pictures.attach(failure, weights, exp_w, what="weights", axes=case.axes("L_q", "L_k"))
"""

from __future__ import annotations

import base64
import math
from typing import Sequence

import torch

from lumen_ex.core.results import CheckFailed, Diagnosis
from lumen_ex.feedback.pictures.png import heatmap_png

MAX_CELLS = 16                      # per side of the picture
DIGITS = 3                          # significant digits kept
PICTURED_KINDS = ("values", "nonfinite", "property")


def unravel(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The index into ``shape`` of position ``flat`` of the flattened tensor (row-major), as
    ``torch.unravel_index`` gives it, in plain Python: torch's version imports sympy on its first
    call (about 0.7 s of CPU and 480 modules in a grading process, measured at torch 2.13).

    >>> unravel(5, (2, 3))
    (1, 2)
    """
    index = []
    for size in reversed(tuple(shape)):
        flat, i = divmod(flat, size)
        index.append(i)
    return tuple(reversed(index))


def wants(axes: Sequence[str], value: torch.Tensor) -> bool:
    """Is this tensor attention weights or a mask: (..., L_q, L_k) axes, or a bool matrix?"""
    return value.dim() >= 2 and (tuple(axes[-2:]) == ("L_q", "L_k") or value.dtype == torch.bool)


def heatmap(got: torch.Tensor, expected: torch.Tensor, *, what: str, axes: Sequence[str],
            atol: float = 1e-5, rtol: float = 1e-5, wrong: torch.Tensor | None = None,
            rows: str = "queries", cols: str = "keys", kind: str | None = None,
            on: str | None = None) -> dict | None:
    """The payload for one (L_q, L_k) slice of ``got`` against ``expected``; None when the shapes
    differ, the tensors are not matrices, or no cell differs.

    ``wrong`` (bool, the shape of ``got``): which cells differ, when the check that failed decides it
    rather than atol/rtol on the values drawn (exercise 4 draws the rotation angle of each pair and
    marks the pairs whose values failed). ``rows``, ``cols``, ``kind``: what the picture shows, for
    the views (docs/result-schema.md): queries x keys of weights or a mask by default, tokens x
    pairs of "angles" for exercise 4. ``on``: what a mask's True cell means, one word ("held":
    exercise 10's slots; "accepted": exercise 12's drafts), where it is not "may attend"."""
    if not isinstance(got, torch.Tensor) or got.dim() < 2 or tuple(got.shape) != tuple(expected.shape):
        return None
    is_mask = got.dtype == torch.bool or expected.dtype == torch.bool
    g = got.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    finite = torch.isfinite(g)
    err = torch.where(finite, (g - e).abs(), torch.full_like(g, math.inf))
    err = torch.where(torch.isfinite(e), err, torch.zeros_like(err))
    differs = (err > atol + rtol * e.abs()) | (~finite & torch.isfinite(e))
    if wrong is not None:
        if tuple(wrong.shape) != tuple(g.shape):
            return None
        differs = wrong.detach().to("cpu", torch.bool) | (~finite & torch.isfinite(e))
    wrong = differs
    if not bool(wrong.any()):
        return None
    # the leading-axes slice with the largest error (NaN/inf count as the largest)
    lead = tuple(g.shape[:-2])
    # (a differing cell scores above 0 even when the values drawn agree: ``wrong`` decided it)
    score = torch.where(wrong, err.clamp_min(1e-300), torch.zeros_like(err)).reshape(-1, *g.shape[-2:])
    worst_flat = int(torch.argmax(score.amax(dim=(-2, -1))))
    slice_index = unravel(worst_flat, lead) if lead else ()
    gs, es, ws, errs = g[slice_index], e[slice_index], wrong[slice_index], score[worst_flat]
    L_q, L_k = gs.shape
    r, c = unravel(int(torch.argmax(errs)), errs.shape)
    r0, c0 = _window(r, L_q), _window(c, L_k)
    row_win, col_win = slice(r0, r0 + MAX_CELLS), slice(c0, c0 + MAX_CELLS)
    lead_axes = list(axes[:-2]) if len(axes) == g.dim() else [f"dim{i}" for i in range(len(lead))]
    index = {name: i for name, i in zip(lead_axes, slice_index)}
    where = f" [{', '.join(f'{k}={v}' for k, v in index.items())}]" if index else ""
    cropped = L_q > MAX_CELLS or L_k > MAX_CELLS
    payload = {
        "title": f"{what}{where}",
        "what": what,
        "kind": kind or ("mask" if is_mask else "weights"),
        "rows": rows,
        "cols": cols,
        "index": index,
        "shape": [L_q, L_k],
        "row_start": r0,
        "col_start": c0,
        "cropped": cropped,
        "expected": _grid(es[row_win, col_win], is_mask),
        "got": _grid(gs[row_win, col_win], is_mask),
        "differs": [[int(x) for x in row] for row in ws[row_win, col_win].tolist()],
        "worst": [r, c],
        "mismatched": int(ws.sum()),
    }
    if on is not None and is_mask:
        payload["on"] = on
    payload["png_base64"] = base64.b64encode(heatmap_png(payload)).decode("ascii")
    return payload


def attach(failure: CheckFailed | Diagnosis, got, expected: torch.Tensor, *, what: str, axes: Sequence[str],
           atol: float = 1e-5, rtol: float = 1e-5, **shown):
    """Add the heatmap of ``got`` against ``expected`` to a failure's diagnosis (unless it has one);
    returns ``failure``, so a test can ``raise pictures.attach(fail(...), ...)``. ``shown``: the
    optional ``wrong``, ``rows``, ``cols``, ``kind`` and ``on`` of :func:`heatmap`."""
    diag = failure.diagnosis if isinstance(failure, CheckFailed) else failure
    if "heatmap" not in diag.details:
        try:
            payload = heatmap(got, expected, what=what, axes=axes, atol=atol, rtol=rtol, **shown)
        except Exception:                 # a picture is a bonus: never let it hide the verdict
            payload = None
        if payload is not None:
            diag.details["heatmap"] = payload
    return failure


def illustrate(diag: Diagnosis, failing, items: Sequence, tolerance) -> None:
    """expect.tensors()'s hook: picture the failing tensor when it is weights or a mask, else the
    first sibling weights tensor that is wrong too. ``items`` are expect.Expected; ``tolerance(item)``
    gives the item's Tolerance."""
    if diag.kind not in PICTURED_KINDS or "heatmap" in diag.details:
        return
    for item in [failing, *(i for i in items if i is not failing)]:
        if isinstance(item.got, torch.Tensor) and wants(item.axes, item.value):
            tol = tolerance(item)
            attach(diag, item.got, item.value, what=item.what, axes=item.axes, atol=tol.atol, rtol=tol.rtol)
            if "heatmap" in diag.details:
                return


def _window(worst: int, n: int) -> int:
    """Start of a MAX_CELLS window over 0..n-1 that holds ``worst``, as centred as the edges allow."""
    if n <= MAX_CELLS:
        return 0
    return max(0, min(worst - MAX_CELLS // 2, n - MAX_CELLS))


def _grid(t: torch.Tensor, is_mask: bool) -> list[list]:
    if is_mask:
        return [[int(bool(v)) for v in row] for row in t.tolist()]
    return [[_round(v) for v in row] for row in t.tolist()]


def _round(v: float):
    if not math.isfinite(v):
        return None                     # JSON has no NaN/inf: null, drawn as "?"
    if v == 0:
        return 0.0
    return float(f"{v:.{DIGITS}g}")
