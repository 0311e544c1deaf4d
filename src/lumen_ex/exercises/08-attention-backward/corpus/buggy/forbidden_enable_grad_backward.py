# bug: turns autograd back on with torch.enable_grad() and lets .backward() do the work
# expect-kind: forbidden
# expect-misconception: forbidden-api

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    with torch.enable_grad():
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if causal:
            L_q, L_k = q.size(-2), k.size(-2)
            mask = torch.ones(L_q, L_k, dtype=torch.bool, device=q.device).tril(L_k - L_q)
            scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        out.backward(d_out)
    return q.grad, k.grad, v.grad
