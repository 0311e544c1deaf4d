# expect-note: test_dtype[float64] test_gradients_flow
"""Correct: every input converted to float32, the whole attention computed in float32, and both
results cast back to the inputs' dtype at the end. Float64 inputs get float64 results carrying
float32 rounding: accepted, with a note (docs/tolerances.md)."""

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    dtype = q.dtype
    q32, k32, v32 = q.float(), k.float(), v.float()
    scores = q32 @ k32.transpose(-2, -1) / math.sqrt(q.size(-1))          # (..., L_q, L_k), float32
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)                               # (..., L_q, L_k)
    output = weights @ v32                                                # (..., L_q, d_v)
    return output.to(dtype), weights.to(dtype)


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)        # (L_q, 1)
    k_pos = torch.arange(L_k, device=device)[None, :]                      # (1, L_k)
    return k_pos <= q_pos
