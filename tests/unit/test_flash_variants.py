"""Exercise 5's known mistakes (src/lumen_ex/exercises/05-flash-attention/mistakes.py): the blockwise
loop that computes every variant at once agrees with the reference when no knob is turned, and each
variant computed beside the others equals the same variant computed alone (the settings' axis
leaks nothing from one into another)."""

from __future__ import annotations

import pytest
import torch

from lumen_ex.core import catalog, exercise_modules

ROOT = catalog.load(environ={}).find(5).root
mistakes = exercise_modules.load(ROOT, "mistakes")
reference = exercise_modules.load(ROOT, "reference")

# (batch axes, L_q, L_k): the suite's default sizes, a square case, a single query, whole blocks
SHAPES = [((2, 3), 20, 37), ((4,), 29, 29), ((2, 3), 1, 37), ((), 16, 32)]
BLOCKS = [1, 3, 8, 16, 100]
# Every knob flash_variants turns, one per setting, and the correct algorithm among them.
SETTINGS = [{}, {"align": "top-left"}, {"diagonal": "skip"}, {"diagonal": "unmasked"}, {"rescale_sum": False},
            {"rescale_out": False}, {"rescale_sum": False, "rescale_out": False}, {"normalise": False},
            {"drop_partial": True}, {"scale": 1.0}, {"scale": 0.125}, {"lse": "max"}, {"lse": "no-max"},
            {"lse": "base2"}]


def _inputs(seed: int, batch: tuple[int, ...], L_q: int, L_k: int):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, L_q, 8, generator=gen, dtype=torch.float64)      # (..., L_q, d_k)
    k = torch.randn(*batch, L_k, 8, generator=gen, dtype=torch.float64)      # (..., L_k, d_k)
    v = torch.randn(*batch, L_k, 6, generator=gen, dtype=torch.float64)      # (..., L_k, d_v)
    return q, k, v


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("batch,L_q,L_k", SHAPES, ids=[f"{L_q}x{L_k}" for _, L_q, L_k in SHAPES])
def test_no_knob_turned_is_the_reference(batch, L_q, L_k, causal):
    q, k, v = _inputs(1, batch, L_q, L_k)
    want_out, want_lse = reference.attention_with_lse(q, k, v, causal)
    for block_size in BLOCKS:
        out, lse = mistakes.blockwise(q, k, v, causal, block_size)
        assert _same(out, want_out) and _same(lse, want_lse), block_size


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("batch,L_q,L_k", SHAPES, ids=[f"{L_q}x{L_k}" for _, L_q, L_k in SHAPES])
def test_each_setting_computed_beside_the_others_equals_it_alone(batch, L_q, L_k, causal):
    q, k, v = _inputs(2, batch, L_q, L_k)
    settings = [{"causal": causal, **s} for s in SETTINGS] + [{"causal": not causal}]
    for block_size in BLOCKS:
        together = mistakes.blockwise_many(q, k, v, block_size, settings)
        for setting, (out, lse) in zip(settings, together):
            alone_out, alone_lse = mistakes.blockwise_many(q, k, v, block_size, [setting])[0]
            assert _same(out, alone_out) and _same(lse, alone_lse), (block_size, setting)


def test_the_variant_lists_share_their_loops_and_keep_their_order():
    q, k, v = _inputs(3, (2, 3), 20, 37)
    outputs, lses = mistakes.flash_variants(q, k, v, True, 8)
    names = [variant.name for variant in lses]
    assert [variant.name for variant in outputs] == [n for n in names if not n.startswith("lse-")]
    assert names[:3] == ["causal-top-left", "causal-diagonal-skipped", "causal-diagonal-unmasked"]
    assert names[-1] == "causal-ignored" and set(names) <= set(mistakes.CATALOGUE)
    alone = dict(zip(names, lses))["no-scale"]
    assert _same(alone.value, mistakes.blockwise(q, k, v, True, 8, scale=1.0)[1])
    assert all("output" in variant.sentence for variant in outputs)
