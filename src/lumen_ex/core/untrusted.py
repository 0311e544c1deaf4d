"""Text from a submission, made harmless at the one place a view writes it.

What a learner's code prints, the message of an exception it raises, the name of a submission's
folder or file: any of these can hold characters that do something where they are written. A
terminal runs escape sequences (ESC ] 52 writes the clipboard, ESC [ 2J clears the screen, a
carriage return moves back to overwrite a line with "✓ all tests passed"); Markdown and HTML turn
text into headings, links and tags; a spreadsheet runs a cell that starts with ``=`` as a formula;
and a lone surrogate (half of a UTF-16 pair, which Python strings can hold) cannot be encoded at
all, so a writer that meets one crashes.

The result record keeps the text exactly as it came (``lumen-ex check --format json`` and the
documents ``lumen-ex grade`` writes escape it as JSON does). Each view calls one function here
for each piece of untrusted text, just before writing it:

- :func:`visible` for text shown as lines (a terminal panel, a log, a report's message field);
- :func:`one_line` for text that must stay on one line (a name, a title, a table cell);
- :func:`markdown` for a Markdown table cell or heading, :func:`markdown_code` for a code span
  and :func:`code_block` for a fenced block;
- :func:`html` for HTML text or an attribute value;
- :func:`csv_cell` for a spreadsheet cell;
- :func:`encodable` just before encoding text that no other function has passed through.

The rules, which tests/e2e/test_injection.py checks for each view:

1. Control characters (C0 and C1, and DEL) other than newline and tab are replaced: those with a
   Unicode "control picture" by it (ESC -> ``␛``, CR -> ``␍``, BEL -> ``␇``, NUL -> ``␀``,
   DEL -> ``␡``), C1 ones (0x80-0x9F, among them the one-byte CSI 0x9B and OSC 0x9D) by their
   escape written out, ``\\x9b``. So ``\\x1b[2J`` shows as ``␛[2J``: seen, never run.
2. Characters that are invisible or reorder text and so can fake what is shown are written out as
   escapes (``\\u202e``): the bidirectional embeddings, overrides, isolates and marks, the
   zero-width space and non-joiner, the word joiner and invisible operators, the byte-order mark,
   soft hyphen, interlinear annotation marks, the "tag" characters U+E0000-E007F (which can
   smuggle hidden ASCII) and the line and paragraph separators U+2028/U+2029: every character of
   Unicode category Cf, Zl or Zp except the zero-width joiner U+200D, which emoji need.
3. A lone surrogate is written out as its escape (``\\ud800``) by :func:`visible`, and replaced
   by U+FFFD by :func:`encodable`, so no writer ever fails to encode a string.
"""

from __future__ import annotations

import html as _html
import re

REPLACEMENT = "\ufffd"

# C0 controls (except \t and \n), DEL: shown as the Unicode control pictures U+2400-U+2421.
_C0 = "\x00-\x08\x0b-\x1f\x7f"
# C1 controls: no pictures exist, so they are written out as \x escapes.
_C1 = "\x80-\x9f"
# Unicode format characters (category Cf, Unicode 15) except U+200D ZWJ, and the line/paragraph
# separators (Zl, Zp). tests/e2e/test_injection.py checks this list against unicodedata.
_FORMAT = ("\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b\u200c\u200e\u200f"
           "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
           "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
           "\U000e0001\U000e0020-\U000e007f")
_SURROGATE = "\ud800-\udfff"

_UNSAFE = re.compile(f"[{_C0}{_C1}{_FORMAT}{_SURROGATE}]")
_SURROGATES = re.compile(f"[{_SURROGATE}]")


def _shown(char: str) -> str:
    """How one unsafe character is written: its control picture, or its escape."""
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def encodable(text: object) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (�), so that it encodes as UTF-8.

    Use it on text that goes out whole and is not otherwise neutralised (a file's content just
    before it is written): every other function here already makes its result encodable."""
    return _SURROGATES.sub(REPLACEMENT, str(text))


def visible(text: object) -> str:
    """``text`` with every control, invisible-formatting and lone-surrogate character shown
    instead of acted on (rules 1-3 of this module); newlines and tabs are kept.

    ``visible("\\x1b[2Jhi\\r✓")`` is ``"␛[2Jhi␍✓"``."""
    return _UNSAFE.sub(lambda m: _shown(m.group()), str(text))


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, with an ellipsis when cut:
    never "keep the ca"."""
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 1)]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"


