"""Known wrong versions of exercise 1, computed in float64 on the same inputs as the reference.

When a learner's values differ from the reference, the harness checks them against each variant
here and names the first one that matches: the learner then reads the mistake, not just a number.
"""

from __future__ import annotations

import math

import torch

from lumen_ex.graders.support.expect import Variant


def _attend(q, k, v, mask=None, *, scale=None, dim=-1, how="fill"):
    scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.size(-1)) if scale is None else scale)
    if mask is not None and how == "fill":
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None and how == "add":
        scores = scores + mask.to(scores.dtype)
    elif mask is not None and how == "multiply":
        scores = scores * mask.to(scores.dtype)
    weights = torch.softmax(scores, dim=dim)
    if mask is not None and how == "zero_after":
        weights = weights * mask.to(weights.dtype)
    return weights @ v, weights


def output_variants(q, k, v, mask=None, *, which: int = 0) -> list[Variant]:
    """Wrong answers for the output (which=0) or the weights (which=1), most common first."""
    d_k, d_v = q.size(-1), v.size(-1)
    cands: list[tuple[str, str, tuple]] = [
        ("no-scale", "your result equals attention without the 1/sqrt(d_k) scale: divide the scores by math.sqrt(d_k)",
         _attend(q, k, v, mask, scale=1.0)),
        ("scale-1/d_k", "your result equals attention scaled by 1/d_k: the scale is 1/sqrt(d_k), a square root",
         _attend(q, k, v, mask, scale=1 / d_k)),
        ("scale-sqrt(d_k)", "your result equals attention with the scores multiplied by sqrt(d_k): divide instead",
         _attend(q, k, v, mask, scale=math.sqrt(d_k))),
        ("scale-1/sqrt(d_v)", "your result equals attention scaled by 1/sqrt(d_v): use the key width d_k = q.size(-1), not the value width",
         _attend(q, k, v, mask, scale=1 / math.sqrt(d_v))),
        ("softmax-over-queries", "your result equals a softmax over the queries (dim=-2): normalise over the keys with dim=-1",
         _attend(q, k, v, mask, dim=-2)),
    ]
    if q.dim() >= 4:
        cands.append(("softmax-over-heads", "your result equals a softmax over the heads axis: use dim=-1, the keys",
                      _attend(q, k, v, mask, dim=-3)))
    if mask is not None:
        cands += [
            ("mask-inverted", "your result equals attention with the mask inverted: True means 'may attend', so fill the False positions with -inf (masked_fill(~mask, ...))",
             _attend(q, k, v, ~mask)),
            ("mask-ignored", "your result equals attention with no mask at all: apply the mask to the scores before the softmax",
             _attend(q, k, v, None)),
            ("mask-after-softmax", "your result equals attention whose weights were zeroed after the softmax: mask the scores with -inf before the softmax so each row still sums to 1",
             _attend(q, k, v, mask, how="zero_after")),
            ("mask-added", "your result equals attention with the bool mask added to the scores: a masked key must get -inf, not 0 or 1",
             _attend(q, k, v, mask, how="add")),
            ("mask-multiplied", "your result equals attention with the scores multiplied by the mask: a masked score of 0 still gets weight; use -inf",
             _attend(q, k, v, mask, how="multiply")),
        ]
    out = []
    for name, sentence, pair in cands:
        value = pair[which]
        out.append(Variant(name, sentence, value))
    return out


def causal_variants(L_q: int, L_k: int) -> list[Variant]:
    """Wrong causal masks, as bool tensors."""
    ones = torch.ones(L_q, L_k, dtype=torch.bool)
    offset = L_k - L_q
    return [
        Variant("causal-top-left", "your mask is aligned top-left (query i sees keys 0..i): align it bottom-right, query i sits at position L_k - L_q + i",
                ones.tril()),
        Variant("causal-no-diagonal", "your mask hides the diagonal: a token may attend to itself",
                ones.tril(offset - 1)),
        Variant("causal-future-visible", "your mask lets each query see the future (it is upper-triangular): True must be on and below the diagonal",
                ones.triu(offset)),
        Variant("causal-inverted", "your mask is inverted: True means 'may attend'",
                ~ones.tril(offset)),
    ]
