"""Known wrong versions of exercise 5, computed in float64 on the same inputs as the reference.

When a learner's output or lse differs from the reference, the harness compares it with each
variant here and names the first one that matches. Most mistakes of a blockwise online softmax
show only block by block (a running sum not rescaled when the maximum moves, a diagonal block
skipped, a last partial block dropped), so every variant is the same blockwise loop, in float64,
with the learner's own ``block_size`` and exactly one thing done differently (:func:`blockwise_many`
computes them all in one loop).
The hidden inputs (L_q = 20, L_k = 37, block sizes that divide neither, unit-variance scores)
keep the variants apart from the reference and from each other.
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant

LN2 = math.log(2.0)


KNOBS = dict(causal=False, scale=None, rescale_sum=True, rescale_out=True, normalise=True, lse="natural",
             align="bottom-right", diagonal="mask", drop_partial=False)


def blockwise(q, k, v, causal=False, block_size=64, **knobs):
    """The online softmax in float64 with one knob turned: (output (..., L_q, d_v), lse (..., L_q)).

    The knobs (:func:`blockwise_many` says what each does) default to the correct algorithm."""
    return blockwise_many(q, k, v, block_size, [{"causal": causal, **knobs}])[0]


def blockwise_many(q, k, v, block_size: int, variants: list[dict]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The online softmax in float64 for several settings of the knobs at once, one loop over the
    key blocks for all of them: a list of (output (..., L_q, d_v), lse (..., L_q)), one per dict.

    The knobs (any left out take their :data:`KNOBS` default, the correct algorithm):
    causal: mask the future. scale: the scores' factor (None: 1/sqrt(d_k)). rescale_sum /
    rescale_out: multiply the running sum / the output accumulator by exp(old max - new max) when a
    block raises the maximum. normalise: divide the output by the running sum at the end. lse:
    "natural" (m + log l), "max" (m alone), "base2" (in log2 units, (m + log l) / ln 2), "no-max"
    (log l alone). align: where the causal diagonal sits, "bottom-right" (query i at position
    L_k - L_q + i) or "top-left" (query i at position i). diagonal: for the key blocks that cross
    the causal diagonal, "mask" them, "skip" them, or take them "unmasked". drop_partial:
    range(L // block_size) loops, which leave out the last partial block of queries (their rows
    stay 0) and of keys.

    Every query row of every setting runs the same loop over key blocks as in the learner's code,
    so they are computed together, on a leading axis of settings (V): a key block that a row's
    query block would not visit counts as all -inf scores, which leaves that row's m, l and o
    exactly as they were. One loop for all settings costs a learner's failing check one pass over
    the blocks instead of one per mistake (16 of them with causal=True): measured on the suite's
    default sizes with causal=True, both lists took 0.18 s one setting at a time at block_size 1
    and 0.014 s together (0.030 and 0.003 s at block_size 8).
    """
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    L_q, d_k, L_k = q.shape[-2], q.shape[-1], k.shape[-2]
    settings = [{**KNOBS, **knobs} for knobs in variants]
    n_batch = q.dim() - 2

    def per_setting(values, dtype=None):                                       # (V,) as (V, 1.., 1, 1)
        return torch.tensor(values, dtype=dtype).view(len(values), *[1] * (n_batch + 2))

    def per_row(values):                                                       # (V,) as (V, 1): against (1, L_q)
        return torch.tensor(values)[:, None]

    scale = per_setting([1 / math.sqrt(d_k) if st["scale"] is None else st["scale"] for st in settings],
                        torch.float64)
    rescale_sum, rescale_out, normalise = (per_setting([st[n] for st in settings]) for n in
                                           ("rescale_sum", "rescale_out", "normalise"))
    causal = per_row([bool(st["causal"]) for st in settings])
    offset = per_row([L_k - L_q if st["align"] == "bottom-right" else 0 for st in settings])
    q_end = per_row([(L_q // block_size) * block_size if st["drop_partial"] else L_q for st in settings])
    k_stop = per_row([(L_k // block_size) * block_size if st["drop_partial"] else L_k for st in settings])
    skip = causal & per_row([st["diagonal"] == "skip" for st in settings])
    masked = causal & per_row([st["diagonal"] == "mask" for st in settings])
    rows = torch.arange(L_q)[None, :]                                          # (1, L_q)
    i0 = rows // block_size * block_size                                       # each row's query block
    i1 = torch.clamp(i0 + block_size, max=L_q)
    q_pos = rows + offset                                                      # (V, L_q)
    batch_ones = [1] * n_batch

    qs = q[None] * scale                                                       # (V, ..., L_q, d_k)
    m = torch.full(qs.shape[:-1], -math.inf, dtype=torch.float64)              # (V, ..., L_q)
    row_sum = torch.zeros(qs.shape[:-1], dtype=torch.float64)                  # (V, ..., L_q)
    o = torch.zeros(*qs.shape[:-1], v.shape[-1], dtype=torch.float64)          # (V, ..., L_q, d_v)
    for j0 in range(0, L_k, block_size):
        j1 = min(j0 + block_size, L_k)
        visits = (rows < q_end) & (j0 < k_stop)                                # (V, L_q)
        reaches = j0 < torch.clamp(offset + i1, max=L_k)                       # the block's key loop reaches j0
        crosses = j1 - 1 > offset + i0                                         # (V, L_q)
        visits &= ~causal | (reaches & ~(skip & crosses))
        hidden = (masked & crosses)[..., None] & (torch.arange(j0, j1)[None, None, :] > q_pos[..., None])
        hidden = hidden | ~visits[..., None]                                   # (V, L_q, b_k)
        hidden = hidden.view(len(settings), *batch_ones, L_q, j1 - j0)         # (V, 1.., L_q, b_k)
        s = (qs @ k[..., j0:j1, :].transpose(-2, -1)).masked_fill(hidden, -math.inf)   # (V, ..., L_q, b_k)
        m_new = torch.maximum(m, s.amax(dim=-1))                               # (V, ..., L_q)
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - shift[..., None])                                    # (V, ..., L_q, b_k)
        alpha = torch.exp(m - shift)                                           # (V, ..., L_q)
        row_sum = torch.where(rescale_sum[..., 0], row_sum * alpha, row_sum) + p.sum(dim=-1)
        o = torch.where(rescale_out, o * alpha[..., None], o) + p @ v[..., j0:j1, :]
        m = m_new
    kept = (rows < q_end).view(len(settings), *batch_ones, L_q)                # dropped rows stay 0
    out = torch.where(normalise, o / row_sum[..., None], o)
    natural = m + torch.log(row_sum)                                           # (V, ..., L_q)
    lses = {"natural": natural, "max": m, "base2": natural / LN2, "no-max": torch.log(row_sum)}
    results = []
    for n, st in enumerate(settings):
        lse_out = lses[st["lse"]][n]
        results.append((torch.where(kept[n][..., None], out[n], torch.zeros_like(out[n])),
                        torch.where(kept[n], lse_out, torch.zeros_like(lse_out))))
    return results


def flash_variants(q, k, v, causal=False, block_size=64) -> tuple[list[Variant], list[Variant]]:
    """Wrong answers on these inputs, most common first: (those of the output, those of the lse).

    Each mistake runs the blockwise loop once and gives both lists its two results (the lse list
    has the lse-only mistakes besides), so a check that compares both tensors pays for one loop
    per mistake, not two."""
    d_k, d_v = q.shape[-1], v.shape[-1]
    # (id, sentence with {what} for "output" or "lse", fix, knobs, lse only)
    cands = []
    if causal:
        cands += [
            ("causal-top-left", "your {what} equals causal attention with the mask aligned top-left (query i at "
             "position i)", "align it bottom-right as in exercise 1: query i sits at position L_k - L_q + i, so it "
             "sees keys 0 .. L_k - L_q + i", dict(align="top-left"), False),
            ("causal-diagonal-skipped", "your {what} equals causal attention that leaves out every key block "
             "crossing the diagonal", "a block that is only partly in the future must still be computed, with "
             "its future keys masked to -inf; skip only blocks entirely in the future", dict(diagonal="skip"), False),
            ("causal-diagonal-unmasked", "your {what} equals causal attention that skips the future blocks but "
             "does not mask the block on the diagonal", "inside a block that crosses the diagonal, set the scores "
             "of keys after the query's position to -inf", dict(diagonal="unmasked"), False),
        ]
    cands += [
        ("running-sum-not-rescaled", "your {what} equals the online softmax with the running sum never "
         "rescaled when the maximum grows", "when a block raises the maximum from m to m_new, multiply the sum "
         "by exp(m - m_new) before adding the block's exp(s - m_new).sum(-1)", dict(rescale_sum=False), False),
        ("output-not-rescaled", "your {what} equals the online softmax with the output accumulator never "
         "rescaled when the maximum grows", "multiply the accumulated output by exp(m - m_new) too, before "
         "adding the block's exp(s - m_new) @ v", dict(rescale_out=False), False),
        ("no-rescale", "your {what} equals the online softmax with neither the sum nor the output rescaled "
         "when the maximum grows", "both the running sum and the output accumulator hold terms relative to the "
         "old maximum: multiply both by exp(m - m_new)", dict(rescale_sum=False, rescale_out=False), False),
        ("output-not-normalised", "your {what} equals the accumulated output never divided by the running sum",
         "at the end of a query block, divide the accumulator by its running sum l", dict(normalise=False), False),
        ("partial-block-dropped", "your {what} equals blockwise attention without the last, shorter block",
         "loop with range(0, L, block_size) and cut each block at min(start + block_size, L): when L is not a "
         "multiple of block_size the last block is shorter, not missing", dict(drop_partial=True), False),
        ("no-scale", "your {what} equals attention without the 1/sqrt(d_k) scale",
         "multiply the scores by 1 / math.sqrt(d_k)", dict(scale=1.0), False),
        ("scale-1/sqrt(d_v)", "your {what} equals attention scaled by 1/sqrt(d_v)",
         "use the key width d_k = q.shape[-1], not the value width", dict(scale=1 / math.sqrt(d_v)), False),
        ("scale-1/d_k", "your {what} equals attention scaled by 1/d_k", "the scale is 1/sqrt(d_k), a square root",
         dict(scale=1 / d_k), False),
        ("lse-is-max", "your lse equals the running maximum alone", "the log-sum-exp is m + log(l): the "
         "maximum plus the log of the running sum", dict(lse="max"), True),
        ("lse-without-max", "your lse equals log(l), the log of the running sum without the maximum",
         "the running sum holds exp(s - m): add m back, lse = m + log(l)", dict(lse="no-max"), True),
        ("lse-base-2", "your lse is in log2 units (the natural one divided by ln 2)", "with exp2 and "
         "log2 (scores times log2(e)), convert back: lse = (m2 + log2(l)) * ln(2)", dict(lse="base2"), True),
    ]
    if causal:
        cands.append(("causal-ignored", "your {what} equals attention without the causal mask",
                      "with causal=True, query i may only see keys 0 .. L_k - L_q + i", {"causal": False}, False))
    outputs: list[Variant] = []
    lses: list[Variant] = []
    values = blockwise_many(q, k, v, block_size, [{"causal": causal, **knobs} for _, _, _, knobs, _ in cands])
    for (name, sentence, fix, _, lse_only), (out, lse) in zip(cands, values):
        if not lse_only:
            outputs.append(Variant(name, sentence.format(what="output"), out, fix))
        lses.append(Variant(name, sentence.format(what="lse"), lse, fix))
    return outputs, lses


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
