# bug: P recomputed for the backward as exp(S - lse) from the unmasked scores: future keys get weight
# expect-kind: values
# expect-misconception: backward-mask-missing
# expect-test: test_causal[rectangular]

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    scale = 1 / math.sqrt(q.size(-1))
    s = q @ k.transpose(-2, -1) * scale
    masked = s
    if causal:
        L_q, L_k = q.size(-2), k.size(-2)
        future = torch.ones(L_q, L_k, dtype=torch.bool, device=q.device).triu(L_k - L_q + 1)
        masked = s.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(masked, dim=-1, keepdim=True)   # saved by the forward pass
    p = torch.exp(s - lse)                                 # recomputed in the backward
    dv = p.transpose(-2, -1) @ d_out
    dp = d_out @ v.transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
    dq = ds @ k * scale
    dk = ds.transpose(-2, -1) @ q * scale
    return dq, dk, dv
