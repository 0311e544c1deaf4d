"""Exercise 5: FlashAttention, exact attention block by block with an online softmax. Read README.md in this folder first."""

import math

import torch


def flash_attention(q, k, v, causal=False, block_size=64):
    """Return (output, lse): exact attention of q over k and v, never building the (L_q, L_k) scores.

    q: (..., L_q, d_k)   k: (..., L_k, d_k)   v: (..., L_k, d_v)
    causal: if True, query i (at key position L_k - L_q + i) sees only keys 0 .. L_k - L_q + i.
    block_size: the length of a block of queries and of keys (any int >= 1; the last block may be shorter).
    output: (..., L_q, d_v) in q's dtype.
    lse: (..., L_q), the log-sum-exp of each query's scaled scores: in q's dtype, float32 for float16/bfloat16 q.
    """
    # TODO: loop over blocks of queries; for each, keep a running maximum m (start at -inf), a running
    #       sum l (start at 0) and an output accumulator o (start at 0), one per query.
    # TODO: loop over blocks of keys: score the block (scaled by 1 / sqrt(d_k)), raise m, rescale l and o
    #       by exp(m_old - m_new), then add exp(scores - m_new) (summed, and @ v).
    # TODO: with causal=True, skip the key blocks entirely in the future and mask the one on the diagonal.
    # TODO: output = o / l, lse = m + log(l), written into the rows of this query block.
    raise NotImplementedError("flash_attention is not written yet")
