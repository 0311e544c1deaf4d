# bug: torch.autograd.grad on a forward pass computed under torch.set_grad_enabled(True)
# expect-kind: forbidden
# expect-misconception: forbidden-api

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with torch.set_grad_enabled(True):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if causal:
            L_q, L_k = q.size(-2), k.size(-2)
            mask = torch.ones(L_q, L_k, dtype=torch.bool, device=q.device).tril(L_k - L_q)
            scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_outputs=d_out)
    return dq, dk, dv
