# bug: builds causal_mask as the last L_q rows of a square (L_k, L_k) mask: right whenever L_q <= L_k, but with more queries than keys there are only L_k rows to take, and the queries that see no key lose their (all-False) rows
# expect-kind: shape
# expect-misconception: causal-empty-rows-dropped
# expect-test: test_causal_mask[more-queries]

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    square = torch.ones(L_k, L_k, dtype=torch.bool, device=device).tril()   # (L_k, L_k)
    return square[L_k - L_q:]                                               # the last L_q rows, if there are that many
