"""The pictures of a record, in one place: a failed value's heatmap payload made from the tensors
(heatmap.py, called by the hidden suites), its PNG (png.py), and here, its embedding in the views
(``details.heatmap.png_base64``, docs/result-schema.md), checked before any view embeds it. The
terminal drawing of the same payload is the command line's (src/lumen_ex/cli/pictures.py: rich is
the CLI's alone).

The payload travels in a record that may come from a grading process or a container, so it is
treated as untrusted: a picture is used only
when its text is strict base64 that decodes to a PNG (its signature first) of at most
:data:`MAX_PNG_BYTES`, and it is re-encoded, so that only base64 characters ever reach a ``data:``
URL. The caption goes through src/lumen_ex/core/untrusted.py like every other text.
"""

from __future__ import annotations

import base64
import binascii

from lumen_ex.core.results import RunResult, Status, TestResult
from lumen_ex.core.untrusted import one_line
from lumen_ex.feedback.pictures.png import PNG_SIGNATURE

MAX_PNG_BYTES = 64 << 10


def picture(test: TestResult) -> str | None:
    """The test's heatmap PNG as base64 (checked and re-encoded), or None."""
    diag = test.diagnosis
    payload = diag.details.get("heatmap") if diag else None
    data = payload.get("png_base64") if isinstance(payload, dict) else None
    if not isinstance(data, str) or len(data) > MAX_PNG_BYTES * 2:
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw.startswith(PNG_SIGNATURE) or len(raw) > MAX_PNG_BYTES:
        return None
    return base64.b64encode(raw).decode("ascii")


def data_url(png_base64: str) -> str:
    return f"data:image/png;base64,{png_base64}"


def caption(test: TestResult) -> str:
    """'<test name>: weights [B=0, H=1]: expected | yours | difference', on one line."""
    payload = test.diagnosis.details.get("heatmap") if test.diagnosis else None
    title = payload.get("title") if isinstance(payload, dict) else None
    what = f"{title}: " if isinstance(title, str) and title else ""
    return one_line(f"{test.name}: {what}expected | yours | difference")


def pictured(result: RunResult) -> list[tuple[TestResult, str]]:
    """(test, base64 PNG) for every test of ``result`` that did not pass and has a picture."""
    found = []
    for t in result.tests:
        png = picture(t) if t.status not in (Status.PASS, Status.SKIPPED) else None
        if png:
            found.append((t, png))
    return found
