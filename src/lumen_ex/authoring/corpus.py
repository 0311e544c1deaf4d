"""An exercise's corpus: submissions whose verdict is known, in corpus/correct/ and corpus/buggy/.

A correct file must get full marks. A buggy file starts with header comments that say what the
grader must report for it, up to the first line that is not one::

    # bug: <one line>                          what the learner got wrong (required)
    # expect-kind: <kind>                      the diagnosis kind of the FIRST failing test (required)
    # expect-misconception: <mistake id>       the known mistake that test must name (optional)
    # expect-test: <test id>                   which hidden test must fail first (optional)

Correct files may say ``# expect-note: <test ids>`` (tests whose result carries a note, such as
float32 rounding). ``lumen-ex dev check`` grades every file and compares; the built-in pack's test
suite does the same (tests/e2e/test_corpus.py).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from lumen_ex.core.catalog import Exercise
from lumen_ex.core.results import DIAGNOSIS_KINDS

HEADER = re.compile(r"^#\s*([a-z-]+):\s*(.+?)\s*$")
KINDS = ("correct", "buggy")
HEADER_BYTES = 8192           # headers come first; nothing past this is read for them


def headers(path: Path) -> dict[str, str]:
    """The leading ``# key: value`` lines of ``path``, up to the first line that is not one."""
    found = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read(HEADER_BYTES)
    for line in text.splitlines():
        match = HEADER.match(line)
        if not match:
            break
        found[match.group(1)] = match.group(2)
    return found


@dataclass(frozen=True)
class CorpusFile:
    exercise: Exercise
    kind: str                 # "correct" or "buggy"
    path: Path

    @property
    def headers(self) -> dict[str, str]:
        return headers(self.path)

    @property
    def label(self) -> str:
        return f"{self.exercise.dir}/corpus/{self.kind}/{self.path.name}"


def corpus_files(ex: Exercise, kind: str | None = None) -> list[CorpusFile]:
    return [CorpusFile(ex, k, p) for k in (KINDS if kind is None else (kind,))
            for p in sorted((ex.corpus_dir / k).glob("*.py"))]


def header_problems(item: CorpusFile, known: set[str]) -> list[str]:
    """What is wrong with a buggy file's headers (``known``: the mistake ids its exercise can name)."""
    if item.kind != "buggy":
        return []
    h, problems = item.headers, []
    if not h.get("bug"):
        problems.append(f"{item.label}: add a '# bug: <what is wrong>' header line")
    if h.get("expect-kind") not in DIAGNOSIS_KINDS:
        problems.append(f"{item.label}: '# expect-kind:' must be one of {', '.join(DIAGNOSIS_KINDS)} "
                        f"(got {h.get('expect-kind')!r}{did_you_mean(h.get('expect-kind'), DIAGNOSIS_KINDS)})")
    if "expect-misconception" in h and h["expect-misconception"] not in known:
        problems.append(f"{item.label}: '# expect-misconception: {h['expect-misconception']}' is not in "
                        f"mistakes.py's CATALOGUE{did_you_mean(h['expect-misconception'], known)}")
    for key in sorted(set(h) - set(HEADER_KEYS)):     # a comment such as "# note: ..." is fine; a typo is not
        if did_you_mean(key, HEADER_KEYS):
            problems.append(f"{item.label}: '# {key}:' is not a header lumen-ex reads{did_you_mean(key, HEADER_KEYS)}")
    return problems


# The header lines a corpus file may have (see the module docstring).
HEADER_KEYS = ("bug", "expect-kind", "expect-misconception", "expect-test", "expect-note")


def did_you_mean(got: str | None, names) -> str:
    """'; did you mean X?' for the name nearest ``got`` among ``names`` ('' when none is near)."""
    near = difflib.get_close_matches(str(got or ""), sorted(names), n=1, cutoff=0.75)
    return f"; did you mean {near[0]!r}?" if near else ""
