"""How a named mistake reads (src/lumen_ex/graders/support/mistakes.py evidence): the sentence, how
closely this test's values equal it, then the fix, never the evidence after the fix."""

from __future__ import annotations

import torch

from lumen_ex.graders.support.mistakes import Variant, bound, evidence

ZERO = torch.zeros(1)


def test_the_evidence_sits_between_the_sentence_and_the_fix():
    v = Variant("wrong-axis", "your output is the softmax over the first axis", ZERO, fix="normalise over dim=-1")
    assert evidence(v, 3e-8) == ("your output is the softmax over the first axis to 1e-7 on this test's input: "
                                 "normalise over dim=-1")


def test_a_sentence_that_carries_its_fix_after_a_colon_is_read_as_both():
    v = Variant("wrong-axis", "your output is the softmax over the first axis: normalise over dim=-1", ZERO)
    assert evidence(v, 3e-8) == ("your output is the softmax over the first axis to 1e-7 on this test's input: "
                                 "normalise over dim=-1")


def test_no_fix_and_an_exact_match():
    assert evidence(Variant("x", "your output equals the scores", ZERO), 0.0) == \
        "your output equals the scores exactly on this test's input"
    assert bound(1e-9) == "to 1e-9" and bound(2e-9) == "to 1e-8"


def test_a_clipped_sentence_ends_at_a_word_with_an_ellipsis():
    from lumen_ex.core.untrusted import clip

    text = "a new tensor made without the inputs' dtype: keep the caches in the inputs' dtype"
    assert clip(text, 200) == text
    cut = clip(text, 60)
    assert len(cut) <= 60 and cut.endswith("\u2026") and cut[:-1] in text and text[len(cut) - 1] == " "
    assert clip("x" * 100, 10) == "x" * 9 + "\u2026"
