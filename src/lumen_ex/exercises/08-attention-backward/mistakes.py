"""Known wrong versions of exercise 8, computed in float64 on the same inputs as the reference.

When a learner's gradients differ from the reference, the suite compares them with each variant
here and names the first one that matches. Every variant is the backward pass of :func:`backward`
with exactly one knob turned: the softmax's row term, a scale, a transpose, or the causal mask.
Two of them (a missing transpose of P or of dS) only run when L_q == L_k; with fewer queries than
keys the learner's matmul raises, and the suite names the same mistake from the exception's line.
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant

DQ, DK, DV = 0, 1, 2
NAMES = ("dq", "dk", "dv")


def _future(L_q: int, L_k: int, align: str) -> torch.Tensor:
    """(L_q, L_k) bool, True where a key is in a query's future: bottom-right (query i at position
    L_k - L_q + i) or top-left (query i at position i)."""
    offset = L_k - L_q if align == "bottom-right" else 0
    return torch.arange(L_k)[None, :] > torch.arange(L_q)[:, None] + offset


def backward(q, k, v, d_out, causal=False, *, align="bottom-right", row_term="keys", dq_scales=1, dk_scales=1,
             dv_transposed=True, dk_transposed=True, mask_in_backward=True):
    """(dq, dk, dv) in float64, with one knob turned; a gradient is None when that knob cannot run on
    these shapes (a product without its transpose needs L_q == L_k).

    align: "bottom-right", "top-left" or "none" (the causal flag ignored). row_term: "keys" (right),
    "dropped" (dS = P * dP) or "queries" (the row sum taken over dim=-2). dq_scales, dk_scales: how many
    times 1/sqrt(d_k) multiplies dq and dk (1 is right). dv_transposed=False: dv = P @ d_out.
    dk_transposed=False: dk = dS @ q. mask_in_backward=False: the backward's P recomputed as
    exp(S - lse) with lse from the masked scores but S unmasked (FlashAttention's recomputation
    without its mask).
    """
    L_q, L_k = q.size(-2), k.size(-2)
    scale = 1 / math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1) * scale                             # (..., L_q, L_k)
    masked = scores
    if causal and align != "none":
        masked = scores.masked_fill(_future(L_q, L_k, align), float("-inf"))
    p = torch.softmax(masked, dim=-1)                                    # (..., L_q, L_k)
    if not mask_in_backward:
        p = torch.exp(scores - torch.logsumexp(masked, dim=-1, keepdim=True))   # future keys weigh > 0
    square = L_q == L_k
    dv = p.transpose(-2, -1) @ d_out if dv_transposed else (p @ d_out if square else None)   # (..., L_k, d_v)
    dp = d_out @ v.transpose(-2, -1)                                     # (..., L_q, L_k)
    if row_term == "dropped":
        ds = p * dp
    else:
        ds = p * (dp - (dp * p).sum(dim=-1 if row_term == "keys" else -2, keepdim=True))   # (..., L_q, L_k)
    dq = ds @ k * scale ** dq_scales                                     # (..., L_q, d_k)
    dk = (ds.transpose(-2, -1) @ q if dk_transposed else (ds @ q if square else None))      # (..., L_k, d_k)
    return dq, None if dk is None else dk * scale ** dk_scales, dv


# (id, sentence with {what}, fix, knobs, the gradients it changes). The softmax's Jacobian first: it is
# what this exercise is about.
CANDIDATES = [
    ("softmax-row-term-dropped", "your {what} equals the gradient with dS = P * dP: the softmax's row term "
     "rowsum(dP * P) is missing", "every weight of a row depends on every score of that row through the "
     "softmax's normaliser: dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))", dict(row_term="dropped"),
     (DQ, DK)),
    ("rowsum-wrong-axis", "your {what} equals the gradient whose row term rowsum(dP * P) was summed over the "
     "queries (dim=-2) instead of the keys", "the row term is one number per query: "
     "(dP * P).sum(dim=-1, keepdim=True)", dict(row_term="queries"), (DQ, DK)),
    ("backward-scale-missing", "your {what} equals the gradient without its factor 1/sqrt(d_k)",
     "the scores are q @ k^T / sqrt(d_k), so the chain rule brings 1/sqrt(d_k) into both dq = dS @ k / sqrt(d_k) "
     "and dk = dS^T @ q / sqrt(d_k)", None, (DQ, DK)),
    ("backward-scale-twice", "your {what} equals the gradient with 1/sqrt(d_k) applied twice (a factor 1/d_k)",
     "apply it once: if q (or the scores) were already scaled, the factor is inside already", None, (DQ, DK)),
    ("dv-no-transpose", "your dv equals P @ d_out: P is missing its transpose",
     "dv = P.transpose(-2, -1) @ d_out: key j collects the d_out of every query that read it, weighted by P[i, j]",
     dict(dv_transposed=False), (DV,)),
    ("dk-no-transpose", "your dk equals dS @ q / sqrt(d_k): dS is missing its transpose",
     "dk = dS.transpose(-2, -1) @ q / sqrt(d_k): key j collects dS[i, j] * q[i] over the queries",
     dict(dk_transposed=False), (DK,)),
    ("causal-ignored", "your {what} equals the gradient of attention without the causal mask",
     "with causal=True, fill the scores of future keys with -inf before the softmax, as in exercise 1",
     dict(align="none"), (DQ, DK, DV)),
    ("causal-top-left", "your {what} equals the gradient with a causal mask aligned top-left (query i sees keys 0..i)",
     "align it bottom-right, as in exercise 1: query i sits at position L_k - L_q + i", dict(align="top-left"),
     (DQ, DK, DV)),
    ("backward-mask-missing", "your {what} equals the gradient in which P was recomputed as exp(S - lse) from "
     "unmasked scores: future keys get weight in the backward", "mask the scores in the backward too (or reuse "
     "the masked P): a future key's weight, and so its dS, must be exactly 0", dict(mask_in_backward=False),
     (DQ, DK, DV)),
]


# The mistakes of the causal mask: without causal=True they are the reference itself.
CAUSAL_ONLY = ("causal-ignored", "causal-top-left", "backward-mask-missing")


def grad_variants(q, k, v, d_out, causal=False, *, which: int = DQ) -> list[Variant]:
    """Wrong answers for dq (which=0), dk (1) or dv (2), most telling first."""
    what = NAMES[which]
    found = []
    for name, sentence, fix, knobs, changes in CANDIDATES:
        if which not in changes or (name in CAUSAL_ONLY and not causal):
            continue
        if knobs is None:           # the scale knobs turn on the gradient being checked
            n = 0 if name == "backward-scale-missing" else 2
            knobs = {"dq_scales": n} if which == DQ else {"dk_scales": n}
        value = backward(q, k, v, d_out, causal, **knobs)[which]
        if value is not None:
            found.append(Variant(name, sentence.format(what=what), value, fix))
    return found


# Every mistake this suite names, by id, with the sentence shown to the learner. Value ids come from
# the variants above (matched on values, or on the line of the exception a missing transpose raises
# when L_q != L_k); the others from the check that catches them.
CATALOGUE: dict[str, str] = {
    "softmax-row-term-dropped": "dS = P * dP: the softmax Jacobian's row term rowsum(dP * P) dropped",
    "rowsum-wrong-axis": "the row term rowsum(dP * P) summed over the queries instead of the keys",
    "backward-scale-missing": "the 1/sqrt(d_k) factor missing from dq or dk",
    "backward-scale-twice": "the 1/sqrt(d_k) factor applied twice to dq or dk",
    "dv-no-transpose": "dv = P @ d_out instead of P^T @ d_out",
    "dk-no-transpose": "dk computed from dS @ q instead of dS^T @ q",
    "causal-ignored": "the causal flag ignored: the gradient of attention without the mask",
    "causal-top-left": "the causal mask aligned top-left when L_q < L_k",
    "backward-mask-missing": "the causal mask not applied in the backward (P recomputed from unmasked scores)",
    "inputs-modified": "an input modified in place",
    **GENERIC_MISCONCEPTIONS,
    "forbidden-api": "autograd (.backward(), torch.autograd.grad, torch.func) or a library attention function "
                     "used instead of writing the gradient by hand",
}
