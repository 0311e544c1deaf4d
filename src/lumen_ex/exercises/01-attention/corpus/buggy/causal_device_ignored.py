# bug: causal_mask accepts device= but never passes it on: the mask is always made on the CPU
# expect-kind: device
# expect-misconception: causal-device-ignored
# expect-test: test_causal_mask_on_meta

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
    return torch.ones(L_q, L_k, dtype=torch.bool).tril(L_k - L_q)