def one_line(text: object) -> str:
    """Like :func:`visible`, and newlines and tabs shown too (``␤``, ``␉``): for a name, a
    title or a table cell, which a line break in the text must not split or end."""
    return visible(text).replace("\n", "\u2424").replace("\t", "\u2409")


# -- Markdown and HTML -----------------------------------------------------------------------------

_MD_BACKSLASH = re.compile(r"([\\`*~|$#])")             # inline markup, table pipes, math, headings
_MD_LINK = re.compile(r"\]([(\[:])")                    # [text](url), [text][ref], [ref]: url
_MD_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")   # only where it could emphasise
_MD_LIST = re.compile(r"^( *)([-+=])")                # a list item or a setext underline
_MD_NUMBERED = re.compile(r"^( *\d+)([.)])")           # a numbered list item


def markdown(text: object) -> str:
    """``text`` as literal Markdown inline text, on one line, for a table cell, a heading or a
    quoted line: the result renders as the characters themselves.

    After :func:`one_line`: ``&``, ``<`` and ``>`` become HTML entities (no tag, autolink or entity
    of the learner's gets through); a backslash goes before each backslash, backtick, ``*``,
    ``~``, ``|``, ``$`` and ``#``, before an ``_`` that is not inside a word, before the ``(``,
    ``[`` or ``:`` that follows a ``]`` (so no link, image or link definition), and before a
    leading ``-``, ``+`` or ``=`` or the dot of a leading number (no list item, no underline).
    Test names such as ``causal_mask: bool [4d]`` stay as they are."""
    text = _html.escape(one_line(text), quote=False)
    text = _MD_BACKSLASH.sub(r"\\\1", text)
    text = _MD_UNDERSCORE.sub(r"\\_", text)
    text = _MD_LINK.sub(r"]\\\1", text)
    text = _MD_LIST.sub(r"\1\\\2", text, count=1)
    return _MD_NUMBERED.sub(r"\1\\\2", text, count=1)


def markdown_code(text: object) -> str:
    """``text`` as a Markdown code span (in a table cell too): one line, in a run of backticks
    longer than any inside it, with ``|`` escaped as table cells need."""
    inner = one_line(text).replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall("`+", inner)), default=0) + 1)
    pad = " " if inner.startswith("`") or inner.endswith("`") else ""
    return f"{fence}{pad}{inner}{pad}{fence}"


def code_block(text: object) -> str:
    """``text`` as a fenced Markdown code block (its lines kept, made :func:`visible`), fenced
    with more backticks than any run inside it, so that no line of it can close the block."""
    inner = visible(text)
    fence = "`" * max(3, max((len(run) for run in re.findall("`+", inner)), default=0) + 1)
    return f"{fence}\n{inner}\n{fence}"


def html(text: object) -> str:
    """``text`` as HTML text or a quoted attribute value: :func:`visible`, then ``& < > " '``
    written as entities."""
    return _html.escape(visible(text), quote=True)


# -- spreadsheets ----------------------------------------------------------------------------------

# A formula (or DDE command) starts with one of these; the full-width forms count too.
FORMULA_START = "=+-@\uff1d\uff0b\uff0d\uff20"
# What a spreadsheet may split a cell on when it guesses the separator wrongly: a comma, a
# semicolon, a pipe, or any whitespace but the plain space (tab, CR, LF, form feed ...).
_FORMULA = re.compile(f"(^|[,;|]|[^\\S ])(\\s*)([{re.escape(FORMULA_START)}])")


def csv_cell(text: object) -> str:
    """``text`` as one spreadsheet cell that no spreadsheet runs as a formula.

    A single quote goes before every ``=``, ``+``, ``-`` or ``@`` (or its full-width form) that
    starts the cell or follows a comma, semicolon, pipe, tab, CR, LF or other whitespace except
    the plain space (with any whitespace between): so the cell is inert even when a spreadsheet
    splits it on another separator than the comma the file uses. Then whitespace runs become one
    space and controls are shown (:func:`one_line`). ``=1+1`` -> ``'=1+1``, ``a;=cmd`` ->
    ``a;'=cmd``, ``x\\n=1+1`` -> ``x '=1+1``, ``-1`` -> ``'-1``; ``a -1`` stays as it is."""
    quoted = _FORMULA.sub(r"\1\2'\3", str(text))
    return one_line(" ".join(quoted.split()))
