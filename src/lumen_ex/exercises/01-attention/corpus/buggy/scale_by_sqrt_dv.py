# bug: scales by 1/sqrt(d_v): uses the value width instead of the key width
# expect-kind: values
# expect-misconception: scale-1/sqrt(d_v)

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    d = v.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)
    k_pos = torch.arange(L_k, device=device)[None, :]
    return k_pos <= q_pos
