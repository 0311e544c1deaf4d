"""Two texts, one under the other, with the first character where they part marked: the text a
learner's model wrote under the reference's (exercise 13's generation test).

A suite puts them in a failure's details as ``{"texts": {"prompt": str, "yours": str, "expected":
str, "first_difference": int}}``; every view reads them through :func:`comparison`, which checks the
payload and neutralises the text (src/lumen_ex/core/untrusted.py ``one_line``: a newline is shown as
``␤``, one character wide, so the two texts stay aligned), and cuts them into rows with :func:`rows`.
"""

from __future__ import annotations

from dataclasses import dataclass

from lumen_ex.core.untrusted import one_line

MAX_CHARS = 2000      # a longer text is cut: a view never draws an unbounded payload


@dataclass(frozen=True)
class TextComparison:
    prompt: str
    yours: str
    expected: str
    first: int        # index of the first character that differs (len of the shorter when one is a prefix)


@dataclass(frozen=True)
class Row:
    """One slice of both texts, ``start`` to ``start + len``; ``marked``: the index in the slice of the
    first difference, when it falls in this slice."""
    start: int
    yours: str
    expected: str
    marked: int | None


def comparison(details: object) -> TextComparison | None:
    """The texts of a failure's details, checked and made safe to draw; None when there are none."""
    payload = details.get("texts") if isinstance(details, dict) else None
    if not isinstance(payload, dict):
        return None
    texts = [payload.get(k) for k in ("prompt", "yours", "expected")]
    first = payload.get("first_difference")
    if not all(isinstance(t, str) for t in texts) or type(first) is not int:
        return None
    prompt, yours, expected = (one_line(t[:MAX_CHARS]) for t in texts)   # type: ignore[index]
    return TextComparison(prompt, yours, expected, max(0, min(first, len(yours), len(expected))))


def rows(c: TextComparison, width: int) -> list[Row]:
    """Both texts cut into slices of ``width`` characters (at least 20), aligned."""
    width = max(20, width)
    n = max(len(c.yours), len(c.expected))
    out = []
    for start in range(0, max(n, 1), width):
        mark = c.first - start if start <= c.first < start + width else None
        out.append(Row(start, c.yours[start:start + width], c.expected[start:start + width], mark))
    return out


def caption(c: TextComparison) -> str:
    """What the rows show, in one line."""
    return f"greedy text after the prompt: yours above the reference's (they part at character {c.first + 1})"
