"""The shape diagram as data: expected shape over yours, one column per axis, the differing axes
marked. The terminal draws it as text (src/lumen_ex/cli/pictures.py), the playground as a table
(src/lumen_ex/feedback/web.py): both from :func:`shape_columns`.

Same rank: axes are compared position by position. Different rank: axes are aligned by name, so a
missing or extra axis shows as a gap (``–``) instead of shifting every axis after it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from lumen_ex.core.untrusted import one_line

GAP = ("–", "–")


@dataclass(frozen=True)
class ShapeColumn:
    expected: tuple[str, str]   # (axis name, size); GAP where the expected shape has no such axis
    yours: tuple[str, str]      # the same for the learner's result
    differs: bool


def shape_columns(expected: list, got: list, exp_axes: list, got_axes: list) -> list[ShapeColumn] | None:
    """One column per axis, or None when the diagnosis does not hold the four lists."""
    if not all(isinstance(x, list) for x in (expected, got, exp_axes, got_axes)):
        return None
    exp = [(one_line(n), one_line(s)) for n, s in zip(exp_axes, expected)]
    yours = [(one_line(got_axes[i]) if i < len(got_axes) else "?", one_line(s)) for i, s in enumerate(got)]
    return [ShapeColumn(a or GAP, b or GAP, a is None or b is None or a != b) for a, b in align_axes(exp, yours)]


def align_axes(exp: list, yours: list) -> list[tuple]:
    """Pairs of (expected axis, your axis), None for a gap."""
    if len(exp) == len(yours):
        return list(zip(exp, yours))
    out: list[tuple] = []
    matcher = difflib.SequenceMatcher(a=[n for n, _ in exp], b=[n for n, _ in yours], autojunk=False)
    for _op, i1, i2, j1, j2 in matcher.get_opcodes():
        a, b = exp[i1:i2], yours[j1:j2]
        for k in range(max(len(a), len(b))):
            out.append((a[k] if k < len(a) else None, b[k] if k < len(b) else None))
    return out
