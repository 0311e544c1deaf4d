"""Exercise 1: scaled dot-product attention. Read README.md in this folder first."""

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    """Return (output, weights) for attention of queries q over keys k and values v.

    q: (..., L_q, d_k)   k: (..., L_k, d_k)   v: (..., L_k, d_v)
    mask: optional bool tensor, broadcastable to (..., L_q, L_k); True = this query may attend to this key.
    output: (..., L_q, d_v)   weights: (..., L_q, L_k), each row summing to 1.
    """
    # TODO: score every query against every key, scaled by 1 / sqrt(d_k).
    # TODO: where the mask is False, make the score -inf.
    # TODO: softmax over the keys, then mix the values with those weights.
    raise NotImplementedError("scaled_dot_product_attention is not written yet")


def causal_mask(L_q, L_k=None, device=None):
    """Bool mask of shape (L_q, L_k), aligned bottom-right; square (L_q, L_q) when L_k is None.

    Query i sits at position L_k - L_q + i and may see keys 0 .. L_k - L_q + i.
    """
    # TODO: build it with torch.arange on `device`, comparing query and key positions.
    raise NotImplementedError("causal_mask is not written yet")
