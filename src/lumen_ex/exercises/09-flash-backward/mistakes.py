"""Known wrong versions of exercise 9, computed in float64 on the same inputs as the reference.

When a learner's dq, dk or dv differs from the reference, the harness compares it with each
variant here and names the first one that matches. The mistakes of a blockwise backward show
block by block (a row term summed over one key block only, dk and dv kept from the last query
block, a diagonal block left unmasked, a last partial block dropped), so :func:`backward` is the
whole computation in float64 with whole matrices, in which each block's part is chosen by masks
built from the learner's own ``block_size``, with keyword knobs that each make exactly one change.
The hidden inputs (L_q = 7, L_k = 17, block_size 3: neither length a multiple of it, and with
causal=True blocks that cross the diagonal and one that is skipped) keep the variants apart.
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant

OUTPUTS = ("dq", "dk", "dv")


def backward(q, k, v, out, lse, d_out, causal=False, block_size=64, *, p="lse", row_term="row",
             dkdv="all", grad_scale=True, align="bottom-right", diagonal="mask", drop_partial=False):
    """(dq, dk, dv) in float64, as the blockwise loop computes them, with one knob turned.

    The knobs default to the correct algorithm. p: how each block of weights is recomputed,
    "lse" (exp(s - lse)), "no-lse" (exp(s)), "unscaled" (exp(q k^T - lse): the scores not scaled
    before lse, which belongs to the scaled ones, is subtracted). row_term: the D in
    dS = P * (dP - D), "row" (rowsum(d_out * out), one per query), "block" (rowsum(P * dP) over
    the current key block only), "none" (dropped). dkdv: "all" query blocks add to dk and dv, or
    only the "last" (each one overwrites the last one's). grad_scale: dq and dk multiplied by
    1/sqrt(d_k). align: the causal diagonal "bottom-right" (query i at position L_k - L_q + i) or
    "top-left" (at i). diagonal: key blocks crossing the causal diagonal "mask"ed or "unmasked".
    drop_partial: range(L // block_size) loops, without the last partial block of either axis."""
    q, k, v, out, lse, d_out = (t.to(torch.float64) for t in (q, k, v, out, lse, d_out))
    L_q, d_k, L_k = q.shape[-2], q.shape[-1], k.shape[-2]
    scale = 1 / math.sqrt(d_k)
    rows, cols = torch.arange(L_q), torch.arange(L_k)
    i0 = rows // block_size * block_size                                     # each query's block start
    i1 = torch.clamp(i0 + block_size, max=L_q)
    j0 = cols // block_size * block_size                                     # each key's block start
    j1 = torch.clamp(j0 + block_size, max=L_k)
    offset = L_k - L_q if align == "bottom-right" else 0
    visited = torch.ones(L_q, L_k, dtype=torch.bool)                         # (L_q, L_k): the block pair is computed
    if drop_partial:
        visited &= (rows < L_q // block_size * block_size)[:, None] & (cols < L_k // block_size * block_size)[None, :]
    hidden = torch.zeros(L_q, L_k, dtype=torch.bool)                         # (L_q, L_k): masked to -inf
    if causal:
        visited &= ~(j0[None, :] > offset + i1[:, None] - 1)                 # blocks entirely in the future skipped
        crosses = j1[None, :] - 1 > offset + i0[:, None]
        if diagonal == "mask":
            hidden = crosses & (cols[None, :] > rows[:, None] + offset)
    raw = q @ k.transpose(-2, -1)                                            # (..., L_q, L_k)
    s = raw * scale
    exponent = {"lse": s - lse[..., None], "no-lse": s, "unscaled": raw - lse[..., None]}[p]
    keep = visited & ~hidden
    P = torch.where(keep, torch.exp(torch.where(keep, exponent, torch.zeros_like(exponent))),
                    torch.zeros_like(exponent))                              # (..., L_q, L_k)
    dP = d_out @ v.transpose(-2, -1)                                         # (..., L_q, L_k)
    if row_term == "row":
        D = (d_out * out).sum(dim=-1, keepdim=True)                          # (..., L_q, 1)
    elif row_term == "block":
        key_block = cols // block_size
        n_blocks = int(key_block[-1]) + 1
        sums = torch.zeros(*P.shape[:-1], n_blocks, dtype=torch.float64)     # (..., L_q, n_blocks)
        sums.index_add_(-1, key_block, P * dP)
        D = sums[..., key_block]                                             # (..., L_q, L_k)
    else:
        D = torch.zeros(1, dtype=torch.float64)
    dS = P * (dP - D)                                                        # (..., L_q, L_k)
    g = scale if grad_scale else 1.0
    dq = dS @ k * g                                                          # (..., L_q, d_k)
    if dkdv == "last":
        last = (rows >= (L_q - 1) // block_size * block_size).to(torch.float64)[:, None]   # (L_q, 1)
        dS, P = dS * last, P * last
    dk = dS.transpose(-2, -1) @ q * g                                        # (..., L_k, d_k)
    dv = P.transpose(-2, -1) @ d_out                                         # (..., L_k, d_v)
    return dq, dk, dv


def weights(q, k, lse, causal=False):
    """The forward's weights P = exp(s - lse) (..., L_q, L_k), in float64: what the picture of a
    wrong dv is compared with."""
    q, k, lse = (t.to(torch.float64) for t in (q, k, lse))
    L_q, L_k = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])                     # (..., L_q, L_k)
    if causal:
        s = s.masked_fill(torch.arange(L_k)[None, :] > torch.arange(L_q)[:, None] + (L_k - L_q), float("-inf"))
    return torch.exp(s - lse[..., None])


# (id, sentence with {what} for the tensor's name, fix, knobs), most common first
_MISTAKES = [
    ("p-without-lse", "your {what} equals the backward with each block of P recomputed as exp(s), without "
     "subtracting lse", "the forward's weights are P = exp(s - lse): subtract each query's lse from its row of "
     "scaled scores before the exp", dict(p="no-lse")),
    ("p-unscaled-scores", "your {what} equals the backward with P = exp(q k^T - lse): lse belongs to the scores "
     "scaled by 1/sqrt(d_k), and these are not", "scale the block's scores first, s = q_blk @ k_blk^T / sqrt(d_k), "
     "then P = exp(s - lse)", dict(p="unscaled")),
    ("d-per-block", "your {what} equals the backward with D = rowsum(dP * P) summed over the current key block "
     "only", "D is one number per query over ALL its keys: compute D = (d_out * out).sum(-1) once, before the "
     "loops, from the out you are given", dict(row_term="block")),
    ("row-term-dropped", "your {what} equals the backward with dS = P * dP, the softmax's row term D dropped",
     "the softmax's Jacobian gives dS = P * (dP - D), with D = rowsum(d_out * out) per query",
     dict(row_term="none")),
    ("dkdv-one-query-block", "your {what} equals the backward with dk and dv taken from the last query block "
     "only", "every query block adds to dk and dv of the key block: accumulate with +=, starting from zeros, "
     "never assign", dict(dkdv="last")),
    ("grad-scale-missing", "your {what} equals the gradient without the 1/sqrt(d_k) factor",
     "s = q k^T / sqrt(d_k), so the chain rule puts 1/sqrt(d_k) on both dq = dS @ k and dk = dS^T @ q",
     dict(grad_scale=False)),
    ("partial-block-dropped", "your {what} equals the backward without the last, shorter block",
     "loop with range(0, L, block_size) and cut each block at min(start + block_size, L): when L is not a "
     "multiple of block_size the last block is shorter, not missing", dict(drop_partial=True)),
]
_CAUSAL_MISTAKES = [
    ("causal-top-left", "your {what} equals the causal backward with the mask aligned top-left (query i at "
     "position i)", "align it bottom-right as in exercises 1 and 5: query i sits at key position L_k - L_q + i",
     dict(align="top-left")),
    ("causal-diagonal-unmasked", "your {what} equals the causal backward that skips the future blocks but does "
     "not mask the blocks crossing the diagonal", "in a block that crosses the diagonal, set the scores of keys "
     "after each query's position to -inf before P = exp(s - lse)", dict(diagonal="unmasked")),
    ("causal-ignored", "your {what} equals the backward without the causal mask",
     "with causal=True, query i sees only keys 0 .. L_k - L_q + i: skip the blocks in its future and mask the "
     "diagonal", dict(causal=False)),
]


def backward_variants(q, k, v, out, lse, d_out, causal=False, block_size=64) -> list[list[Variant]]:
    """Wrong answers on these inputs, most common first: one list for each of dq, dk, dv (a variant
    that leaves a tensor as the reference has it is left out by the harness on that tensor)."""
    listed = (_CAUSAL_MISTAKES if causal else []) + _MISTAKES
    found: list[list[Variant]] = [[], [], []]
    for name, sentence, fix, knobs in listed:
        values = backward(q, k, v, out, lse, d_out, **{"causal": causal, "block_size": block_size, **knobs})
        for n, (what, value) in enumerate(zip(OUTPUTS, values)):
            found[n].append(Variant(name, sentence.format(what=what), value, fix))
    return found


# Every mistake this suite names, by id. Value ids come from the variants above (matched on values);
# the others from the check that catches them.
CATALOGUE = {
    "p-without-lse": "each block of P recomputed as exp(s), without subtracting lse",
    "p-unscaled-scores": "P recomputed from the unscaled scores q k^T minus lse (lse of the scaled ones)",
    "d-per-block": "D = rowsum(dP * P) summed over one key block instead of the query's whole row",
    "row-term-dropped": "dS = P * dP: the softmax Jacobian's row term D dropped",
    "dkdv-one-query-block": "dk and dv taken from one query block (overwritten) instead of accumulated over all",
    "grad-scale-missing": "the 1/sqrt(d_k) factor forgotten in dq or dk",
    "partial-block-dropped": "the last, shorter block left out when L is not a multiple of block_size",
    "causal-top-left": "the causal mask aligned top-left instead of bottom-right",
    "causal-diagonal-unmasked": "the blocks crossing the causal diagonal computed without their mask",
    "causal-ignored": "causal=True ignored",
    # named from a property check
    "quadratic-memory": "a whole (L_q, L_k) matrix (scores, P, dS or a mask) built: memory grows like L^2",
    "future-blocks-computed": "with causal=True, blocks entirely in the future computed (and masked) instead of skipped",
    # the generic ones this suite can reach (it returns no bool and takes no gradient through autograd)
    **{k: v for k, v in GENERIC_MISCONCEPTIONS.items() if k not in ("not-bool", "no-gradient", "gradient-mismatch")},
}
