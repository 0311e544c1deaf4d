"""Exercise 9: the backward pass of FlashAttention, block by block from the saved lse. Read README.md in this folder first."""

import math

import torch


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_size=64):
    """Return (dq, dk, dv): the gradients of sum(output * d_out) for exercise 5's attention, by hand.

    q: (..., L_q, d_k)   k: (..., L_k, d_k)   v: (..., L_k, d_v)
    out: (..., L_q, d_v), the forward's output   lse: (..., L_q), the forward's log-sum-exp of each
    query's scaled scores (float32 for float16/bfloat16 inputs, else q's dtype)
    d_out: (..., L_q, d_v), the gradient of the loss with respect to the output
    causal: if True, query i (at key position L_k - L_q + i) sees only keys 0 .. L_k - L_q + i.
    block_size: the length of a block of queries and of keys (any int >= 1; the last block may be shorter).
    Returns dq (..., L_q, d_k), dk (..., L_k, d_k), dv (..., L_k, d_v), all in q's dtype.
    Autograd is off in this exercise: write the chain rule yourself, and never build an (L_q, L_k) matrix.
    """
    # TODO: D = (d_out * out).sum(-1), one number per query, once, before the loops (float32 for half inputs).
    # TODO: dq, dk, dv start as zeros; loop over key blocks [j0, j1) and, inside, query blocks [i0, i1).
    # TODO: with causal=True, skip a query block whose last query comes before the key block's first key,
    #       and mask (-inf) the scores of future keys in a block that crosses the diagonal.
    # TODO: per block: s = q_blk @ k_blk^T / sqrt(d_k); P = exp(s - lse_blk); dv_blk += P^T @ dO_blk;
    #       dP = dO_blk @ v_blk^T; dS = P * (dP - D_blk); dq_blk += dS @ k_blk / sqrt(d_k);
    #       dk_blk += dS^T @ q_blk / sqrt(d_k).
    # TODO: return dq, dk, dv cast back to q's dtype.
    raise NotImplementedError("flash_attention_backward is not written yet")
