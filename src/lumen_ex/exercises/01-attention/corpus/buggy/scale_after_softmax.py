# bug: takes the softmax of the raw scores and applies the 1/sqrt(d_k) scale to the weights afterwards: each row of weights sums to 1/sqrt(d_k)
# expect-kind: values
# expect-misconception: scale-after-softmax
# expect-test: test_values[4d]

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1) / math.sqrt(q.size(-1))
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)
