# expect-note: test_dtype[float64] test_gradients_flow
"""Correct: F.softmax(..., dtype=torch.float32) (the softmax computed in float32 whatever the
input dtype), the weights cast back to the inputs' dtype before the product with v. Float64 inputs
get float64 results carrying float32 rounding: accepted, with a note (docs/tolerances.md)."""

import math

import torch
import torch.nn.functional as F


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.shape[-1]))     # (..., L_q, L_k)
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)   # (..., L_q, L_k)
    return weights @ v, weights                                            # (..., L_q, d_v)


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)   # (L_q, L_k)
