# bug: turns the bool mask into an additive bias with torch.zeros(mask.shape) and no dtype=: the float32 bias promotes float16 scores to float32, and the float32 weights then meet float16 v in a matmul, which raises
# expect-kind: exception
# expect-misconception: new-tensor-dtype
# expect-test: test_dtype[float16]

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        bias = torch.zeros(mask.shape, device=q.device).masked_fill(~mask, float("-inf"))
        scores = scores + bias
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)
