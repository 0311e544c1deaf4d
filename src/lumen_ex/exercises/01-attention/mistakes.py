"""Known wrong versions of exercise 1, computed in float64 on the same inputs as the reference.

When a learner's values differ from the reference, the harness checks them against each variant
here and names the first one that matches: the learner then reads the mistake, not just a number.
``CATALOGUE`` lists every mistake this suite can name, the value variants below and the ones named
from a shape, a dtype, a gradient or a property check, by the id a diagnosis carries.
tests/e2e/test_variants.py checks that on the hidden tests' own inputs every variant differs from the
reference and from every other variant by far more than the tolerance.
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant


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


def _scale_after_softmax(q, k, v, mask=None):
    """The softmax of the unscaled scores, multiplied by 1/sqrt(d_k) afterwards: rows sum to 1/sqrt(d_k)."""
    _, weights = _attend(q, k, v, mask, scale=1.0)                  # (..., L_q, L_k), rows sum to 1
    weights = weights / math.sqrt(q.size(-1))                       # (..., L_q, L_k), rows sum to 1/sqrt(d_k)
    return weights @ v, weights                                     # (..., L_q, d_v), (..., L_q, L_k)


def _scores_as_weights(q, k, v, mask=None):
    """The correct output, but the (scaled, masked) scores returned in place of the weights."""
    out, _ = _attend(q, k, v, mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return out, scores


def _naive_exp(q, k, v, mask, dtype):
    """exp(scores) / sum(exp(scores)) without subtracting the row maximum, computed in ``dtype`` (the
    learner's) from the inputs as the learner received them: exp overflows to inf above ~88.7 in
    float32 (~11 in float16), and inf / inf is NaN."""
    qd, kd, vd = (t.to(dtype) for t in (q, k, v))
    scores = qd @ kd.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores)
    weights = e / e.sum(dim=-1, keepdim=True)
    return (weights @ vd).to(torch.float64), weights.to(torch.float64)


def output_variants(q, k, v, mask=None, *, which: int = 0, dtype: torch.dtype | None = None) -> list[Variant]:
    """Wrong answers for the output (which=0) or the weights (which=1), most common first.

    ``dtype``: the dtype the learner computed in; with it, the softmax-overflow variant is included
    when a naive exp overflows on these inputs in that dtype.
    """
    d_k, d_v = q.size(-1), v.size(-1)
    cands: list[tuple[str, str, str, tuple]] = [
        ("no-scale", "your {what} {equals} attention without the 1/sqrt(d_k) scale",
         "divide the scores by math.sqrt(d_k)", _attend(q, k, v, mask, scale=1.0)),
        ("scale-1/d_k", "your {what} {equals} attention scaled by 1/d_k",
         "the scale is 1/sqrt(d_k), a square root", _attend(q, k, v, mask, scale=1 / d_k)),
        ("scale-sqrt(d_k)", "your {what} {equals} attention with the scores multiplied by sqrt(d_k)",
         "divide by it instead", _attend(q, k, v, mask, scale=math.sqrt(d_k))),
        ("scale-1/sqrt(d_v)", "your {what} {equals} attention scaled by 1/sqrt(d_v)",
         "use the key width d_k = q.size(-1), not the value width", _attend(q, k, v, mask, scale=1 / math.sqrt(d_v))),
        ("scale-after-softmax", "your {what} {equals} attention scaled by 1/sqrt(d_k) after the softmax, so each "
         "row of weights sums to 1/sqrt(d_k), not 1", "scale the scores before the softmax: "
         "softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k))", _scale_after_softmax(q, k, v, mask)),
        ("softmax-over-queries", "your {what} {equals} a softmax over the queries (dim=-2)",
         "normalise over the keys with dim=-1", _attend(q, k, v, mask, dim=-2)),
        ("weights-are-scores", "your {what} {equals} the scaled scores q k^T / sqrt(d_k), not the softmax of them",
         "return the weights after the softmax", _scores_as_weights(q, k, v, mask)),
    ]
    if q.dim() >= 4:
        cands.append(("softmax-over-heads", "your {what} {equals} a softmax over the heads axis",
                      "use dim=-1, the keys", _attend(q, k, v, mask, dim=-3)))
    if mask is not None:
        cands += [
            ("mask-inverted", "your {what} {equals} attention with the mask inverted",
             "True means 'may attend', so fill the False positions with -inf (masked_fill(~mask, ...))",
             _attend(q, k, v, ~mask)),
            ("mask-ignored", "your {what} {equals} attention with no mask at all",
             "apply the mask to the scores before the softmax", _attend(q, k, v, None)),
            ("mask-after-softmax", "your {what} {equals} attention whose weights were zeroed after the softmax",
             "mask the scores with -inf before the softmax so each row still sums to 1",
             _attend(q, k, v, mask, how="zero_after")),
            ("mask-added", "your {what} {equals} attention with the bool mask added to the scores",
             "a masked key must get -inf, not 0 or 1", _attend(q, k, v, mask, how="add")),
            ("mask-multiplied", "your {what} {equals} attention with the scores multiplied by the mask",
             "a masked score of 0 still gets weight; use -inf", _attend(q, k, v, mask, how="multiply")),
        ]
    if dtype is not None and dtype != torch.float64:
        naive = _naive_exp(q, k, v, mask, dtype)
        if not bool(torch.isfinite(naive[which]).all()):
            cands.append(("softmax-overflow", "your {what} has NaN/inf exactly where exp(scores) / sum(exp(scores)) "
                          f"overflows in {str(dtype).removeprefix('torch.')}",
                          "subtract each row's maximum score before exp (torch.softmax does it for you)", naive))
    what, equals = (("output", "equals"), ("weights", "equal"))[which]
    # A softmax over the queries or the heads is NaN everywhere with a key-padding mask (its hidden
    # keys are hidden from every query and head): the two are then one answer, and name nothing.
    return [Variant(name, sentence.format(what=what, equals=equals), pair[which], fix) for name, sentence, fix, pair in cands
            if not (name in NAN_NAMES_NOTHING and bool(torch.isnan(pair[which]).all()))]


# Softmaxes over another axis than the keys: with a key-padding mask both are NaN everywhere, alike.
NAN_NAMES_NOTHING = ("softmax-over-queries", "softmax-over-heads")


def causal_variants(L_q: int, L_k: int) -> list[Variant]:
    """Wrong causal masks, as bool tensors."""
    ones = torch.ones(L_q, L_k, dtype=torch.bool)
    offset = L_k - L_q
    return [
        Variant("causal-top-left", "your mask is aligned top-left (query i sees keys 0..i)",
                ones.tril(), "align it bottom-right: query i sits at position L_k - L_q + i"),
        Variant("causal-no-diagonal", "your mask hides the diagonal", ones.tril(offset - 1),
                "a token may attend to itself"),
        Variant("causal-future-visible", "your mask lets each query see the future (it is upper-triangular)",
                ones.triu(offset), "True must be on and below the diagonal"),
        Variant("causal-inverted", "your mask is inverted", ~ones.tril(offset), "True means 'may attend'"),
    ]


# Every mistake this suite names, by id. Value ids come from the variants above (matched on values);
# the others from the check that catches them.
CATALOGUE = {
    "no-scale": "no 1/sqrt(d_k) scale",
    "scale-1/d_k": "scores divided by d_k instead of sqrt(d_k)",
    "scale-sqrt(d_k)": "scores multiplied by sqrt(d_k)",
    "scale-1/sqrt(d_v)": "scaled by the value width d_v",
    "softmax-over-queries": "softmax over the queries (dim=-2)",
    "scale-after-softmax": "the 1/sqrt(d_k) scale applied after the softmax (rows sum to 1/sqrt(d_k))",
    "causal-device-ignored": "causal_mask ignores its device argument",
    "causal-empty-rows-dropped": "causal_mask drops the rows of queries that see no key (L_q > L_k)",
    "softmax-over-heads": "softmax over the heads axis",
    "weights-are-scores": "the raw scores returned as the weights",
    "mask-inverted": "mask inverted",
    "mask-ignored": "mask ignored",
    "mask-after-softmax": "mask applied after the softmax by zeroing weights",
    "mask-added": "bool mask added to the scores",
    "mask-multiplied": "scores multiplied by the mask",
    "softmax-overflow": "exp without subtracting the row maximum: overflow on large scores",
    "causal-top-left": "causal mask aligned top-left when L_q != L_k",
    "causal-no-diagonal": "causal mask excludes the diagonal",
    "causal-future-visible": "causal mask shows the future",
    "causal-inverted": "causal mask inverted",
    **GENERIC_MISCONCEPTIONS,
    "fixed-axes-transposed": "axes other than the last two transposed (k.T on a batched tensor): an exception",
    "numpy-round-trip": "a NumPy round trip (no bfloat16, no gradient): an exception",
    "inputs-modified": "an input modified in place",
    "masked-key-weight": "a masked key gets non-zero weight",
    "weight-rows-not-normalised": "weight rows do not sum to 1",
    "future-leak": "information leaks from future keys or values",
}
