# bug: builds an nn.MultiheadAttention at import time and runs it on every call "to compare against the library"
# expect-kind: forbidden
# expect-misconception: forbidden-api
# expect-test: test_functions_defined

import math

import torch
from torch import nn

_LIBRARY = nn.MultiheadAttention(embed_dim=4, num_heads=1, batch_first=True)


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    output = weights @ v
    with torch.no_grad():
        probe = torch.zeros(1, 2, 4)
        _LIBRARY(probe, probe, probe)          # a sanity check left in
    return output, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)
    k_pos = torch.arange(L_k, device=device)[None, :]
    return k_pos <= q_pos

