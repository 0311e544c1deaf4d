# bug: softmax(scores.float()) and a float32 product with v, never cast back: float64 (and float16, bfloat16) inputs get float32 results
# expect-kind: dtype
# expect-misconception: float32-not-cast-back
# expect-test: test_dtype[float64]

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1)      # float32, whatever the inputs were
    return weights @ v.float(), weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)
    k_pos = torch.arange(L_k, device=device)[None, :]
    return k_pos <= q_pos
