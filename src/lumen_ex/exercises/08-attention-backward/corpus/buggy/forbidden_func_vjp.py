# bug: torch.func.vjp, the functional autograd: the vector-Jacobian product is the whole exercise
# expect-kind: forbidden
# expect-misconception: forbidden-api

import math

import torch
from torch.func import vjp


def _attention(q, k, v, causal):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        L_q, L_k = q.size(-2), k.size(-2)
        mask = torch.ones(L_q, L_k, dtype=torch.bool, device=q.device).tril(L_k - L_q)
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def attention_backward(q, k, v, d_out, causal=False):
    _, pullback = vjp(lambda q_, k_, v_: _attention(q_, k_, v_, causal), q, k, v)
    return pullback(d_out)
