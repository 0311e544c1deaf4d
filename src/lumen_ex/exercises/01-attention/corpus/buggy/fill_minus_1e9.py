# bug: fills masked scores with -1e9 instead of float("-inf"): right in float32 and float64, but float16 cannot hold -1e9 and masked_fill raises
# expect-kind: exception
# expect-misconception: fill-overflows-dtype
# expect-test: test_dtype[float16]

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)
