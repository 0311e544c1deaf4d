# bug: the softmax's backward taken elementwise, dS = P * dP: its row term rowsum(dP * P) is missing
# expect-kind: values
# expect-misconception: softmax-row-term-dropped
# expect-test: test_values

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    scale = 1 / math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1) * scale
    if causal:
        L_q, L_k = q.size(-2), k.size(-2)
        mask = torch.ones(L_q, L_k, dtype=torch.bool, device=q.device).tril(L_k - L_q)
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    dv = p.transpose(-2, -1) @ d_out
    dp = d_out @ v.transpose(-2, -1)
    ds = p * dp                       # softmax' = softmax, as for exp
    dq = ds @ k * scale
    dk = ds.transpose(-2, -1) @ q * scale
    return dq, dk, dv
