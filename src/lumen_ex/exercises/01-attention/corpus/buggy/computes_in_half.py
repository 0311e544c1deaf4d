# bug: computes in half precision "for speed" with .half() and returns that: float32 and float64 inputs get float16 results
# expect-kind: dtype
# expect-misconception: dtype-downcast
# expect-test: test_values[4d]

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    q, k, v = q.half(), k.half(), v.half()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)
