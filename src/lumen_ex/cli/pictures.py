"""Terminal pictures inside a failure: the attention heatmap and the shape diagram.

Both read only the diagnosis (``details["heatmap"]``, documented in docs/result-schema.md, and
``expected``/``got`` with ``details["expected_axes"]``/``["got_axes"]`` for shapes) and must read
well without colour (NO_COLOR, not a terminal, the golden tests): every mark is a character, and
colour only repeats what the characters already say.

Heatmap, one row per query and two characters per key (tests/golden/pictures-*.txt has more)::

      weights [B=0, H=2]: rows = queries, columns = keys
          expected         yours            difference
           0 1 2 3 4 5 6    0 1 2 3 4 5 6    0 1 2 3 4 5 6
      q0  ▓▓ · · ·██▓▓ ·   ▒▒▒▒▒▒▒▒▓▓▒▒▒▒    - + + + - - +
      · exactly 0   ░▒▓█ small to large weight (█ = 0.725)
      + yours larger   - yours smaller   · the same, within tolerance

Shades go by the square root of weight / largest weight (░ below 1/16, ▒ below 1/4, ▓ below 9/16),
so small weights stay visible and an exact 0 (·) stands apart from a tiny leak (░).
Masks draw ■ for True (may attend) and · for False. The picture is fitted to the width it is
given (and to the rows it is allowed): the rest is cropped around the largest difference, and the
title says which rows and columns are shown ("rows = queries 8-11 of 12").
"""

from __future__ import annotations

import math

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from lumen_ex.core.untrusted import one_line
from lumen_ex.feedback.pictures.png import payload_word
from lumen_ex.feedback.shapes import shape_columns

# What a picture's rows and columns are (the payload's "rows" and "cols", docs/result-schema.md): the
# caption's word, a row label's prefix and one of them, by name. Exercise 4 (RoPE) draws tokens x pairs.
# A word not listed here (an exercise's own, "steps" or "channels") is shown as it is: row_words and
# col_words. Keyed by object: looked up with whatever the payload holds there.
ROWS: dict[object, tuple[str, str, str]] = {"queries": ("queries", "q", "query"), "tokens": ("tokens", "t", "token")}
COLS: dict[object, tuple[str, str]] = {"keys": ("keys", "key"), "pairs": ("pairs", "pair")}
VALUES: dict[object, str] = {"angles": "angle, radians"}     # what the shades measure, by kind (otherwise: weight)
GENERIC_KINDS = ("weights", "mask")      # kinds whose shades are weights


def _singular(word: str) -> str:
    return word[:-1] if word.endswith("s") and len(word) > 1 else word


def row_words(p: dict) -> tuple[str, str, str]:
    """(plural, label prefix, singular) of the picture's rows: "queries", "q", "query" by default."""
    if p.get("rows") in ROWS:
        return ROWS[p["rows"]]
    word = payload_word(p, "rows")
    return (word, word[:1], _singular(word)) if word else ROWS["queries"]


def col_words(p: dict) -> tuple[str, str]:
    """(plural, singular) of the picture's columns: "keys", "key" by default."""
    if p.get("cols") in COLS:
        return COLS[p["cols"]]
    word = payload_word(p, "cols")
    return (word, _singular(word)) if word else COLS["keys"]


def value_word(p: dict) -> str:
    """What the shades measure: "weight" for weights and masks, else the payload's kind."""
    kind = p.get("kind")
    if kind in VALUES:
        return VALUES[kind]
    word = payload_word(p, "kind")
    return _singular(word) if word and kind not in GENERIC_KINDS else "weight"


SHADES = ("░░", "▒▒", "▓▓", "██")
ZERO, UNKNOWN, ON = " ·", " ?", " ■"
LABEL_W, SEP = 6, "   "
STYLE = {"shade": "blue", "wrong": "bold red", "more": "bold red", "less": "bold cyan", "nan": "bold magenta"}


# -------------------------------------------------------------------------------------------------
# heatmap


class Heatmap:
    """A rich renderable of ``details["heatmap"]``: expected | yours | difference; ``max_rows``
    (None: all) keeps that many rows around the largest difference, and ``worst_line=False`` leaves
    out the line that names it, for a failure that must fit one screen (src/lumen_ex/cli/render.py)."""

    def __init__(self, payload: dict, max_rows: int | None = None, *, worst_line: bool = True):
        self.p = payload
        self.max_rows = max_rows
        self.worst_line = worst_line

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        try:                     # a view never fails: a malformed payload draws nothing
            lines = heatmap_lines(self.p, options.max_width, self.max_rows, worst_line=self.worst_line) \
                if _well_formed(self.p) else []
        except (TypeError, ValueError, KeyError, IndexError):
            lines = []
        yield from lines


