# bug: builds the additive mask bias with torch.zeros(mask.shape, dtype=q.dtype) and no device=: right on the CPU, but on any other device the CPU bias meets the inputs and torch raises
# expect-kind: exception
# expect-misconception: new-tensor-device
# expect-test: test_runs_on_meta

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        bias = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, float("-inf"))
        scores = scores + bias
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)
