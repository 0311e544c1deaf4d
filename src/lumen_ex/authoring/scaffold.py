"""``lumen-ex dev new DIR --slug S --title T``: a new pack with one exercise that ``dev check`` accepts.

The exercise it writes is small but complete, to be edited into the author's own: a numerically
stable softmax over the last axis, with a learner README and stub, a reference, one known mistake
(softmax over the wrong axis) in mistakes.py, a hidden suite of three groups written against the
author facade (src/lumen_ex/author.py), and a corpus of one correct and two buggy files.
docs/authoring.md walks through each file.
"""

from __future__ import annotations

import re
from pathlib import Path

from lumen_ex.core.catalog import SLUG
from lumen_ex.core.errors import UsageError
from lumen_ex.core.packs import PACK_NAME

DEFAULT_NUMBER = 101       # course packs number from 101, so the built-in pack can grow


def new_pack(target: Path, *, slug: str, title: str, number: int | None = None, name: str | None = None,
             version: str = "0.1.0") -> Path:
    """Write the pack into ``target`` (new or empty), or add the exercise to the pack already there
    (its pack.toml lists it; ``number`` defaults to one past the pack's highest); return the
    exercise's folder."""
    target = Path(target)
    if (target / "pack.toml").is_file():
        return add_exercise(target, slug=slug, title=title, number=number)
    if target.exists() and any(target.iterdir()):
        raise UsageError(f"{target} already exists, is not empty and holds no pack.toml",
                         "Choose a new folder, empty it first, or name a pack's folder to add an exercise to it")
    number = DEFAULT_NUMBER if number is None else number
    _check(slug, title, number)
    name = name or re.sub(r"[^a-z0-9-]+", "-", target.resolve().name.lower()).strip("-") or "my-pack"
    if not PACK_NAME.fullmatch(name):
        raise UsageError(f"pack name {name!r} must match {PACK_NAME.pattern}", "Pass --name my-course")
    return _write_exercise(target, slug=slug, title=title, number=number, name=name, version=version,
                           with_pack=True)


def add_exercise(target: Path, *, slug: str, title: str, number: int | None) -> Path:
    """Add the scaffold's exercise to the pack at ``target`` and list it in its pack.toml."""
    from lumen_ex.core.catalog import pack_exercises
    from lumen_ex.core.errors import CatalogError
    from lumen_ex.core.packs import read_pack

    try:
        pack = read_pack(target)
        numbers = {ex.number: ex.slug for ex in pack_exercises(pack)}
    except CatalogError as exc:
        raise UsageError(f"the pack in {target} does not load: {exc}", "Fix it first (lumen-ex dev check)") from None
    number = max(numbers, default=DEFAULT_NUMBER - 1) + 1 if number is None else number
    if number in numbers or slug in numbers.values():
        taken = number if number in numbers else slug
        raise UsageError(f"the pack {pack.name} already has an exercise {taken}", "Choose another --number or --slug")
    folder = f"{number:02d}-{slug}"
    if (target / folder).exists():
        raise UsageError(f"{target / folder} already exists", "Choose another --number or --slug")
    _check(slug, title, number)
    written = _write_exercise(target, slug=slug, title=title, number=number, name=pack.name, version=pack.version,
                              with_pack=False)
    manifest = target / "pack.toml"
    text = manifest.read_text()
    listed = re.compile(r"^exercises\s*=\s*\[[^\]]*\]", re.M)
    if not listed.search(text):
        raise UsageError(f"{manifest} has no exercises = [...] list to add {folder} to", "Add it by hand")
    folders = [*pack.folders, folder]
    manifest.write_text(listed.sub("exercises = [" + ", ".join(f'"{f}"' for f in folders) + "]", text, count=1))
    return written


def _check(slug: str, title: str, number: int) -> None:
    if not SLUG.fullmatch(slug):
        raise UsageError(f"--slug {slug!r} must be lowercase letters, digits and dashes", "For example --slug softmax")
    if not title.strip() or "\n" in title or '"' in title or "\\" in title:
        raise UsageError("--title must be one line without quotes or backslashes", 'For example --title "Softmax"')
    if number < 1:
        raise UsageError("--number must be 1 or more", f"Course packs usually start at {DEFAULT_NUMBER}")