def _well_formed(p) -> bool:
    """The payload's grids are equal-sized lists of rows of numbers / None (at most 64 x 64)."""
    if not isinstance(p, dict):
        return False
    grids: list = [p.get(k) for k in ("expected", "got", "differs")]
    if not all(isinstance(g, list) and 0 < len(g) <= 64 for g in grids):
        return False
    n_cols = len(grids[0][0]) if isinstance(grids[0][0], list) else -1
    return 0 < n_cols <= 64 and all(
        len(g) == len(grids[0]) and all(isinstance(row, list) and len(row) == n_cols and all(
            v is None or (type(v) in (int, float, bool) and math.isfinite(v)) for v in row) for row in g)
        for g in grids)


def heatmap_lines(p: dict, width: int = 96, max_rows: int | None = None, *, worst_line: bool = True) -> list[Text]:
    """The picture's lines, fitted to ``width`` columns and at most ``max_rows`` rows (None: all),
    both cropped around the largest difference; the title then says which rows and columns it shows.
    ``worst_line``: end with the line that names the largest difference (where one is known)."""
    expected, got, differs = p["expected"], p["got"], p["differs"]
    n_rows, n_cols = len(expected), len(expected[0]) if expected else 0
    if not n_rows or not n_cols:
        return []
    is_mask = p.get("kind") == "mask"
    r0, c0 = int(p.get("row_start", 0)), int(p.get("col_start", 0))
    worst = p.get("worst") or [r0, c0]
    # fit the columns to the width: label + 3 panels of 2 characters per key + 2 separators
    cols = _around(int(worst[1]) - c0, n_cols, max(1, (width - LABEL_W - 2 * len(SEP)) // 6))
    rows = _around(int(worst[0]) - r0, n_rows, max(1, max_rows or n_rows))
    vmax = max((abs(v) for g in (expected, got) for row in g for v in row if v is not None), default=0.0) or 1.0

    def cell(v) -> tuple[str, str]:
        if v is None:
            return UNKNOWN, STYLE["nan"]
        if is_mask:
            return (ON, "") if v else (ZERO, "dim")
        if v == 0:
            return ZERO, "dim"
        level = min(3, int(math.sqrt(abs(v) / vmax) * 4))     # sqrt: small weights stay visible
        return SHADES[level], STYLE["shade"]

    def diff(e, g, wrong) -> tuple[str, str]:
        if not wrong:
            return ZERO, "dim"
        if e is None or g is None:
            return UNKNOWN, STYLE["nan"]
        return (" +", STYLE["more"]) if g > e else (" -", STYLE["less"])

    titles = ("expected", "yours", "difference")
    widths = [max(2 * len(cols), len(t)) for t in titles]
    title = one_line(p.get("title") or p.get("what", "weights"))        # from the record: shown, never run
    row_mark = row_words(p)[1]
    long, short = _axes(p, range(r0 + rows.start, r0 + rows.stop), range(c0 + cols.start, c0 + cols.stop))
    axes = short if len(long) > width - len(title) - 4 >= len(short) else long     # wrapping anyway: the clearer
    out = [Text.assemble("  ", (title, "bold"), f": {axes}")]
    out.append(Text((" " * LABEL_W + SEP.join(t.ljust(w) for t, w in zip(titles, widths))).rstrip()))
    every = 2 if c0 + cols.stop - 1 >= 10 else 1          # two-digit keys: label every other one
    numbers = "".join(f"{c0 + j:>2}" if (c0 + j) % every == 0 else "  " for j in cols)
    out.append(Text((" " * LABEL_W + SEP.join(numbers.ljust(w) for w in widths)).rstrip()))
    for i in rows:
        line = Text(f"{row_mark}{r0 + i}".rjust(LABEL_W - 2).ljust(LABEL_W))
        for n in range(3):
            if n:
                line.append(SEP)
            for j in cols:
                e, g, wrong = expected[i][j], got[i][j], bool(differs[i][j])
                text, style = cell(e) if n == 0 else cell(g) if n == 1 else diff(e, g, wrong)
                if n == 1 and wrong and style != STYLE["nan"]:
                    style = STYLE["wrong"]
                line.append(text, style=style)
            line.append(" " * (widths[n] - 2 * len(cols)))
        line.rstrip()
        out.append(line)
    out += _legend(p, is_mask, vmax)
    located = _worst_line(p, is_mask, width) if worst_line else ""
    if located:
        out.append(Text(located, style="dim"))
    return out


def _around(worst: int, n: int, fit: int) -> range:
    """``fit`` of ``n`` consecutive indices (all of them if they fit), the ``worst`` one among them."""
    if n <= fit:
        return range(n)
    lo = max(0, min(worst - fit // 2, n - fit))
    return range(lo, lo + fit)


def _legend(p: dict, is_mask: bool, vmax: float) -> list[Text]:
    if is_mask:
        on = payload_word(p, "on")          # what True means where it is not "may attend" (exercise 10: held; 12: accepted)
        return [Text(f"  ■ True ({on})   · False (not {on})" if on else "  ■ True (may attend)   · False (masked)"),
                Text.assemble("  ", ("+", STYLE["more"]), " yours True, expected False   ",
                              ("-", STYLE["less"]), " yours False, expected True")]
    value = value_word(p)
    first: list[str | tuple[str, str]] = ["  · exactly 0   ", ("░▒▓█", STYLE["shade"]),
                                          f" small to large {value} (█ = {vmax:.3g})"]
    if any(v is None for row in p["got"] for v in row):
        first += ["   ", ("?", STYLE["nan"]), " NaN/inf"]
    return [Text.assemble(*first),
            Text.assemble("  ", ("+", STYLE["more"]), " yours larger   ", ("-", STYLE["less"]), " yours smaller   "
                          "· the same, within tolerance")]


def _axes(p: dict, rows: range, cols: range) -> tuple[str, str]:
    """What the rows and columns are: 'rows = queries, columns = keys'; an axis the picture crops
    says which of how many it shows: 'rows = queries 8-11 of 12, columns = keys'. Then the short
    form, rows x columns, for a title that leaves no room: 'queries 8-11 of 12 x keys'."""
    L_q, L_k = (p.get("shape") or [len(p["expected"]), len(p["expected"][0])])[:2]

    def axis(word: str, shown: range, whole: int) -> str:
        return word if shown.start == 0 and shown.stop == whole else f"{word} {shown.start}-{shown.stop - 1} of {whole}"

    row, col = axis(row_words(p)[0], rows, L_q), axis(col_words(p)[0], cols, L_k)
    return f"rows = {row}, columns = {col}", f"{row} x {col}"


def _fitted(width: int, *forms: str) -> str:
    """The first of ``forms`` (longest first) that fits ``width`` columns, else the last."""
    return next((f for f in forms if len(f) <= width), forms[-1])


def _worst_line(p: dict, is_mask: bool, width: int = 96) -> str:
    worst = p.get("worst")
    if not worst:
        return ""
    i, j = worst[0] - int(p.get("row_start", 0)), worst[1] - int(p.get("col_start", 0))
    try:
        e, g = p["expected"][i][j], p["got"][i][j]
    except (IndexError, TypeError):
        return ""
    fmt = (lambda v: "True" if v else "False") if is_mask else (lambda v: "NaN/inf" if v is None else f"{v:.3g}")
    n, shape = p.get("mismatched"), p.get("shape") or []
    counted = n and len(shape) == 2
    row, col = row_words(p)[2], col_words(p)[1]
    line = f"  largest difference: {row} {worst[0]}, {col} {worst[1]}, expected {fmt(e)}, yours {fmt(g)}"
    if not counted:
        return line
    return _fitted(width, f"{line} ({n} of {shape[0] * shape[1]} cells differ)",
                   f"{line} ({n} of {shape[0] * shape[1]} differ)", line)


# -------------------------------------------------------------------------------------------------
# shape diagram


def shape_diagram(expected: list, got: list, exp_axes: list, got_axes: list) -> list[Text]:
    """Expected shape over yours, one column per axis (name above size), ^ under the axes that
    differ (the columns: src/lumen_ex/feedback/shapes.py)."""
    columns = shape_columns(expected, got, exp_axes, got_axes)
    if columns is None:
        return []
    widths = [max(len(x) for x in (*c.expected, *c.yours)) for c in columns]
    bad = [c.differs for c in columns]

    def row(label: str, cells: list[str], marks: list[bool]) -> Text:
        t = Text(f"  {label:<10}")
        for n, (c, w, m) in enumerate(zip(cells, widths, marks)):
            t.append("  " if n else "")
            t.append(c.rjust(w), style="bold red" if m else "")
        return t

    lines = [row("expected", [c.expected[0] for c in columns], [False] * len(columns)),
             row("", [c.expected[1] for c in columns], [False] * len(columns)),
             row("yours", [c.yours[1] for c in columns], bad),
             row("", [c.yours[0] for c in columns], bad)]
    carets = Text(" " * 12)
    for n, (w, m) in enumerate(zip(widths, bad)):
        carets.append("  " if n else "")
        carets.append(("^" * w) if m else " " * w, style="bold red" if m else "")
    if any(bad):
        carets.append("  ^ differs", style="dim")
    lines.append(Text(carets.plain.rstrip()) if not any(bad) else carets)
    return lines


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(n - 1, 1)] + "…"
