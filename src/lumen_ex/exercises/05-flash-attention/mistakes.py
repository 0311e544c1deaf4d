"""Known wrong versions of exercise 5, computed in float64 on the same inputs as the reference.

When a learner's output or lse differs from the reference, the harness compares it with each
variant here and names the first one that matches. Most mistakes of a blockwise online softmax
show only block by block (a running sum not rescaled when the maximum moves, a diagonal block
skipped, a last partial block dropped), so every variant is the same blockwise loop, in float64,
with the learner's own ``block_size`` and exactly one thing done differently (:func:`blockwise`).
The hidden inputs (L_q = 20, L_k = 37, block sizes that divide neither, unit-variance scores)
keep the variants apart from the reference and from each other.
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant

OUTPUT, LSE = 0, 1
LN2 = math.log(2.0)


def blockwise(q, k, v, causal=False, block_size=64, *, scale=None, rescale_sum=True, rescale_out=True,
              normalise=True, lse="natural", align="bottom-right", diagonal="mask", drop_partial=False):
    """The online softmax in float64 with one knob turned: (output (..., L_q, d_v), lse (..., L_q)).

    rescale_sum / rescale_out: multiply the running sum / the output accumulator by
    exp(old max - new max) when a block raises the maximum. normalise: divide the output by the
    running sum at the end. lse: "natural" (m + log l), "max" (m alone), "base2" (in log2 units,
    (m + log l) / ln 2), "no-max" (log l alone). align: where the causal diagonal sits,
    "bottom-right" (query i at position L_k - L_q + i) or "top-left" (query i at position i).
    diagonal: for the key blocks that cross the causal diagonal, "mask" them, "skip" them, or
    take them "unmasked". drop_partial: range(L // block_size) loops, which leave out the last
    partial block of queries (their rows stay 0) and of keys.

    Every query row runs the same loop over key blocks as in the learner's code, so the rows are
    computed together: a key block the row's query block would not visit counts as all -inf
    scores, which leaves that row's m, l and o exactly as they were.
    """
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    L_q, d_k, L_k = q.shape[-2], q.shape[-1], k.shape[-2]
    s_scale = 1 / math.sqrt(d_k) if scale is None else scale
    offset = L_k - L_q if align == "bottom-right" else 0
    q_end = (L_q // block_size) * block_size if drop_partial else L_q
    k_stop = (L_k // block_size) * block_size if drop_partial else L_k
    rows = torch.arange(L_q)                                                   # (L_q,)
    i0 = rows // block_size * block_size                                       # each row's query block
    i1 = torch.clamp(i0 + block_size, max=L_q)
    q_pos = rows + offset                                                      # (L_q,)
    qs = q * s_scale                                                           # (..., L_q, d_k)
    m = torch.full(q.shape[:-1], -math.inf, dtype=torch.float64)               # (..., L_q)
    row_sum = torch.zeros(q.shape[:-1], dtype=torch.float64)                   # (..., L_q)
    o = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=torch.float64)           # (..., L_q, d_v)
    for j0 in range(0, k_stop, block_size):
        j1 = min(j0 + block_size, L_k)
        visits = rows < q_end                                                  # (L_q,)
        hidden = torch.zeros(L_q, j1 - j0, dtype=torch.bool)                   # (L_q, b_k)
        if causal:
            visits &= j0 < torch.clamp(offset + i1, max=L_k)                   # the block's key loop reaches j0
            crosses = j1 - 1 > offset + i0                                     # (L_q,)
            if diagonal == "skip":
                visits &= ~crosses
            elif diagonal == "mask":
                hidden = crosses[:, None] & (torch.arange(j0, j1)[None, :] > q_pos[:, None])
        hidden = hidden | ~visits[:, None]
        s = (qs @ k[..., j0:j1, :].transpose(-2, -1)).masked_fill(hidden, -math.inf)   # (..., L_q, b_k)
        m_new = torch.maximum(m, s.amax(dim=-1))                               # (..., L_q)
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - shift[..., None])                                    # (..., L_q, b_k)
        alpha = torch.exp(m - shift)                                           # (..., L_q)
        row_sum = (row_sum * alpha if rescale_sum else row_sum) + p.sum(dim=-1)
        o = (o * alpha[..., None] if rescale_out else o) + p @ v[..., j0:j1, :]
        m = m_new
    kept = rows < q_end                                                        # dropped rows stay 0
    out = o / row_sum[..., None] if normalise else o
    natural = m + torch.log(row_sum)                                           # (..., L_q)
    lse_out = {"natural": natural, "max": m, "base2": natural / LN2, "no-max": torch.log(row_sum)}[lse]
    return (torch.where(kept[:, None], out, torch.zeros_like(out)),
            torch.where(kept, lse_out, torch.zeros_like(lse_out)))


def flash_variants(q, k, v, causal=False, block_size=64, *, which: int = OUTPUT) -> list[Variant]:
    """Wrong answers for the output (which=0) or the lse (which=1) on these inputs, most common first."""
    d_k, d_v = q.shape[-1], v.shape[-1]
    what = "output" if which == OUTPUT else "lse"
    cands = []
    if causal:
        cands += [
            ("causal-top-left", f"your {what} equals causal attention with the mask aligned top-left (query i at "
             "position i)", "align it bottom-right as in exercise 1: query i sits at position L_k - L_q + i, so it "
             "sees keys 0 .. L_k - L_q + i", dict(align="top-left")),
            ("causal-diagonal-skipped", f"your {what} equals causal attention that leaves out every key block "
             "crossing the diagonal", "a block that is only partly in the future must still be computed, with "
             "its future keys masked to -inf; skip only blocks entirely in the future", dict(diagonal="skip")),
            ("causal-diagonal-unmasked", f"your {what} equals causal attention that skips the future blocks but "
             "does not mask the block on the diagonal", "inside a block that crosses the diagonal, set the scores "
             "of keys after the query's position to -inf", dict(diagonal="unmasked")),
        ]
    cands += [
        ("running-sum-not-rescaled", f"your {what} equals the online softmax with the running sum never "
         "rescaled when the maximum grows", "when a block raises the maximum from m to m_new, multiply the sum "
         "by exp(m - m_new) before adding the block's exp(s - m_new).sum(-1)", dict(rescale_sum=False)),
        ("output-not-rescaled", f"your {what} equals the online softmax with the output accumulator never "
         "rescaled when the maximum grows", "multiply the accumulated output by exp(m - m_new) too, before "
         "adding the block's exp(s - m_new) @ v", dict(rescale_out=False)),
        ("no-rescale", f"your {what} equals the online softmax with neither the sum nor the output rescaled "
         "when the maximum grows", "both the running sum and the output accumulator hold terms relative to the "
         "old maximum: multiply both by exp(m - m_new)", dict(rescale_sum=False, rescale_out=False)),
        ("output-not-normalised", f"your {what} equals the accumulated output never divided by the running sum",
         "at the end of a query block, divide the accumulator by its running sum l", dict(normalise=False)),
        ("partial-block-dropped", f"your {what} equals blockwise attention without the last, shorter block",
         "loop with range(0, L, block_size) and cut each block at min(start + block_size, L): when L is not a "
         "multiple of block_size the last block is shorter, not missing", dict(drop_partial=True)),
        ("no-scale", f"your {what} equals attention without the 1/sqrt(d_k) scale",
         "multiply the scores by 1 / math.sqrt(d_k)", dict(scale=1.0)),
        ("scale-1/sqrt(d_v)", f"your {what} equals attention scaled by 1/sqrt(d_v)",
         "use the key width d_k = q.shape[-1], not the value width", dict(scale=1 / math.sqrt(d_v))),
        ("scale-1/d_k", f"your {what} equals attention scaled by 1/d_k", "the scale is 1/sqrt(d_k), a square root",
         dict(scale=1 / d_k)),
    ]
    if which == LSE:
        cands += [
            ("lse-is-max", "your lse equals the running maximum alone", "the log-sum-exp is m + log(l): the "
             "maximum plus the log of the running sum", dict(lse="max")),
            ("lse-without-max", "your lse equals log(l), the log of the running sum without the maximum",
             "the running sum holds exp(s - m): add m back, lse = m + log(l)", dict(lse="no-max")),
            ("lse-base-2", "your lse is in log2 units (the natural one divided by ln 2)", "with exp2 and "
             "log2 (scores times log2(e)), convert back: lse = (m2 + log2(l)) * ln(2)", dict(lse="base2")),
        ]
    if causal:
        cands.append(("causal-ignored", f"your {what} equals attention without the causal mask",
                      "with causal=True, query i may only see keys 0 .. L_k - L_q + i", {"causal": False}))
    found = []
    for name, sentence, fix, knobs in cands:
        call_args = (q, k, v, knobs.pop("causal", causal), block_size)
        found.append(Variant(name, sentence, blockwise(*call_args, **knobs)[which], fix))
    return found


# Every mistake this suite names, by id. Value ids come from the variants above (matched on values);
# the others from the check that catches them.
CATALOGUE = {
    "causal-top-left": "the causal mask aligned top-left instead of bottom-right",
    "causal-diagonal-skipped": "key blocks crossing the causal diagonal skipped instead of masked",
    "causal-diagonal-unmasked": "the block on the causal diagonal computed without its mask",
    "causal-ignored": "causal=True ignored",
    "running-sum-not-rescaled": "the running sum not rescaled when the running maximum grows",
    "output-not-rescaled": "the output accumulator not rescaled when the running maximum grows",
    "no-rescale": "neither the running sum nor the output rescaled when the maximum grows",
    "output-not-normalised": "the output never divided by the running sum",
    "partial-block-dropped": "the last, shorter block left out when L is not a multiple of block_size",
    "no-scale": "no 1/sqrt(d_k) scale",
    "scale-1/sqrt(d_v)": "scaled by the value width instead of the key width",
    "scale-1/d_k": "scores divided by d_k instead of sqrt(d_k)",
    "lse-is-max": "the running maximum returned as the lse",
    "lse-without-max": "log(l) returned as the lse, without the maximum added back",
    "lse-base-2": "the lse returned in log2 units",
    # named from a dtype, a shape, an exception or a property check
    "lse-not-float32": "the lse of float16 / bfloat16 inputs not returned in float32",
    "lse-keepdim": "the lse returned with a trailing size-1 axis",
    "softmax-overflow": "exp of the raw scores without subtracting the running maximum: overflows",
    "running-max-init-zero": "the running maximum started at 0 instead of -inf: exp underflows when every score is very negative",
    "quadratic-memory": "the whole (L_q, L_k) score matrix (or mask) built: memory grows like L^2",
    "future-blocks-computed": "with causal=True, key blocks entirely in the future computed (and masked) instead of skipped",
    # the generic ones this suite can reach (it returns no bool and takes no gradient)
    **{k: v for k, v in GENERIC_MISCONCEPTIONS.items() if k not in ("not-bool", "no-gradient", "gradient-mismatch")},
}