def _write_exercise(target: Path, *, slug: str, title: str, number: int, name: str, version: str,
                    with_pack: bool) -> Path:
    module = slug.replace("-", "_")
    folder = f"{number:02d}-{slug}"
    values = {"NUMBER": str(number), "SLUG": slug, "TITLE": title.strip(), "MODULE": module, "FUNCTION": module,
              "FOLDER": folder, "NAME": name, "VERSION": version}
    files = {
        **({"pack.toml": PACK_TOML} if with_pack else {}),
        f"{folder}/exercise.toml": EXERCISE_TOML,
        f"{folder}/README.md": README,
        f"{folder}/{module}.py": STUB,
        f"{folder}/reference.py": REFERENCE,
        f"{folder}/mistakes.py": MISTAKES,
        f"{folder}/suite/test_{module}.py": SUITE,
        f"{folder}/corpus/correct/subtract_max.py": CORRECT,
        f"{folder}/corpus/buggy/wrong_axis.py": BUGGY_AXIS,
        f"{folder}/corpus/buggy/no_max_subtracted.py": BUGGY_OVERFLOW,
    }
    for rel, template in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        text = template
        for key, value in values.items():
            text = text.replace(f"@{key}@", value)
        path.write_text(text)
    return target / folder


PACK_TOML = '''# An exercise pack (docs/authoring.md): lumen-ex finds it through LUMEN_EX_PATH or --exercises.
# Bump version whenever an exercise, its points or its hidden suite changes: results record it (and
# hash each exercise's files, so that a forgotten bump still regrades what an edit affects).
format_version = 1
name = "@NAME@"
title = "@NAME@"
version = "@VERSION@"
exercises = ["@FOLDER@"]
'''

EXERCISE_TOML = '''# The manifest of one exercise (docs/authoring.md). `lumen-ex dev new` wrote this exercise from its
# softmax template, whatever its slug: edit each file of this folder into your own exercise.
number = @NUMBER@
slug = "@SLUG@"
title = "@TITLE@"
file = "@MODULE@.py"
functions = ["@FUNCTION@"]
forbidden = ["torch.nn.functional.softmax"]
hints = [
    "Subtract each row's maximum before exp(): x - x.amax(dim=-1, keepdim=True). The result is the same, and exp() no longer overflows.",
    "Normalise over the last axis: divide by the sum over dim=-1 (keepdim=True), so that each row sums to 1.",
]

# Which hint answers a first failure (a mistake id of mistakes.py, or a diagnosis kind): after a
# check that failed so, `lumen-ex hint` shows that hint first. Hints are numbered from 1.
[hint_for]
"softmax-overflow" = 1
"softmax-wrong-axis" = 2
nonfinite = 1

[limits]
call_seconds = 10
run_seconds = 60
startup_seconds = 60
memory_mb = 2048
processes = 64
cpu_seconds = 60

[points]
contract = 1
values = 3
properties = 1

# What the forbidden API is built on (docs/authoring.md): the grader refuses each of these names in
# the learner's source, and makes each unusable in the sandbox before the learner's code runs.
[forbidden_api."torch.nn.functional.softmax"]
aliases = ["torch.softmax", "torch.special.softmax", "torch.Tensor.softmax"]
built_on = ["torch.nn.Softmax", "torch.nn.functional.log_softmax", "torch.log_softmax", "torch.Tensor.log_softmax",
            "torch.nn.LogSoftmax", "torch.nn.functional.softmin", "torch.nn.Softmin"]
kernels = ["aten::softmax", "aten::_softmax", "aten::special_softmax", "aten::log_softmax", "aten::_log_softmax"]
hint = "Subtract each row's maximum, exponentiate, and divide by the row's sum."
'''

README = '''# Exercise @NUMBER@: @TITLE@

Write `@FUNCTION@(x)` in `@MODULE@.py`: the softmax of `x` over its last axis,

    softmax(x)[..., i] = exp(x[..., i]) / sum_j exp(x[..., j])

for a tensor `x` of any shape `(..., n)`, returned in `x`'s shape, dtype and device. Large inputs
(hundreds) must not overflow: subtract each row's maximum first, which changes nothing else.
`torch.softmax` and its aliases are not allowed: the point is to write it.

Check it with `lumen-ex check @NUMBER@`. The hidden tests compare your values with a reference in
float64, check that every row sums to 1, and try inputs large enough to overflow `exp()`.
'''

STUB = '''"""Exercise @NUMBER@: @TITLE@. Read README.md next to this file."""

import torch


def @FUNCTION@(x: torch.Tensor) -> torch.Tensor:
    """The softmax of x over its last axis: same shape, dtype and device as x."""
    # TODO: subtract each row's maximum, exponentiate, divide by the row sums.
    raise NotImplementedError("@FUNCTION@ is not written yet")
'''

REFERENCE = '''"""Reference for exercise @NUMBER@ (@SLUG@): a numerically stable softmax over the last axis."""

import torch


def @FUNCTION@(x: torch.Tensor) -> torch.Tensor:
    shifted = x - x.amax(dim=-1, keepdim=True)            # (..., n), every row's maximum is 0
    e = shifted.exp()                                      # (..., n), in (0, 1]
    return e / e.sum(dim=-1, keepdim=True)                 # (..., n), rows sum to 1
'''

