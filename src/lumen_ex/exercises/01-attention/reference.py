"""Reference for exercise 1: scaled dot-product attention and the bottom-right causal mask."""

from __future__ import annotations

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d_k), masked) v, and the attention weights.

    q: (..., L_q, d_k)   k: (..., L_k, d_k)   v: (..., L_k, d_v)
    mask: bool, broadcastable to (..., L_q, L_k); True = this query may attend to this key.
    Returns output (..., L_q, d_v) and weights (..., L_q, L_k), in the dtype and on the device of q.
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)           # (..., L_q, L_k)
    if mask is not None:
        # -inf, not a large negative number: a masked key then gets exactly zero weight.
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)                      # (..., L_q, L_k), rows sum to 1
    return weights @ v, weights                                  # (..., L_q, d_v), (..., L_q, L_k)


def causal_mask(L_q, L_k=None, device=None):
    """Bool (L_q, L_k) mask, aligned bottom-right: query i sits at position L_k - L_q + i.

    Query i may see keys 0 .. L_k - L_q + i, so the last query sees every key (as the newest token
    does when decoding with a cache). Square (L_q, L_q) when L_k is None.
    """
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)   # (L_q, 1)
    k_pos = torch.arange(L_k, device=device)[None, :]                 # (1, L_k)
    return k_pos <= q_pos                                              # (L_q, L_k)
