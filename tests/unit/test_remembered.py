"""Known wrong answers remembered by content (src/lumen_ex/graders/support/remembered.py).

The key must change whenever anything the variants are computed from changes (a value, a dtype,
a number the function closes over, its code, the module it reads its names from), must be None
for what it cannot read as values, and the remembered results must stay within their bounds. That
the verdicts are those of a process that remembers nothing is shown on real gradings by
tests/unit/test_kept_session.py.
"""

from __future__ import annotations

import torch

from lumen_ex.graders.support import mistakes
from lumen_ex.graders.support.mistakes import Variant
from lumen_ex.graders.support.remembered import MAX_NODES, Remembered, content_key, tensor_bytes
from lumen_ex.graders.support.tolerances import Tolerance

TOL = Tolerance(1e-6, 1e-6)
CALLS: list[int] = []


def key(*values):
    found = content_key(*values)
    assert found is not None
    return found[0]


def variants_over(x: torch.Tensor, scale: float = 2.0):
    return lambda: [Variant("doubled", "your output is doubled", x * scale), Variant("same", "as the reference", x)]


def test_the_key_follows_every_value_the_variants_are_computed_from():
    x = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    base = key(variants_over(x), x, TOL)
    assert key(variants_over(x.clone()), x.clone(), TOL) == base          # equal content, other objects
    changed = x.clone()
    changed[1, 2] += 1e-12                                                 # one value, by one ulp or so
    assert key(variants_over(changed), x, TOL) != base
    assert key(variants_over(x), changed, TOL) != base                    # the reference too
    assert key(variants_over(x.float()), x, TOL) != base                  # the dtype
    assert key(variants_over(x.reshape(3, 2)), x, TOL) != base            # the shape
    assert key(variants_over(x, 3.0), x, TOL) != base                     # a number it closes over
    assert key(variants_over(x), x, Tolerance(1e-5, 1e-6)) != base        # the tolerance
    assert key(lambda: [Variant("doubled", "your output is doubled", x * 3.0)], x, TOL) != \
        key(lambda: [Variant("doubled", "your output is doubled", x * 2.0)], x, TOL)   # the code


def test_the_same_code_in_another_module_namespace_is_another_key():
    """A suite imported again (edited, or another pack's) has a namespace of its own: the names its
    variants read may mean something else there."""
    source = "def make(x):\n    return lambda: [helper(x)]\n"
    first, second = {"helper": lambda x: x}, {"helper": lambda x: -x}
    exec(source, first)
    exec(source, second)
    x = torch.ones(2, dtype=torch.float64)
    assert key(first["make"](x)) != key(second["make"](x))


def test_what_cannot_be_read_as_values_is_never_remembered():
    class Opaque:
        pass

    opaque = Opaque()
    assert content_key(lambda: opaque) is None
    assert content_key(torch.ones(2), object()) is None
    assert content_key(list(range(MAX_NODES + 1))) is None                # too many parts to hash

    def later():                      # closes over a name not yet bound: an empty cell
        return helper()

    assert content_key(later) is None
    helper = list                     # noqa: F841  (bound now, after the key was asked for)
    remembered, calls = Remembered(), []
    for _ in range(3):
        remembered.get(None, lambda: calls.append(1) or [1], size=lambda v: 0)
    assert len(calls) == 3 and len(remembered) == 0


def test_a_result_is_computed_once_per_key_and_the_bounds_hold():
    remembered, calls = Remembered(max_entries=2, max_bytes=3 * 8), []

    def compute(n):
        calls.append(n)
        return [torch.zeros(n, dtype=torch.float64)]

    for n in (1, 1, 2, 1):
        remembered.get(("k", n), lambda n=n: compute(n), size=tensor_bytes)
    assert calls == [1, 2] and remembered.reused == 2 and len(remembered) == 2
    remembered.get(("k", 3), lambda: compute(3), size=tensor_bytes)        # 24 bytes: the others go
    assert len(remembered) == 1
    remembered.get(("k", 4), lambda: compute(4), size=tensor_bytes)        # over the bound: not kept
    assert len(remembered) == 1 and calls == [1, 2, 3, 4]
    remembered.get(("k", 3), lambda: compute(3), size=tensor_bytes)
    assert calls == [1, 2, 3, 4]


def test_name_mistake_computes_the_variants_once_for_many_files():
    """The way a class is graded: the same test, at the same seed, failing for several files."""
    x = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(3, 4)       # (L, d)
    CALLS.clear()

    def variants():
        CALLS.append(1)          # a module's name, not a value it closes over (that would be part of the key)
        return [Variant("doubled", "your output is doubled", 2 * x), Variant("negated", "your output is negated", -x)]

    mistakes.CANDIDATES.clear()
    named = []
    for got in (2 * x, -x, x + 1, 2 * x):
        diag = mistakes.Diagnosis(kind="values", summary="")
        mistakes.name_mistake(diag, got, x, dtype=torch.float64, tol=TOL, variants=variants)
        named.append(diag.misconception)
    assert named == ["doubled", "negated", None, "doubled"]
    assert len(CALLS) == 1
