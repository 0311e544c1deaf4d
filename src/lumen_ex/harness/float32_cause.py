"""Why a result came back float32, named from the file that was graded (the harness's snapshot).

The harness calls :func:`float32_cause` for every failed test (src/lumen_ex/harness/plugin.py
``with_source_line``): a line of the learner's file that computes in float32 and never casts back,
or one that makes a new tensor without ``dtype=``.
"""

from __future__ import annotations

import re
from typing import Sequence

from lumen_ex.core.results import Diagnosis

FLOAT32_NOT_CAST_BACK = ("this line computes in float32 (.float(), dtype=torch.float32) and the result is never cast "
                         "back: computing inside in float32 is fine, but return the inputs' dtype, "
                         ".to(q.dtype) or .type_as(q)")
NEW_TENSOR_DTYPE = ("this line makes a new tensor without dtype=, so it is float32 (torch.zeros, torch.ones, "
                    "torch.tensor, torch.full all are), and the result follows it: create it with dtype=q.dtype "
                    "and device=q.device, or use torch.zeros_like / torch.ones_like")


# What a line of the learner's file does that makes a float32 result: an explicit float32
# computation, or a new tensor made without dtype= (torch.zeros etc. are float32 by default).
_FLOAT32_CAST = re.compile(r"\.float\(\)|torch\.float32\b|torch\.float\b|\.to\(\s*torch\.float32")
_NEW_TENSOR = re.compile(r"\btorch\.(zeros|ones|full|empty|tensor|eye|rand|randn)\(")   # float32 by default
_CAST_BACK = re.compile(r"\.to\([^)]*dtype|\.type_as\(|\.to\(\s*\w+\.dtype|dtype\s*=\s*\w+\.dtype")


# A float32 tensor meeting one of another dtype in an op that does not promote (matmul, bmm).
_MIXED_FLOAT32 = re.compile(r"expected scalar type Float but found (Half|BFloat16|Double)|"
                            r"found (Half|BFloat16|Double) .*Float|expected m1 and m2 to have the same dtype")


def float32_cause(diag: Diagnosis, lines: Sequence[str], file: str) -> None:
    """Name why a result came back float32, from the file that was graded (``lines``): the line that
    computes in float32 and is never cast back (``.float()``, ``dtype=torch.float32``), or the line
    that makes a new tensor without ``dtype=``. Named only when exactly one kind of line is there;
    otherwise the diagnosis keeps its generic id and a hint that names both causes. An exception
    raised where such a float32 tensor meets the inputs' dtype (a matmul does not promote) is named
    the same way, the line that made the float32 tensor shown beside the one that raised."""
    mixed = diag.kind == "exception" and bool(_MIXED_FLOAT32.search(diag.summary))
    if not mixed and (diag.kind != "dtype" or diag.got != "float32"
                      or diag.expected not in ("float64", "float16", "bfloat16")):
        return
    code = [(n, line.split("#")[0]) for n, line in enumerate(lines, 1)]
    casts = [(n, c) for n, c in code if _FLOAT32_CAST.search(c) and not _CAST_BACK.search(c)]
    new = [(n, c) for n, c in code if _NEW_TENSOR.search(c) and "dtype=" not in c and "_like(" not in c]
    if casts and not new:
        n, line = casts[0]
        diag.misconception, diag.hint = "float32-not-cast-back", FLOAT32_NOT_CAST_BACK
    elif new and not casts:
        n, line = new[0]
        diag.misconception, diag.hint = "new-tensor-dtype", NEW_TENSOR_DTYPE
    else:
        return
    if mixed:       # the traceback's line stays "where"; the cause is the line that made float32
        diag.details.update({"cause": f"{file} line {n}", "cause_code": line.strip()[:200]})
        diag.hint = f"{file} line {n}: {diag.hint}"
        return
    diag.details.update({"where": f"{file} line {n}", "code": line.strip()[:200]})
