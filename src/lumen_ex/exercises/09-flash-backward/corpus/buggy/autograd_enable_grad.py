# bug: lets autograd do the work: recomputes the forward under enable_grad and calls torch.autograd.grad
# expect-kind: forbidden
# expect-misconception: forbidden-api
import math

import torch


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_size=64):
    with torch.enable_grad():
        q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
        s = q_ @ k_.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            L_q, L_k = q.shape[-2], k.shape[-2]
            keep = torch.ones(L_q, L_k, dtype=torch.bool, device=q.device).tril(L_k - L_q)
            s = s.masked_fill(~keep, float("-inf"))
        o = torch.softmax(s, dim=-1) @ v_
        return torch.autograd.grad(o, (q_, k_, v_), grad_outputs=d_out)
