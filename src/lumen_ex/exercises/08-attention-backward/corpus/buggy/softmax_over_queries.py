# bug: recomputes the softmax over the queries (dim=-2), so the rows of P do not sum to 1; the row term is there, and the hint must not ask for it again
# expect-kind: property
# expect-test: test_shift_invariance

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    Lq, Lk = q.shape[-2], k.shape[-2]
    sc = 1.0 / math.sqrt(q.shape[-1])
    S = q @ k.transpose(-2, -1) * sc
    if causal:
        m = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).tril(Lk - Lq)
        S = S.masked_fill(~m, float("-inf"))
    P = torch.softmax(S, dim=-2)
    dv = P.transpose(-2, -1) @ d_out
    dP = d_out @ v.transpose(-2, -1)
    dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))
    return dS @ k * sc, dS.transpose(-2, -1) @ q * sc, dv
