"""Known wrong versions of exercise 4 (RoPE), computed in float64 on the same inputs as the reference.

When a learner's output differs from the reference, the harness compares it with each variant here
and names the first one it equals: the learner then reads the mistake, not just a number. Every
variant is the rotation with exactly one thing done differently. ``CATALOGUE`` lists every mistake
the suite can name: the value variants below and the ones named from an exception, a shape, a dtype,
a gradient or a property check, by the id a diagnosis carries.

On the hidden inputs every pair has a norm of at least 0.5 and every axis a distinct size, so each
variant is far (in tolerances) from the reference and from every other variant wherever it differs
at all; a variant that equals the reference on some input (positions ignored when the positions
are 0 .. L-1) is no candidate there (expect.candidates).
"""

from __future__ import annotations

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant

DEFAULT_BASE = 10000.0


def angles(positions: torch.Tensor, d: int, base: float, exponent=None) -> torch.Tensor:
    """positions (L,) times the frequencies base ** (-exponent(i)) of the d/2 pairs: (L, d/2), float64.
    ``exponent(i, d)`` defaults to RoFormer's 2i / d."""
    i = torch.arange(d // 2, dtype=torch.float64)                             # (d/2,)
    e = 2 * i / d if exponent is None else exponent(i, d)                      # (d/2,)
    return positions.to("cpu", torch.float64)[:, None] * float(base) ** (-e)[None, :]   # (L, d/2)


def rotate_pairs(x: torch.Tensor, theta: torch.Tensor, *, sin_sign: float = 1.0, swap: bool = False,
                 layout: str = "adjacent") -> torch.Tensor:
    """Rotate pairs of x (..., L, d) by theta (L, d/2), in float64.

    layout: "adjacent" (x[2i], x[2i+1]: the exercise), "half" (x[i], x[i + d/2]: rotate_half) or
    "concat" (adjacent pairs, but the results laid out as [all first components, all second ones]).
    sin_sign=-1 rotates the other way; swap=True exchanges cos and sin.
    """
    x = x.to(torch.float64)
    d = x.shape[-1]
    cos, sin = theta.cos(), theta.sin() * sin_sign                             # (L, d/2)
    if swap:
        cos, sin = sin, cos
    if layout == "half":
        a, b = x[..., : d // 2], x[..., d // 2:]                               # (..., L, d/2)
    else:
        a, b = x[..., 0::2], x[..., 1::2]                                      # (..., L, d/2)
    first, second = a * cos - b * sin, a * sin + b * cos                       # (..., L, d/2)
    if layout in ("half", "concat"):
        return torch.cat([first, second], dim=-1)                              # (..., L, d)
    return torch.stack([first, second], dim=-1).flatten(-2)                    # (..., L, d)


def _cat_table(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Adjacent pairs rotated with an angle table laid out for rotate_half, cat([theta, theta]):
    element k uses the angle of pair k mod d/2, so the two halves of a pair turn by different angles."""
    x = x.to(torch.float64)
    emb = torch.cat([theta, theta], dim=-1)                                    # (L, d)
    rot = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)       # (..., L, d)
    return x * emb.cos() + rot * emb.sin()                                     # (..., L, d)


def rope_variants(x: torch.Tensor, positions: torch.Tensor, base: float = DEFAULT_BASE) -> list[Variant]:
    """Wrong answers for the output on x (..., L, d) (float64) and positions (L,), most common first."""
    d, L = x.shape[-1], x.shape[-2]
    theta = angles(positions, d, base)                                         # (L, d/2)
    with_exp = lambda e: rotate_pairs(x, angles(positions, d, base, e))
    cands = [
        Variant("rotate-half", "your output equals the rotate_half convention: pairs (x[i], x[i + d/2]), as in "
                "GPT-NeoX and llama's Hugging Face code",
                rotate_pairs(x, theta, layout="half"),
                "this exercise uses RoFormer's adjacent pairs (x[..., 2i], x[..., 2i+1]): take x[..., 0::2] and "
                "x[..., 1::2], and interleave the results back"),
        Variant("rotation-reversed", "your output equals each pair rotated the other way (the sign of sin flipped)",
                rotate_pairs(x, theta, sin_sign=-1.0),
                "out[2i] = x[2i] cos - x[2i+1] sin and out[2i+1] = x[2i] sin + x[2i+1] cos"),
        Variant("sin-cos-swapped", "your output equals the rotation with cos and sin exchanged",
                rotate_pairs(x, theta, swap=True),
                "cos multiplies a component itself, sin the other one: out[2i] = x[2i] cos - x[2i+1] sin"),
        Variant("halves-concatenated", "your output holds the right numbers in the wrong places: all the rotated "
                "first components, then all the second ones (torch.cat or a stack on dim=-2)",
                rotate_pairs(x, theta, layout="concat"),
                "interleave them back, torch.stack([first, second], dim=-1).flatten(-2), so that pair i lands in "
                "out[..., 2i] and out[..., 2i+1]"),
        Variant("angle-table-not-interleaved", "your output equals adjacent pairs rotated with an angle table laid out "
                "as torch.cat([angles, angles], -1) (the rotate_half layout): the two numbers of a pair turn by "
                "different angles", _cat_table(x, theta),
                "for adjacent pairs, repeat each angle twice in place, angles.repeat_interleave(2, dim=-1), or "
                "work on the (L, d/2) table with x[..., 0::2] and x[..., 1::2]"),
        Variant("exponent-i-over-d", "your output equals frequencies base ** (-i / d), half the right exponent",
                with_exp(lambda i, d: i / d),
                "pair i turns at base ** (-2 * i / d), i = 0 .. d/2 - 1 (the exponents are torch.arange(0, d, 2) / d)"),
        Variant("exponent-doubled", "your output equals frequencies base ** (-4i / d): the 2 is counted twice "
                "(torch.arange(0, d, 2) already steps by 2, or 2i was divided by d/2)",
                with_exp(lambda i, d: 4 * i / d),
                "pair i's exponent is 2i / d: torch.arange(0, d, 2) / d, or 2 * torch.arange(d // 2) / d"),
        Variant("exponent-sign", "your output equals frequencies base ** (+2i / d), growing with i",
                with_exp(lambda i, d: -2 * i / d),
                "the frequencies shrink: base ** (-2i / d), i.e. 1 / base ** (2i / d)"),
        Variant("exponent-over-d-minus-1", "your output equals frequencies base ** (-2i / (d - 1))",
                with_exp(lambda i, d: 2 * i / (d - 1)), "divide by d, the full width: base ** (-2i / d)"),
        Variant("exponent-linspace", "your output equals exponents spread from 0 to exactly 1, 2i / (d - 2) "
                "(torch.linspace(0, 1, d // 2)), so the last pair turns at 1 / base",
                with_exp(lambda i, d: 2 * i / (d - 2)),
                "the exponents are 2i / d for i = 0 .. d/2 - 1 and stop short of 1: torch.arange(0, d, 2) / d"),
    ]
    if L == 1:
        cands.append(Variant("positions-ignored", "your output equals the new token rotated as if it sat at position 0 "
                             "(x unchanged), not at the position it was given",
                             rotate_pairs(x, angles(torch.zeros(1), d, base)),
                             "when decoding, the new token sits at position T, the cache length, and positions says so "
                             "(positions = [T]): rotate by the positions you are given, never torch.arange(L)"))
    else:
        cands.append(Variant("positions-ignored", "your output equals RoPE at positions 0 .. L-1 (torch.arange(L), or a "
                             "table sliced [:L]), not at the positions given",
                             rotate_pairs(x, angles(torch.arange(L), d, base)),
                             "rotate token j by positions[j]: positions may start anywhere, be unsorted and have gaps"))
    if float(base) != DEFAULT_BASE:
        cands.append(Variant("base-ignored", f"your output equals RoPE with base 10000, not the base={float(base):g} "
                             "you were given", rotate_pairs(x, angles(positions, d, DEFAULT_BASE)),
                             "use the base argument in the frequencies: base ** (-2i / d)"))
    return cands


# Every mistake this suite names, by id. Value ids come from the variants above (matched on values);
# the others from the check that catches them (src/lumen_ex/exercises/04-rope/suite/test_rope.py).
CATALOGUE = {
    "rotate-half": "the rotate_half convention: pairs (x[i], x[i + d/2]) instead of adjacent pairs",
    "rotation-reversed": "pairs rotated the other way (the sign of sin flipped)",
    "sin-cos-swapped": "cos and sin exchanged",
    "halves-concatenated": "rotated pairs laid out as [first components, second components] instead of interleaved",
    "angle-table-not-interleaved": "adjacent pairs with an angle table laid out as cat([angles, angles])",
    "exponent-i-over-d": "frequencies base ** (-i/d) instead of base ** (-2i/d)",
    "exponent-doubled": "frequencies base ** (-4i/d): the 2 counted twice",
    "exponent-sign": "frequencies base ** (+2i/d): the exponent's sign flipped",
    "exponent-over-d-minus-1": "frequencies base ** (-2i/(d-1))",
    "exponent-linspace": "exponents torch.linspace(0, 1, d/2): 2i/(d-2)",
    "positions-ignored": "positions ignored: torch.arange(L) (or a table sliced [:L]); in decoding, the new token at position 0",
    "base-ignored": "the base argument ignored (10000 hard-coded)",
    "angles-in-low-precision": "angles computed in float16 / bfloat16: positions * frequency rounded to whole radians",
    # named from an exception (NAMED_EXCEPTIONS) or a shape (shape_hints)
    "fixed-rank": "code written for one number of leading axes (B, H, L, d = x.shape): an exception",
    "table-too-short": "a cos/sin table precomputed up to a maximum length, indexed past its end: an exception",
    "angle-table-shape": "an angle table that is not (L, d/2): positions times frequencies without an outer product",
    "complex-bfloat16": "torch.view_as_complex on bfloat16, which has no complex type: an exception",
    "complex-view-strides": "torch.view_as_complex on a non-contiguous view: an exception",
    "pairs-not-flattened": "the output returned as (..., L, d/2, 2) pairs, not flattened back to (..., L, d)",
    # the generic ones this suite reaches (it takes no bool, returns one tensor, forbids no API)
    **{k: GENERIC_MISCONCEPTIONS[k] for k in ("axes-transposed", "dtype-upcast", "float32-not-cast-back",
                                             "new-tensor-dtype", "new-tensor-device", "view-not-reshape",
                                             "no-gradient")},
    "inputs-modified": "x modified in place",
}