MISTAKES = '''"""Known mistakes of exercise @NUMBER@ (@SLUG@): wrong answers computed in float64, each named.

When a learner's values differ from the reference, the suite compares them with each variant and
names the one they match. CATALOGUE lists every mistake the suite can name (dev check requires a
buggy corpus file for each one that is not one of the generic mistakes every suite shares).
"""

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant


def _softmax(x, dim):
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


def value_variants(x) -> list[Variant]:
    """x: the float64 input. Each variant is what a mistaken @FUNCTION@ would return."""
    found = []
    if x.dim() >= 2:
        found.append(Variant("softmax-wrong-axis", "your output is the softmax over the first axis, not the last",
                             _softmax(x, 0), fix="normalise over dim=-1"))
    return found


CATALOGUE = {
    "softmax-wrong-axis": "softmax over another axis than the last",
    "softmax-overflow": "exp() of large inputs without subtracting the row maximum: inf / inf = nan",
    **GENERIC_MISCONCEPTIONS,
}
'''

SUITE = '''"""Hidden tests of exercise @NUMBER@ (@SLUG@). They run in the grader, never in the learner's sandbox:
``submission`` is the learner's module behind the sandbox, ``seed`` this test's own seed, ``device``
the device being graded. Every test belongs to a scoring group of exercise.toml's [points].
"""

import pytest
import torch

from lumen_ex.author import Expected, exercise, expect, fail, inputs

here = exercise(__file__)
ref, mistakes = here.reference, here.mistakes
FN = "@FUNCTION@"
SIZES = {"B": 3, "R": 4, "n": 7}          # all distinct, so that a swapped axis can be named


def call(submission, x, device):
    return submission.call(FN, (x,), device=device).value


@pytest.mark.group("contract")
def test_signature(submission):
    """@FUNCTION@(x) has the stub's parameters"""
    expect.signature(submission, FN, ["x"])


@pytest.mark.group("values")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_values(submission, seed, device, dtype):
    """values match the reference"""
    x = inputs.randn(inputs.generator(seed), SIZES["B"], SIZES["R"], SIZES["n"])        # (B, R, n)
    got = call(submission, x.to(dtype), device)
    expect.tensors([Expected(got, ref.@FUNCTION@(x), "output", ("B", "R", "n"), lambda: mistakes.value_variants(x))],
                   sizes=SIZES, dtype=dtype, device=device)


@pytest.mark.group("values")
def test_one_dimensional(submission, seed, device):
    """a single row (shape (n,))"""
    x = inputs.randn(inputs.generator(seed), SIZES["n"])                               # (n,)
    got = call(submission, x.float(), device)
    expect.tensors([Expected(got, ref.@FUNCTION@(x), "output", ("n",))], sizes=SIZES, dtype=torch.float32,
                   device=device)


@pytest.mark.group("properties")
def test_large_inputs_do_not_overflow(submission, seed, device):
    """inputs in the hundreds give finite rows that sum to 1"""
    x = inputs.randn(inputs.generator(seed), SIZES["R"], SIZES["n"]) * 300              # (R, n)
    got = expect.is_tensor(call(submission, x.float(), device), "output")
    if not torch.isfinite(got.detach().cpu()).all():
        raise fail("nonfinite", "your output has nan or inf for inputs in the hundreds: exp() overflowed",
                   expected="finite values", got="nan or inf", misconception="softmax-overflow",
                   hint="Subtract each row's maximum before exp(): x - x.amax(dim=-1, keepdim=True).")
    expect.tensors([Expected(got, ref.@FUNCTION@(x), "output", ("R", "n"))], sizes=SIZES, dtype=torch.float32,
                   device=device)
'''

CORRECT = '''# A correct solution written differently from the reference: max subtracted, logsumexp by hand.
import torch


def @FUNCTION@(x):
    m = x.max(dim=-1, keepdim=True).values
    log_sum = m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))
    return torch.exp(x - log_sum)
'''

BUGGY_AXIS = '''# bug: normalises over the first axis instead of the last
# expect-kind: values
# expect-misconception: softmax-wrong-axis
import torch


def @FUNCTION@(x):
    e = torch.exp(x - x.amax(dim=0, keepdim=True))
    return e / e.sum(dim=0, keepdim=True)
'''

BUGGY_OVERFLOW = '''# bug: exp() without subtracting the maximum overflows for large inputs
# expect-kind: nonfinite
# expect-misconception: softmax-overflow
import torch


def @FUNCTION@(x):
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)
'''
