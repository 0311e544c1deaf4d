"""The header of a corpus submission: its leading ``# key: value`` comment lines.

Every file in tests/corpus/ starts with lines such as ``# bug: the 1/sqrt(d_k) scale is missing``,
``# expect-kind: values`` and ``# expect-misconception: no-scale``, which say what the grader must
report for it. The corpus tests and bench/corpus_report.py read them with :func:`headers`.
"""

from __future__ import annotations

import re
from pathlib import Path

HEADER = re.compile(r"^#\s*([a-z-]+):\s*(.+?)\s*$")


def headers(path: Path) -> dict[str, str]:
    """The leading ``# key: value`` lines of ``path``, up to the first line that is not one."""
    found = {}
    for line in path.read_text().splitlines():
        match = HEADER.match(line)
        if not match:
            break
        found[match.group(1)] = match.group(2)
    return found
