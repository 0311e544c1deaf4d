# bug: calls F.multi_head_attention_forward with identity projections to get the output
# expect-kind: forbidden
# expect-misconception: forbidden-api
# expect-test: test_returns_output_and_weights

import math

import torch
import torch.nn.functional as F


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    output = weights @ v
    d = q.size(-1)
    x = torch.zeros(1, 1, d, dtype=q.dtype, device=q.device)           # (L, N, E)
    eye = torch.eye(d, dtype=q.dtype, device=q.device)
    F.multi_head_attention_forward(x, x, x, d, 1, torch.cat([eye, eye, eye]), None, None, None, False, 0.0,
                                   eye, None, training=False, need_weights=False)
    return output, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)
    k_pos = torch.arange(L_k, device=device)[None, :]
    return k_pos <= q_pos

