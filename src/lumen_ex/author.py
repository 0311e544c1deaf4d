"""The one module a hidden suite, a reference or a list of known mistakes imports from lumen-ex.

Everything an exercise author needs, under stable names (docs/authoring.md walks through one pack):

- ``exercise(__file__)``: the exercise's own files as modules: ``exercise(__file__).reference``,
  ``.mistakes`` (the folder's reference.py and mistakes.py, imported by path, core/exercise_modules.py);
  ``sibling(__file__, "suite/cases")`` for a helper module of the suite;
- inputs: ``inputs`` (seeded generators, ``inputs.generator(seed)``, ``inputs.randn``; attention and
  decoding cases);
- expectations: ``Expected``, ``expect.tensors``, ``expect.returns``, ``expect.signature``,
  ``expect.gradients``, ``fail`` (a structured failure: kind, summary, expected/got, hint,
  misconception), ``Tolerance``;
- known mistakes: ``Variant`` (a wrong answer computed in float64, named and explained),
  ``GENERIC_MISCONCEPTIONS``, ``MATCH_TOLERANCE_FLOAT64`` (how close a float64 answer must be to a
  variant to be named as it), ``TOLERANCES`` (per dtype);
- pictures: ``pictures`` (the heatmap attached to a value failure);
- properties: ``LinearMemory`` (the proof that a call's memory grows linearly in its length, measured
  by the harness: exercises 5 and 9, src/lumen_ex/graders/support/memory_proof.py);
- the learner's code through the ``submission`` fixture (``submission.call`` returns a ``CallResult``;
  ``meta`` describes a tensor without copying it; ``Held(value)`` stands for a large argument that
  every call repeats, such as a model's weights: each worker is sent it once, and each call gets a
  copy of its own); ``LearnerError`` and ``WorkerFailure`` are what a call
  raises when the learner's code raises, dies, hangs or breaks the protocol; ``note(text)`` leaves a
  note on a passing test's result (float32 rounding, how memory was measured).

The fixtures a suite's tests take (``submission``, ``seed``, ``device``, ``cuda``) and the
``@pytest.mark.group("name")`` marker that gives a test its scoring group come from the harness's
pytest plugin (src/lumen_ex/harness/plugin.py).

Example, a whole test as exercise 1's suite writes it (the test's docstring is its name for the learner)::

    import pytest
    import torch
    from lumen_ex.author import Expected, exercise, expect, inputs

    ref = exercise(__file__).reference

    @pytest.mark.group("values")
    def test_values(submission, seed, device):
        "values match the reference (float32)"
        case = inputs.attention_case(seed)                        # seeded float64 q, k, v; no mask
        result = submission.call("scaled_dot_product_attention", case.cast(torch.float32), device=device)
        out, _ = expect.returns(result.value, ("output", "weights"), "scaled_dot_product_attention")
        exp_out, _ = ref.scaled_dot_product_attention(case.q, case.k, case.v)      # float64, on the CPU
        expect.tensors([Expected(out, exp_out, "output", case.axes("L_q", "d_v"))],
                       sizes=case.sizes, dtype=torch.float32, device=device)
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from lumen_ex.core.exercise_modules import exercise_folder, load, sibling
from lumen_ex.core.results import CheckFailed, note
from lumen_ex.feedback.pictures import heatmap as pictures
from lumen_ex.graders.support import expect, inputs
from lumen_ex.graders.support.expect import (
    GENERIC_MISCONCEPTIONS,
    MATCH_TOLERANCE_FLOAT64,
    TOLERANCES,
    Expected,
    Tolerance,
    Variant,
    fail,
)
from lumen_ex.graders.support.memory_proof import LinearMemory
from lumen_ex.harness import kernels
from lumen_ex.harness.client import LearnerError, WorkerFailure
from lumen_ex.harness.module_calls import ModuleCall, ParameterInfo
from lumen_ex.harness.proxy import CallResult, meta
from lumen_ex.sandbox.inside.held import Held


class Exercise:
    """An exercise folder's Python files, as attributes: ``.reference``, ``.mistakes``, ``.folder``.

    Example::

        here = exercise(__file__)
        ref, mistakes = here.reference, here.mistakes        # reference.py and mistakes.py, imported by path"""

    def __init__(self, folder: Path):
        self.folder = folder

    def __getattr__(self, name: str) -> ModuleType:
        if name.startswith("_"):
            raise AttributeError(name)
        return load(self.folder, name)


def exercise(file: str | Path, other: str | None = None) -> Exercise:
    """The exercise that ``file`` (a suite's or mistakes.py's ``__file__``) belongs to; with ``other``
    (a folder name such as ``"02-kv-cache"``), that exercise of the same pack instead (exercise 3's
    suite continues exercise 2's decode_step with its reference).

    Example::

        ref = exercise(__file__).reference
        ref_kv = exercise(__file__, "02-kv-cache").reference     # exercise 3's suite, for the decode steps"""
    folder = exercise_folder(file)
    if other is not None:
        if not other or "/" in other or other.startswith("."):
            raise ValueError(f"not an exercise folder name: {other!r}")
        folder = exercise_folder(folder.parent / other / "exercise.toml")
    return Exercise(folder)


__all__ = ["CallResult", "CheckFailed", "Exercise", "Expected", "GENERIC_MISCONCEPTIONS", "Held", "LearnerError", "LinearMemory",
           "MATCH_TOLERANCE_FLOAT64", "ModuleCall", "ParameterInfo", "TOLERANCES", "Tolerance", "Variant",
           "WorkerFailure", "exercise", "expect", "fail", "inputs", "kernels", "meta", "note", "pictures", "sibling"]
