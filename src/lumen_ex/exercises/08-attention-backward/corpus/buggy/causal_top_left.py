# bug: the causal mask is torch.tril() with no offset: aligned top-left, wrong when L_q < L_k
# expect-kind: values
# expect-misconception: causal-top-left
# expect-test: test_causal[rectangular]

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    scale = 1 / math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1) * scale
    if causal:
        mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    dv = p.transpose(-2, -1) @ d_out
    dp = d_out @ v.transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
    dq = ds @ k * scale
    dk = ds.transpose(-2, -1) @ q * scale
    return dq, dk, dv
