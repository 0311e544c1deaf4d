"""How close a returned tensor must be to the float64 reference, and how far apart two answers are.

The tolerances every comparison uses (by dtype; see docs/tolerances.md), the stricter ones for
naming a mistake, and :func:`separation`, the distance in tolerances that both the checks
(src/lumen_ex/graders/support/expect.py) and the naming of mistakes
(src/lumen_ex/graders/support/mistakes.py) measure with. All re-exported by expect.

Example (exercise 3's suite, then its mistakes.py; ``TOLERANCES[dtype]`` is the dtype's)::

    tol = TOLERANCES[torch.float32]                    # Tolerance(atol=1e-05, rtol=1e-05)
    changed = (y - base).abs() > tol.atol + tol.rtol * base.abs()
    m = MATCH_TOLERANCE_FLOAT64                        # two float64 answers this close are the same answer
    same = torch.allclose(a.value, b.value, rtol=m.rtol, atol=m.atol, equal_nan=True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    """|got - expected| <= atol + rtol * |expected|, element by element (see docs/tolerances.md).

    Example (exercise 1's suite: a bool mask is right or wrong)::

        EXACT = Tolerance(0.0, 0.0)                    # atol, rtol
        expect.tensor(got, ref.causal_mask(3, 5), what="causal_mask", axes=("L_q", "L_k"),
                      sizes={"L_q": 3, "L_k": 5}, dtype=torch.bool, device=device, tol=EXACT)"""

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


# Naming a mistake needs evidence: the learner's output must equal the variant. A float64 output
# differs from a float64 variant by rounding only (~1e-15), so 1e-9 is the bar there; in lower
# precision the comparison's own tolerance (the dtype's, or the test's) is the best evidence there is.
MATCH_TOLERANCE_FLOAT64 = Tolerance(1e-9, 1e-9)
# A variant within this many match tolerances of the reference gives the reference's answer on this
# input (e.g. "cache ignored" when the cache is empty): it is no candidate for this comparison.
SAME_AS_REFERENCE = 2.0


# Gradients (inputs in float64) are compared at |got - expected| <= tol + tol * max |expected|: float32
# arithmetic inside the learner's function stays ~50x below 1e-5 (bench/float32_margin.py), and a
# gradient broken by an in-place edit is off by order 1.
GRADIENT_TOLERANCE = 1e-5


def match_tolerance(dtype: torch.dtype, tol: Tolerance) -> Tolerance:
    """The tolerance for naming a variant: 1e-9 in float64, else the comparison's own."""
    return MATCH_TOLERANCE_FLOAT64 if dtype == torch.float64 else tol


def separation(a: torch.Tensor, b: torch.Tensor, tol: Tolerance, slack: torch.Tensor | float = 0.0) -> float:
    """How far ``a`` is from ``b`` in tolerances: the largest |a - b| / (atol + rtol |b| + slack). Infinite
    when the shapes differ or the NaN/inf entries do not sit at the same places with the same values
    (two NaN are equal here: the same wrong answer gives NaN at the same places). ``slack``: an
    absolute allowance per element (broadcast to ``b``), a known mistake's own rounding
    (graders/support/mistakes.py Variant.slack)."""
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
    if not (isinstance(slack, float) and slack == 0.0):
        extra = torch.as_tensor(slack, dtype=torch.float64).to("cpu").expand_as(b)   # (*b.shape)
        allowed = allowed + extra[fa]
    ratio = torch.where(allowed > 0, diff / allowed.clamp_min(1e-300), torch.where(diff > 0, math.inf, 0.0))
    return float(ratio.max())

