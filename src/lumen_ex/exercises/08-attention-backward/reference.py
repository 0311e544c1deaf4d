"""Reference for exercise 8: the backward pass of scaled dot-product attention, by hand.

The forward pass (exercise 1) is recomputed here, then every gradient follows from the chain rule:

    S = q k^T / sqrt(d_k)          P = softmax(S) (masked)       out = P v
    dv = P^T d_out                 dP = d_out v^T
    dS = P * (dP - rowsum(dP * P))                               (the softmax's Jacobian, row by row)
    dq = dS k / sqrt(d_k)          dk = dS^T q / sqrt(d_k)
"""

from __future__ import annotations

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    """The gradients of sum(out * d_out) with respect to q, k and v, for out = softmax(q k^T / sqrt(d_k)) v.

    q: (..., L_q, d_k)   k: (..., L_k, d_k)   v: (..., L_k, d_v)   d_out: (..., L_q, d_v)
    causal: a bottom-right causal mask (query i sits at position L_k - L_q + i), as in exercise 1.
    Returns (dq, dk, dv), shaped like q, k and v, in their dtype and on their device.
    """
    L_q, L_k = q.size(-2), k.size(-2)
    scale = 1 / math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1) * scale                             # (..., L_q, L_k)
    if causal:
        q_pos = torch.arange(L_q, device=q.device)[:, None] + (L_k - L_q)   # (L_q, 1)
        k_pos = torch.arange(L_k, device=q.device)[None, :]                 # (1, L_k)
        scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
    p = torch.softmax(scores, dim=-1)                                    # (..., L_q, L_k)

    dv = p.transpose(-2, -1) @ d_out                                     # (..., L_k, d_v)
    dp = d_out @ v.transpose(-2, -1)                                     # (..., L_q, L_k)
    row = (dp * p).sum(dim=-1, keepdim=True)                             # (..., L_q, 1)
    ds = p * (dp - row)                                                  # (..., L_q, L_k)
    dq = ds @ k * scale                                                  # (..., L_q, d_k)
    dk = ds.transpose(-2, -1) @ q * scale                                # (..., L_k, d_k)
    return dq, dk, dv
