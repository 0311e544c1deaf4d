# bug: .backward() on a forward pass, as in a training loop (autograd is off: there is no graph anyway)
# expect-kind: forbidden
# expect-misconception: forbidden-api

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    q = q.detach().clone().requires_grad_()
    k = k.detach().clone().requires_grad_()
    v = v.detach().clone().requires_grad_()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        L_q, L_k = q.size(-2), k.size(-2)
        mask = torch.ones(L_q, L_k, dtype=torch.bool, device=q.device).tril(L_k - L_q)
        scores = scores.masked_fill(~mask, float("-inf"))
    loss = ((torch.softmax(scores, dim=-1) @ v) * d_out).sum()
    loss.backward()
    return q.grad, k.grad, v.grad
