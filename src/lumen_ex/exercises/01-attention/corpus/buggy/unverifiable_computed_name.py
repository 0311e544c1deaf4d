# bug: looks a torch function up by a name built at run time, which the grader cannot check for forbidden APIs
# expect-kind: forbidden
# expect-misconception: unverifiable-source
# expect-test: test_returns_output_and_weights
import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    softmax = getattr(torch, "soft" + "max")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)
