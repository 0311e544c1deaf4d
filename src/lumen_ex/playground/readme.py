"""An exercise's README as HTML for the playground (CommonMark and tables, by markdown-it-py).

A pack's README is the instructor's text, but it is still rendered with raw HTML turned off: a
``<script>`` in it is shown as text, and markdown-it drops ``javascript:`` links. The page puts
the result in the README panel; its Content-Security-Policy would stop a script anyway.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from markdown_it import MarkdownIt

MAX_README_BYTES = 256 * 1024


@lru_cache(maxsize=1)
def _renderer() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")


def readme_html(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_README_BYTES).decode("utf-8", "replace")
    except OSError:
        return "<p>(this exercise has no README)</p>"
    return _renderer().render(text)
